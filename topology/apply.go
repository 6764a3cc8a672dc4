package topology

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"
)

// ErrInvalid is wrapped by the errors of an apply refused for its input or
// for the nodes' state (no record yet and no From, From not the applied
// topology, a node at another token): nothing was written, and running it
// again with the same input fails alike.
var ErrInvalid = errors.New("topology: apply refused")

// Options configures [Apply].
type Options struct {
	// To is the topology to apply. Required: at least one route.
	To Topology
	// From is the topology the caller believes is applied, or nil. When
	// given, Apply refuses unless the nodes are at From (or at To, to
	// resume); when the nodes have no record yet, From is written as
	// epoch 1 first.
	// default: nil (the applied topology is read from the nodes)
	From *Topology
	// Wait bounds how long step 3 waits for pending parts that keep a
	// quota counter or a leaving node's stock from moving (the parts settle
	// when their orders are confirmed, cancelled or expire). Past it, Apply
	// returns with Phase migrating and Waiting > 0: the instances keep
	// consulting the previous topology, which is safe, and running the
	// apply again later finishes.
	// default: 1 minute
	Wait time.Duration
	// DryRun checks and reports what would change without writing.
	DryRun bool
	// Logger receives progress.
	// default: slog.Default()
	Logger *slog.Logger
	// Crash, when set, is asked after each node is bumped (point "bump");
	// a non-nil error stops the apply there, as if its process died, and
	// Apply returns it. For tests and the schedule explorer only.
	// default: nil
	Crash func(ctx context.Context, point string) error
}

// Moved counts what step 3 moved (fields promoted into [Report]).
type Moved struct {
	OrdersMoved   int // order records (tombstones included) moved
	QuotasMoved   int // quota counters transferred
	StockMoved    int // stock hashes of leaving nodes transferred
	PartsSettled  int // pending parts of leaving nodes settled by the apply
	StagedDecided int // staging records (one-round reservations) the apply decided
}

func (m *Moved) add(o Moved) {
	m.OrdersMoved += o.OrdersMoved
	m.QuotasMoved += o.QuotasMoved
	m.StockMoved += o.StockMoved
	m.PartsSettled += o.PartsSettled
	m.StagedDecided += o.StagedDecided
}

// Report says what [Apply] did.
type Report struct {
	FromEpoch, ToEpoch int64
	From, To           Topology
	Joined, Left       []string // nodes that join or leave the inventory server
	LimitsCopied       int      // per-user limits written to joining route members
	Moved
	LeftPending int // pending parts leaving nodes held at the check
	// Waiting counts counters still held by pending parts when the apply
	// returned in phase migrating; run it again later to finish.
	Waiting        int
	Phase          Phase
	AlreadyApplied bool
	// Retired counts the stale order records the apply marked moved
	// before the bumps or a move forward (Driver.Retire), a resumed one's
	// included.
	Retired int
	// Reinstalled counts the order records step 3 had moved onto a node
	// that then went back, put back there from their moved copy before
	// the node's bump or its move forward (Driver.Retire): those written,
	// not those the node held already (put back by an earlier or
	// concurrent run, or an older copy that was the same record).
	Reinstalled int
	// Forward names the nodes of the applied topology an apply of it
	// brought forward to its token, without a step 3: they went back to
	// an older copy of their data (doc.go, "A node that went back").
	Forward []string
}

// Change is the move one apply makes, as its [Driver] needs it.
type Change struct {
	From, To     Topology
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
	// fails and the node is unchanged.
	Write(ctx context.Context, node, expect string, rec Record) error
	// Pending returns how many parts are pending on the named node.
	Pending(ctx context.Context, node string) (int, error)
	// Check refuses change c for what the nodes hold, with an error
	// wrapping [ErrInvalid] that names the node and what is wrong (e.g. a
	// route c.From does not have whose counters from an earlier epoch sit
	// where c.To's route would not find them: an apply that removed the
	// route left them; added back over other nodes, their units would be
	// stranded and users could buy their limit again). It writes nothing.
	// Every apply that starts a new epoch calls it, a dry run too, before
	// it writes any node.
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
	// concurrently) is left alone.
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
	// counters could not move yet because pending parts still count them.
	// Every transfer happens once, whatever the passes and reruns.
	MoveCounters(ctx context.Context, c Change) (m Moved, waiting int, err error)
}

