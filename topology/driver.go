package topology

import (
	"context"
)

// What Apply needs of the nodes: the Driver interface (the inventory
// package implements it) and the Change it is handed.

// Change is the move one apply makes, as its [Driver] needs it.
type Change struct {
	From         Topology // the topology moved from: Epoch-1's (To itself for a first epoch brought forward)
	To           Topology // the topology moved to, the one of Epoch
	Epoch        int64    // the epoch moved to
	Token        string   // its token
	Joined, Left []string // nodes that join and leave, sorted
	// Forward is set when the apply brings nodes that went back forward
	// (doc.go, "A node that went back"): step 3 ran to its end at Token,
	// and the nodes that left with it need not answer (they may be gone).
	Forward bool
	// Attempt names this apply at Token (Record.Attempt): drawn afresh
	// before an apply's first bump, read from the nodes at Token by a
	// resume or a forward. A token is the epoch and the topology's
	// fingerprint, so an apply of the same topology after every node went
	// back below Epoch runs at the same Token, as another attempt: what
	// the driver keeps of an attempt on the nodes it names by both.
	Attempt string
}

// Retirement is what [Driver.Retire] did.
type Retirement struct {
	Retired     int // stale order records marked moved
	Reinstalled int // records put back from their moved copy
	// TakenBack counts the counters a move forward, or a resume before
	// its bump (of a node that went back: fenced, or below c.From's
	// epoch), took off a node that came back holding them after the
	// change's transfer had moved them to their destination.
	TakenBack int
	// LeftBehind lists the counters of that kind a move forward left on
	// their node (c.Forward only): out of every instance's reach there,
	// their units counted on the transfer's destination too.
	LeftBehind []LeftCounter
}

// LeftCounter is a counter a move forward found on a node that came back
// holding it after a transfer had moved it off, and left there: the
// transfer's destination holds no marker of it (nothing says where its
// units are), it is a stock hash with units reserved (its parts, pending
// in the older copy, are settled by the reconcilers once the node is
// forward), or an earlier apply than the last moved it off (a stock hash
// of a route the node does not serve; only the last apply's transfers are
// taken back). No instance reads it there; an apply that would serve it
// again refuses until it is deleted (the inventory's stale-counter rule,
// doc.go "Stale counters on a joining node").
type LeftCounter struct {
	Node, Key string
	Why       string // "no marker", "units reserved", "held by pending parts" or "moved off by an earlier apply"
}