// Apply moves the nodes to opts.To following the protocol of the package
// doc: check, bump, migrate, stable. It is idempotent: run it again to
// resume an interrupted apply, or to finish one that returned in phase
// migrating (see Options.Wait).
func Apply(ctx context.Context, opts Options, d Driver) (Report, error) {
	if len(opts.To.Routes) == 0 {
		return Report{}, fmt.Errorf("%w: the new topology has no route", ErrInvalid)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Wait <= 0 {
		opts.Wait = time.Minute
	}
	a := &applier{d: d, opts: opts, log: opts.Logger, to: opts.To}
	return a.run(ctx)
}

type applier struct {
	d       Driver
	opts    Options
	log     *slog.Logger
	to      Topology
	rep     Report
	attempt string // Change.Attempt
}

func (a *applier) run(ctx context.Context) (Report, error) {
	fp := a.to.Fingerprint()
	a.rep.To = a.to
	cur, recs, err := a.current(ctx)
	if err != nil {
		return a.rep, err
	}
	a.rep.FromEpoch, a.rep.From = cur.Epoch, cur.Current
	if cur.Current.Fingerprint() == fp {
		a.rep.ToEpoch = cur.Epoch
		stable := allStable(recs, cur.Token)
		switch {
		case (cur.Prev == nil && !anyFenced(recs, cur.Current.Nodes())) || (stable && allAt(recs, cur.Current.Nodes(), cur.Token)):
			a.rep.AlreadyApplied, a.rep.Phase = true, PhaseStable
			return a.rep, nil
		case cur.Phase == PhaseStable && stable:
			return a.forward(ctx, recs, cur)
		}
		a.rep.FromEpoch, a.rep.From = cur.Epoch-1, *cur.Prev // resume
		if a.attempt, err = attemptOf(recs, cur); err != nil {
			return a.rep, err
		}
		a.diff()
		if a.opts.DryRun {
			a.rep.Phase = PhaseMigrating
			return a.rep, nil
		}
		// An interrupted bump left nodes at the previous token (or one
		// went back to an older copy since): retire what came back on
		// them, then finish it.
		if err := a.retire(ctx, cur.Token, behind(recs, Union(cur.Prev.Nodes(), a.to.Nodes()), cur.Token)); err != nil {
			return a.rep, err
		}
		prevTok := Token(cur.Epoch-1, cur.Prev.Fingerprint())
		if err := a.bump(ctx, recs, prevTok, cur.Token, cur.Epoch, *cur.Prev); err != nil {
			return a.rep, err
		}
		return a.migrate(ctx, cur.Token)
	}
	return a.start(ctx, cur, recs, fp)
}

// start runs an apply that begins a new epoch after cur (the nodes'
// newest record, recs every node's): check, bump, migrate.
func (a *applier) start(ctx context.Context, cur Record, recs map[string]Record, fp string) (Report, error) {
	if a.opts.From != nil && a.opts.From.Fingerprint() != cur.Current.Fingerprint() {
		return a.rep, fmt.Errorf("%w: --from is %s, but the nodes are at epoch %d with %s", ErrInvalid, a.opts.From, cur.Epoch, cur.Current)
	}
	a.diff()
	if err := a.check(ctx, cur, recs); err != nil {
		return a.rep, err
	}
	a.rep.ToEpoch = cur.Epoch + 1
	tok := Token(cur.Epoch+1, fp)
	if err := a.d.Check(ctx, a.change(tok)); err != nil {
		return a.rep, err
	}
	if a.opts.DryRun {
		return a.rep, nil
	}
	a.attempt = newAttempt()
	if err := a.retire(ctx, tok, Union(cur.Current.Nodes(), a.to.Nodes())); err != nil {
		return a.rep, err
	}
	if err := a.copyLimits(ctx, tok); err != nil {
		return a.rep, err
	}
	if err := a.bump(ctx, recs, cur.Token, tok, cur.Epoch+1, cur.Current); err != nil {
		return a.rep, err
	}
	a.log.Info("topology: nodes at the new epoch", "epoch", cur.Epoch+1, "topology", a.to.String())
	return a.migrate(ctx, tok)
}

// forward brings the nodes of cur's topology that are behind its token
// to it when every node at the token is stable: step 3 ran to its end,
// and a node behind went back to an older copy of its data (doc.go, "A
// node that went back"). The driver first retires what came back on
// them and puts back what step 3 had moved onto them (Driver.Retire,
// c.Forward); then each is written cur's stable record by compare-and-set
// from the token read. No other node changes, and the nodes that left
// with cur's apply need not answer (they may be gone).
func (a *applier) forward(ctx context.Context, recs map[string]Record, cur Record) (Report, error) {
	for _, name := range cur.Current.Nodes() {
		if recs[name].Token != cur.Token {
			a.rep.Forward = append(a.rep.Forward, name)
		}
	}
	a.rep.Phase = PhaseStable
	if a.opts.DryRun {
		return a.rep, nil
	}
	attempt, err := attemptOf(recs, cur)
	if err != nil {
		return a.rep, err
	}
	from := cur.Current // a first epoch's fenced nodes: nothing moved
	if cur.Prev != nil {
		from = *cur.Prev
	}
	c := Change{From: from, To: a.to, Epoch: cur.Epoch, Token: cur.Token, Forward: true, Attempt: attempt}
	c.Joined, c.Left = joinedLeft(c.From, c.To)
	if err := a.retireAt(ctx, c, a.rep.Forward); err != nil {
		return a.rep, err
	}
	for _, name := range a.rep.Forward {
		// with cur's Prev: a forwarded node read first as the newest record
		// must still tell a rerun that the apply is not done (run's switch)
		stable := Record{Node: name, Epoch: cur.Epoch, Token: cur.Token, Current: cur.Current, Prev: cur.Prev, Phase: PhaseStable, Attempt: c.Attempt}
		if err := a.d.Write(ctx, name, recs[name].Token, stable); err != nil {
			return a.rep, fmt.Errorf("bringing %s forward to epoch %d (run apply again to resume): %w", name, cur.Epoch, err)
		}
	}
	a.log.Info("topology: nodes brought forward to the applied epoch", "epoch", cur.Epoch, "nodes", a.rep.Forward)
	return a.rep, nil
}

// retire has the driver retire the stale order records on nodes before
// their bump to tok (Driver.Retire) and counts them in the report.
func (a *applier) retire(ctx context.Context, tok string, nodes []string) error {
	return a.retireAt(ctx, a.change(tok), nodes)
}

// retireAt has the driver retire the stale order records on nodes for
// change c, and put back what step 3 moved onto them (Driver.Retire),
// and counts both in the report.
func (a *applier) retireAt(ctx context.Context, c Change, nodes []string) error {
	if len(nodes) == 0 {
		return nil
	}
	r, err := a.d.Retire(ctx, c, nodes)
	a.rep.Retired += r.Retired
	a.rep.Reinstalled += r.Reinstalled
	return err
}

// behind returns the names of nodes whose record is not at tok.
func behind(recs map[string]Record, nodes []string, tok string) []string {
	var out []string
	for _, name := range nodes {
		if recs[name].Token != tok {
			out = append(out, name)
		}
	}
	return out
}

// change is the move to token tok, as the driver needs it.
func (a *applier) change(tok string) Change {
	return Change{From: a.rep.From, To: a.to, Epoch: a.rep.ToEpoch, Token: tok, Joined: a.rep.Joined, Left: a.rep.Left, Attempt: a.attempt}
}

// newAttempt draws an apply's attempt id (Change.Attempt): 16 hex digits.
func newAttempt() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
	return hex.EncodeToString(b[:])
}

// attemptAt returns the attempt id of the records at tok ("" when none
// has one: records of a release before). Records that name different
// ones are refused (ErrInvalid): a write of another attempt at a node's
// token is refused (Driver.Write), so they cannot come from applies of
// this release, and what each attempt left on the nodes is told apart by
// its id.
func attemptAt(recs map[string]Record, tok string) (string, error) {
	names := make([]string, 0, len(recs))
	for name := range recs {
		names = append(names, name)
	}
	sort.Strings(names)
	attempt, by := "", ""
	for _, name := range names {
		r := recs[name]
		if r.Token != tok || r.Attempt == "" || r.Attempt == attempt {
			continue
		}
		if attempt != "" {
			return "", fmt.Errorf("%w: the nodes at %s name two apply attempts (%s: %s, %s: %s; a node went back to a copy taken during an earlier apply at this token): set the latest apply's attempt (of the records written last: field at) as field attempt of every node's shardis:topology at this token by hand before running apply again",
				ErrInvalid, tok, by, attempt, name, r.Attempt)
		}
		attempt, by = r.Attempt, name
	}
	return attempt, nil
}

// attemptOf is the apply attempt at cur's token: attemptAt's, or cur's
// own when no unfenced node holds the token (every node fenced: newestOf).
func attemptOf(recs map[string]Record, cur Record) (string, error) {
	attempt, err := attemptAt(recs, cur.Token)
	if err == nil && attempt == "" {
		attempt = cur.Attempt
	}
	return attempt, err
}