// Driver runs the protocol's steps on the nodes (the inventory package
// implements it). Every method names the node in its errors; none is
// called concurrently with another by one Apply.
type Driver interface {
	// Read returns the named node's record (Epoch 0 when it has none). It
	// fails when the node is not configured or does not answer: every
	// node of both topologies must.
	Read(ctx context.Context, node string) (Record, error)
	// Write writes rec on the named node by compare-and-set: only when
	// the node's token is expect ("" = none), or already rec.Token (then
	// it only moves the phase from migrating to stable, never back, and
	// gives a record without an attempt rec.Attempt; it fails when
	// rec.Attempt names another attempt than the record's). Otherwise it
	// fails and the node is unchanged. When rec.Incarnation is set, it
	// also fails, the node unchanged, unless the node is at that
	// incarnation (Record.Incarnation) or its record is stable at
	// rec.Token already (nothing to write): step 4 writes a node stable
	// only at the incarnation read before step 3 began, a move forward
	// only at the one read before its Retire (doc.go, "A copy taken
	// during step 3"), the repair of a lost record only at the one read
	// with it (doc.go, "A lost record").
	Write(ctx context.Context, node, expect string, rec Record) error
	// Pending returns how many parts are pending on the named node.
	Pending(ctx context.Context, node string) (int, error)
	// Check refuses change c for what the nodes hold, with an error
	// wrapping [ErrInvalid] that names the node and what is wrong (e.g. a
	// route c.From does not have whose counters from an earlier epoch sit
	// where c.To's route would not find them: an apply that removed the
	// route left them; added back over other nodes, their units would be
	// stranded and users could buy their limit again; or one on a node
	// that the removal did not mark: doc.go, "A route removed and added
	// back"). It writes nothing.
	// Every apply that starts a new epoch calls it, a dry run too, before
	// it writes any node. It refuses too a counter with units that c
	// would put in play on a node that does not serve it in c.From and
	// that no transfer of c explains (doc.go, "Stale counters on a
	// joining node").
	Check(ctx context.Context, c Change) error
	// Retire marks moved (dead, its data kept) every live order record
	// on the named nodes (each a node of c.From or c.To) that is not the
	// record's home in c.From, and then puts back on them the records
	// step 3 at c.Token had moved onto them; each node is written at the
	// token it holds. It runs before a node's bump: before an apply's
	// first, with every node stable at the current token, on every node
	// of both topologies; on a rerun that resumes an interrupted bump, on
	// the nodes not yet at the new token; before an apply of the current
	// topology brings nodes that went back forward (c.Forward), on those.
	// Such a node was at c.From's epoch (or, gone back, at an older one)
	// when step 3 began, and step 3 writes a node only once it is bumped,
	// so a live record on it away from its c.From home is an older copy
	// come back with its data (a node restored from a backup, even during
	// the apply, or rejoining with what it held when it left). Left live,
	// a move of the order's home onto that node would find it and keep it
	// over the order's current record (doc.go, "A node that went back").
	// And a record that step 3 moved onto it (a copy marked moved at
	// c.Token on another node, the order's c.From home) is gone with the
	// writes it lost, or older there: the moved copy is the order's
	// newest surviving record, and it is installed over what the node
	// holds. Marking or installing one again is harmless. Each node is
	// acted on at the token read from it, so its scripts are refused once
	// it moved on, and a node read at c.Token (moved on by an apply running
	// concurrently) is left alone. Before it writes anything, it refuses
	// (an error wrapping [ErrInvalid]) when a node behind c.Epoch holds a
	// stale counter c would put in play (doc.go, "Stale counters on a
	// joining node": quota counters too unless c.Forward). With
	// c.Forward, the named nodes at c.Token in phase migrating, or fenced
	// at c.Token and c.Attempt (an apply that found step 3 ended brings
	// them forward: doc.go, "A copy taken during step 3"), have what step
	// 3 moved off them taken back, their records left alone. Without
	// c.Forward, the named nodes that went back (fenced, or below
	// c.From's epoch) have what step 3 moved off them taken back too
	// before their bump, those counters only whose transfer's destination
	// holds its marker, and nothing left is reported (the step 3 after
	// the bump moves it, or, when that apply dies and a run after finds
	// step 3 ended, its move forward: c.Forward): the node then holds
	// none of them whichever apply's step 3, step 4 or move forward comes
	// next (doc.go, "The apply"; a concurrent apply of c whose step 3 had
	// passed the node before it went back no longer writes it stable:
	// [Driver.Write]'s incarnation).
	Retire(ctx context.Context, c Change, nodes []string) (Retirement, error)
	// CopyLimits gives the members that join a route of c.To the route's
	// per-user limits, before any instance can take quota on them, and
	// the members that stay a limit change some old member missed (its
	// record may leave with a leaving node), and returns how many it
	// wrote. Writing a limit again is harmless, and
	// never replaces a newer change of the new topology's: it is called
	// before an apply's first bump and again once the old nodes are
	// bumped (a limit changed by an old instance in between).
	CopyLimits(ctx context.Context, c Change) (int, error)
	// Relocate runs the first part of step 3 at c.Token: it moves every
	// order record whose home moved and decides every record still
	// staging. It reports migrating false, having moved nothing, when the
	// nodes already finished step 3 at c.Token. Every move is idempotent.
	Relocate(ctx context.Context, c Change) (m Moved, migrating bool, err error)
	// MoveCounters runs one pass of the rest of step 3: it transfers the
	// quota counters whose home moved and the leaving nodes' stock, and
	// settles the leaving nodes' due pending parts. It returns how many
	// counters could not move yet because pending parts still count them,
	// plus the parts still pending (or set aside) on leaving nodes: a
	// node leaves only once it holds none. m.SetAside lists the parts set
	// aside on leaving nodes at the end of the pass.
	// Every transfer happens once, whatever the passes and reruns.
	MoveCounters(ctx context.Context, c Change) (m Moved, waiting int, err error)
}