// bump moves every node of prev and the new topology from the token from
// (or none, for a node that never had one; or, for a node at an epoch
// before from's, the token read) to tok, by compare-and-set; nodes
// already at tok are left alone. prev's nodes go first, in name order,
// then the joining ones: two applies from the same topology, of the same
// topology or not, both write prev's first node first, so the one that
// comes second is refused there before it wrote any node (by the token,
// or by the attempt, [Change.Attempt]); with the joining nodes in the
// order too, an apply whose joining node sorts first bumped it, and the
// other apply then finished without it, leaving it migrating at a token
// no rerun could finish (a review found it).
//
// Once prev's nodes are at tok, before the joining ones, it has the
// driver copy the per-user limits onto the members that join a route
// again (Driver.CopyLimits): an instance of prev may have changed one on
// the route's old members since the copy before the first bump (its
// LoadStock answered success), and no one can once they are all bumped.
func (a *applier) bump(ctx context.Context, recs map[string]Record, from, tok string, epoch int64, prev Topology) error {
	joining, _ := joinedLeft(prev, a.to)
	olds := len(prev.Nodes())
	for i, name := range append(prev.Nodes(), joining...) {
		if i == olds {
			if err := a.copyLimits(ctx, tok); err != nil {
				return err
			}
		}
		rec := recs[name]
		if rec.Token == tok {
			continue
		}
		expect := from
		switch {
		case rec.Token == "":
			expect = "" // no stamp token: a new node
		case rec.Epoch < epoch-1 || rec.Fenced || rec.Lost:
			// Behind the token bumped from, or accepted behind its peers
			// and fenced: only a node that went back to an older copy
			// (check refuses it before a new epoch's bump; doc.go, "A
			// node that went back"): from what was read.
			expect = rec.Token
		}
		next := Record{Node: name, Epoch: epoch, Token: tok, Current: a.to, Prev: &prev, Phase: PhaseMigrating, Attempt: a.attempt}
		if err := a.d.Write(ctx, name, expect, next); err != nil {
			return fmt.Errorf("moving %s to epoch %d (run apply again to resume): %w", name, epoch, err)
		}
		if a.opts.Crash != nil {
			if err := a.opts.Crash(ctx, "bump"); err != nil {
				return err
			}
		}
	}
	if len(joining) == 0 {
		return a.copyLimits(ctx, tok)
	}
	return nil
}

// copyLimits has the driver copy the routes' per-user limits onto the
// members that join a route (Driver.CopyLimits) for the move to tok, and
// counts them in the report.
func (a *applier) copyLimits(ctx context.Context, tok string) error {
	n, err := a.d.CopyLimits(ctx, a.change(tok))
	a.rep.LimitsCopied += n
	return err
}

// current reads every node of the new topology and of the nodes'
// current one, and returns the newest record (newest).
func (a *applier) current(ctx context.Context) (Record, map[string]Record, error) {
	recs := map[string]Record{}
	read := func(names []string) error {
		for _, name := range names {
			if _, ok := recs[name]; ok {
				continue
			}
			rec, err := a.d.Read(ctx, name)
			if err != nil {
				return err
			}
			recs[name] = rec
		}
		return nil
	}
	if err := read(a.to.Nodes()); err != nil {
		return Record{}, nil, err
	}
	newest, err := newestOf(recs)
	if err != nil {
		return newest, nil, err
	}
	if newest.Epoch == 0 && a.opts.From == nil {
		return newest, nil, fmt.Errorf("%w: the nodes have no topology record yet: start `shardis serve` once with the current configuration, or pass --from", ErrInvalid)
	}
	if a.opts.From != nil {
		if err := read(a.opts.From.Nodes()); err != nil {
			return newest, nil, err
		}
		if newest, err = newestOf(recs); err != nil {
			return newest, nil, err
		}
	}
	if newest.Epoch == 0 { // never initialised: the --from topology is epoch 1
		first := Initial(*a.opts.From)
		for _, name := range a.opts.From.Nodes() {
			if err := a.d.Write(ctx, name, "", first); err != nil {
				return newest, nil, err
			}
		}
		return a.current(ctx)
	}
	if err := read(newest.Current.Nodes()); err != nil {
		return newest, nil, err
	}
	if newest.Prev != nil && newest.Phase == PhaseMigrating {
		if err := read(newest.Prev.Nodes()); err != nil {
			return newest, nil, err
		}
	}
	newest, err = newestOf(recs)
	return newest, recs, err
}

// newestOf returns the record of the highest epoch among recs, lost ones
// left out, a fenced one by the copy under its fence (its Token the token
// held) when it is above every unfenced one (every node fenced, or a
// bump stopped after a node that was then fenced): the nodes are brought
// forward, or resume, to it. Records of that epoch must agree, token and
// apply attempt (a fenced one, when the newest is not, is a node to bring
// forward): two copies of one epoch mean a node went back to a copy of an
// earlier apply of it, and nothing on the nodes tells which is current,
// so the apply refuses (ErrInvalid) rather than guess.
func newestOf(recs map[string]Record) (Record, error) {
	names := make([]string, 0, len(recs))
	for name := range recs {
		names = append(names, name)
	}
	sort.Strings(names)
	newest, fenced := highest(recs, names, false), false
	if f := highest(recs, names, true); f.Epoch > newest.Epoch {
		// every node fenced, or a fenced one ahead of every other (an
		// apply's bump stopped after it, and it was accepted with a peer
		// unreadable): its copy is the newest, the others resume to it
		newest, fenced = f, true
	}
	if newest.Epoch == 0 {
		return newest, nil
	}
	for _, name := range names {
		r := recs[name]
		if r.Lost || r.Epoch != newest.Epoch || (r.Fenced && !fenced) {
			continue
		}
		tok := r.Token
		if r.Fenced {
			tok = r.Held
		}
		if tok != newest.Token || r.Attempt != newest.Attempt {
			return newest, fmt.Errorf("%w: the nodes hold two topologies of epoch %d (%s at %s, attempt %q; %s at %s, attempt %q): a node went back to a copy of an earlier apply of this epoch, and the nodes cannot tell which is current: on each node whose topology is the current one, set field epoch of %s to its token (without the %q prefix of a fenced node), then run apply again",
				ErrInvalid, newest.Epoch, newest.Node, newest.Token, newest.Attempt, name, tok, r.Attempt, "shardis:node", "behind:")
		}
	}
	return newest, nil
}

// highest is the record of the highest epoch among recs (names, sorted):
// of the unfenced ones, or, with fenced, of the fenced ones, as held under
// the fence (its Token the token held).
func highest(recs map[string]Record, names []string, fenced bool) Record {
	var newest Record
	for _, name := range names {
		r := recs[name]
		if r.Lost || r.Fenced != fenced || r.Epoch <= newest.Epoch {
			continue
		}
		newest = r
		if fenced {
			newest.Token, newest.Fenced, newest.Held = r.Held, false, ""
		}
	}
	return newest
}

// Current is the record an apply takes as current among recs (the nodes'
// records, one per node): the highest epoch, a fenced record by the copy
// under its fence when it is above every unfenced one; ErrInvalid when
// two copies of that epoch disagree (token or apply attempt), for an
// operator to decide. What `shardis topology show` advises from.
func Current(recs []Record) (Record, error) {
	m := make(map[string]Record, len(recs))
	for _, r := range recs {
		m[r.Node] = r
	}
	return newestOf(m)
}

// anyFenced reports whether one of nodes is fenced (Record.Fenced).
func anyFenced(recs map[string]Record, nodes []string) bool {
	for _, n := range nodes {
		if recs[n].Fenced {
			return true
		}
	}
	return false
}

// allStable reports whether every node at tok is stable.
func allStable(recs map[string]Record, tok string) bool {
	for _, r := range recs {
		if r.Token == tok && r.Phase != PhaseStable {
			return false
		}
	}
	return true
}

// allAt reports whether every one of nodes is at token tok: a node of the
// current topology behind it went back with an older copy of its data
// (doc.go, "A node that went back").
func allAt(recs map[string]Record, nodes []string, tok string) bool {
	for _, n := range nodes {
		if recs[n].Token != tok {
			return false
		}
	}
	return true
}

// diff fills Joined and Left.
func (a *applier) diff() {
	a.rep.Joined, a.rep.Left = joinedLeft(a.rep.From, a.to)
}

// joinedLeft returns the nodes of to that from lacks and those of from
// that to lacks, each sorted.
func joinedLeft(from, to Topology) (joined, left []string) {
	old := map[string]bool{}
	for _, n := range from.Nodes() {
		old[n] = true
	}
	for _, n := range to.Nodes() {
		if !old[n] {
			joined = append(joined, n)
		}
		delete(old, n)
	}
	for n := range old {
		left = append(left, n)
	}
	sort.Strings(left)
	return joined, left
}

// check refuses a bump that could lose or strand anything, and counts the
// leaving nodes' pending parts. Every node must be at the current token
// (or new, with no record), and stable: an apply to another topology
// while the current one is still migrating would start from records,
// quota counters and stock that step 3 has not moved yet, and its own
// step 3 looks for them only at their homes in the current topology, so
// they would stay where they are (a per-user limit counted twice, stock
// left on a node that left). Going back to the previous topology is no
// exception: a record whose move step 3 had begun (marked moved at its
// previous home, not yet installed) would be found at neither home, and
// a transfer record begun would be left behind. The current apply is
// finished first, by running it again.
func (a *applier) check(ctx context.Context, cur Record, recs map[string]Record) error {
	var bad []string
	oldNodes := map[string]bool{}
	for _, n := range cur.Current.Nodes() {
		oldNodes[n] = true
	}
	for name, rec := range recs {
		switch {
		case rec.Token == cur.Token && rec.Phase == PhaseStable:
		case rec.Token == cur.Token:
			bad = append(bad, fmt.Sprintf("%s is still %s at epoch %d (%s): finish that apply first (run `shardis topology apply` with its configuration until it reports stable)",
				name, rec.Phase, rec.Epoch, cur.Current))
		case rec.Epoch == 0 && !oldNodes[name]:
		default:
			bad = append(bad, fmt.Sprintf("%s is at %q, not the current %q", name, rec.Token, cur.Token))
		}
	}
	for _, name := range a.rep.Left {
		pending, err := a.d.Pending(ctx, name)
		if err != nil {
			return err
		}
		a.rep.LeftPending += pending
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return fmt.Errorf("%w: %s", ErrInvalid, strings.Join(bad, "; "))
	}
	return nil
}

// migrate runs steps 3 and 4 at token tok. When counters are still held
// by pending parts after opts.Wait, it returns with the phase still
// migrating (Waiting counts them).
func (a *applier) migrate(ctx context.Context, tok string) (Report, error) {
	c := a.change(tok)
	m, migrating, err := a.d.Relocate(ctx, c)
	a.rep.add(m)
	if err != nil {
		return a.rep, err
	}
	deadline := time.Now().Add(a.opts.Wait)
	for migrating {
		m, busy, err := a.d.MoveCounters(ctx, c)
		a.rep.add(m)
		if err != nil {
			return a.rep, err
		}
		if busy == 0 {
			break
		}
		if time.Now().After(deadline) {
			// Safe to leave: instances keep consulting the previous
			// topology until a later apply finishes.
			a.rep.Phase, a.rep.Waiting = PhaseMigrating, busy
			a.log.Warn("topology: still migrating: counters wait for pending parts; run `shardis topology apply` again later to finish",
				"counters", busy, "waited", a.opts.Wait)
			return a.rep, nil
		}
		a.log.Info("topology: waiting for pending parts before moving counters", "counters", busy)
		select {
		case <-ctx.Done():
			return a.rep, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	from := a.rep.From
	for _, name := range Union(a.rep.From.Nodes(), a.to.Nodes()) {
		// whole, for a node whose record was lost meanwhile (Write writes
		// it again)
		stable := Record{Node: name, Epoch: a.rep.ToEpoch, Token: tok, Current: a.to, Prev: &from, Phase: PhaseStable, Attempt: a.attempt}
		if err := a.d.Write(ctx, name, tok, stable); err != nil {
			return a.rep, fmt.Errorf("writing %s stable at epoch %d (run apply again to resume): %w", name, a.rep.ToEpoch, err)
		}
	}
	a.rep.Phase = PhaseStable
	a.log.Info("topology: applied", "epoch", a.rep.ToEpoch, "orders_moved", a.rep.OrdersMoved,
		"quotas_moved", a.rep.QuotasMoved, "stock_moved", a.rep.StockMoved)
	return a.rep, nil
}
