package topology

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"
)

// ErrInvalid is wrapped by the errors of an apply refused for its input or
// for the nodes' state (no record yet and no From, From not the applied
// topology, a node at another token or whose record is lost): nothing was
// written (not even From's first epoch), and running it again with the
// same input fails alike.
var ErrInvalid = errors.New("topology: apply refused")

// Options configures [Apply].
type Options struct {
	// To is the topology to apply. Required: at least one route.
	To Topology
	// From is the topology the caller believes is applied, or nil. When
	// given, Apply refuses unless the nodes are at From (or at To, to
	// resume); when the nodes have no record yet, From is taken as epoch
	// 1, and written as such on its nodes once the apply goes past its
	// checks (not by a dry run, nor by an apply refused).
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
	// DryRun checks and reports what would change without writing any
	// topology record, order or stock on any node (a --from epoch 1 and
	// lost records to write again included). The router it opens behaves
	// as every process that connects to the nodes: it stamps a node found
	// without an identity stamp and writes its peers' witness marks
	// (node/identity.go, router/witness.go).
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

// Moved counts what step 3 moved (fields promoted into [Report]): what
// this run moved itself, so a rerun does not count again what an earlier
// run (or an instance's touch) had moved.
type Moved struct {
	OrdersMoved   int // order records (tombstones included) moved
	QuotasMoved   int // quota counters transferred
	StockMoved    int // stock hashes of leaving nodes transferred (sold-out ones included)
	PartsSettled  int // pending parts of leaving nodes settled by the apply
	StagedDecided int // staging records (one-round reservations) the apply decided
	// SetAside lists the parts set aside on leaving nodes when the last
	// pass of [Driver.MoveCounters] ended (add does not sum it: each
	// pass's list replaces the one before). Each holds units reserved on
	// its node, so that node's stock cannot move and the node cannot
	// leave until an operator settles or repairs it (the inventory's
	// doc.go, "A part set aside on a leaving node"); a rerun then
	// finishes.
	SetAside []SetAsidePart
}

// SetAsidePart is a part set aside on a node that leaves: it could not
// be settled (its record, or its order's, gone or unreadable, its
// counter corrupt), and only an operator's settle or repair lets it go.
type SetAsidePart struct {
	Node    string // the leaving node that lists it
	PartID  string // the part's id, as the node's stuck index holds it
	OrderID string // its order, when its record says ("" when it is gone)
	Reason  string // why it was set aside (the error that set it aside)
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
	// FromEpoch is the epoch of From: the nodes' epoch when the apply
	// began, or, for an apply it resumed, the one before it.
	FromEpoch int64
	// ToEpoch is the epoch of To: FromEpoch+1 for a new epoch, the
	// nodes' epoch for an apply of the topology they hold already; 0
	// when the apply was refused before it knew it.
	ToEpoch int64
	// From is the topology moved from (the topology of FromEpoch).
	From Topology
	// To is the topology applied (Options.To).
	To           Topology
	Joined, Left []string // nodes that join or leave the inventory server
	LimitsCopied int      // per-user limits written to joining route members
	Moved
	LeftPending int // pending parts leaving nodes held at the check
	// Waiting counts counters still held by pending parts, and parts
	// still pending on leaving nodes, when the apply returned in phase
	// migrating; run it again later to finish.
	Waiting int
	// Phase is the phase the apply left the nodes' records at ToEpoch in:
	// PhaseStable once To is applied, PhaseMigrating when it returned
	// with Waiting > 0. A dry run reports PhaseMigrating for an apply it
	// would resume, PhaseStable for a topology applied already (or nodes
	// to bring forward), and "" for a new epoch; an apply that failed
	// may report "".
	Phase Phase
	// AlreadyApplied is true when every node was at To's token and
	// stable already: the apply had nothing to resume or bring forward
	// (it may still have repaired lost records, Repaired).
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
	// TakenBack counts the counters (stock hashes, quota counters) an
	// apply moving nodes forward, or resuming a bump, took off them again
	// (a resume: before it bumps them): they came back with the node's
	// older data after the apply's transfer had moved them to their
	// destination, which holds their units (Driver.Retire).
	TakenBack int
	// LeftBehind lists the counters of that kind such an apply left on
	// their node (Retirement.LeftBehind): delete them once their units
	// reserved, if any, are settled; an apply that would serve them again
	// refuses until then.
	LeftBehind []LeftCounter
	// Forward names the nodes of the applied topology an apply of it
	// brought forward to its token, without a step 3: they went back to
	// an older copy of their data (doc.go, "A node that went back").
	Forward []string
	// Repaired names the nodes whose stamp is at the applied token but
	// whose record was lost (Record.Lost) and that an apply of the
	// applied topology wrote again, with the token's stable record, once
	// every other record at the token was stable (a dry run: would
	// write). Alone, with AlreadyApplied: the apply wrote nothing else.
	Repaired []string
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
	// initial names the nodes current gave opts.From's first epoch in
	// memory (no record on any node): initialise writes it on them.
	initial []string
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
		return a.again(ctx, cur, recs)
	}
	return a.start(ctx, cur, recs, fp)
}

// initialise writes opts.From's first epoch on the nodes current gave it
// in memory (applier.initial; none when the nodes had a record): by
// compare-and-set on no token, so a node another instance or apply
// initialised or moved meanwhile refuses it, but one at that same first
// epoch (only its record lost) is written again. Called once the apply
// is past its checks, never by a dry run.
func (a *applier) initialise(ctx context.Context) error {
	if len(a.initial) == 0 {
		return nil
	}
	first := Initial(*a.opts.From)
	for _, name := range a.initial {
		first.Node = name
		if err := a.d.Write(ctx, name, "", first); err != nil {
			return fmt.Errorf("writing %s the first epoch of --from (run apply again to resume): %w", name, err)
		}
	}
	a.initial = nil
	return nil
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
	if err := a.initialise(ctx); err != nil {
		return a.rep, err
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
	a.rep.TakenBack += r.TakenBack
	a.rep.LeftBehind = append(a.rep.LeftBehind, r.LeftBehind...)
	return err
}

// change is the move to token tok, as the driver needs it.
func (a *applier) change(tok string) Change {
	return Change{From: a.rep.From, To: a.to, Epoch: a.rep.ToEpoch, Token: tok, Joined: a.rep.Joined, Left: a.rep.Left, Attempt: a.attempt}
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
// finished first, by running it again. A node whose record is lost
// (Record.Lost) is named as such: at the current token, an apply of the
// current topology writes it again (applier.again); behind it, the operator
// restores it.
func (a *applier) check(ctx context.Context, cur Record, recs map[string]Record) error {
	var bad []string
	oldNodes := map[string]bool{}
	for _, n := range cur.Current.Nodes() {
		oldNodes[n] = true
	}
	for name, rec := range recs {
		switch {
		case rec.Token == cur.Token && rec.Phase == PhaseStable:
		case rec.Lost && !rec.Fenced && rec.Token == cur.Token:
			bad = append(bad, fmt.Sprintf("%s lost its topology record (its stamp names the current %q, its %s is gone): run `shardis topology apply` with the current configuration (%s): it writes the record again (after it finishes that apply, if a node at the token is still migrating); an instance (`shardis serve`) also writes it again from a peer at the token",
				name, cur.Token, "shardis:topology", cur.Current))
		case rec.Lost:
			bad = append(bad, lostElsewhere(name, rec, cur))
		case rec.Token == cur.Token:
			bad = append(bad, fmt.Sprintf("%s is still %s at epoch %d (%s): finish that apply first (run `shardis topology apply` with its configuration until it reports stable)",
				name, rec.Phase, rec.Epoch, cur.Current))
		case rec.Epoch == 0 && !oldNodes[name]:
		case oldNodes[name]:
			bad = append(bad, fmt.Sprintf("%s is at %q, not the current %q: run `shardis topology apply` with the current configuration (%s) first: it brings the node forward",
				name, rec.Token, cur.Token, cur.Current))
		default:
			bad = append(bad, fmt.Sprintf("%s is at %q, not the current %q, and is no node of the current topology (%s): an apply adds only a node with no topology record (a new, empty one) or one of the current topology (a node that left at an earlier epoch keeps that epoch's record)",
				name, rec.Token, cur.Token, cur.Current))
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

// lostElsewhere is the refusal of node name, whose record is lost under
// a stamp that names rec.Token, not cur's.
func lostElsewhere(name string, rec, cur Record) string {
	return fmt.Sprintf("%s lost its topology record, and its stamp names %q, not the current %q: which copy of its data it holds cannot be told, so no apply writes its record again: restore its %s of that token by hand (from a peer or a backup that holds it; an instance copies it from an unfenced peer at that token, if any), then run `shardis topology apply` with the current configuration (%s) to bring it forward",
		name, rec.Token, cur.Token, "shardis:topology", cur.Current)
}

// migrate runs steps 3 and 4 at token tok. When counters are still held
// by pending parts after opts.Wait, it returns with the phase still
// migrating (Waiting counts them). Step 4 writes a node stable only at
// the incarnation it read from it before step 3 began (Record.
// Incarnation): a node accepted since holds a copy of its data that may
// be from before step 3 moved its counters off it (doc.go, "A copy taken
// during step 3"), and the write refused, a rerun brings it forward.
func (a *applier) migrate(ctx context.Context, tok string) (Report, error) {
	c := a.change(tok)
	nodes := Union(a.rep.From.Nodes(), a.to.Nodes())
	inc := map[string]string{}
	for _, name := range nodes {
		rec, err := a.d.Read(ctx, name)
		if err != nil {
			return a.rep, fmt.Errorf("reading %s before step 3 (run apply again to resume): %w", name, err)
		}
		inc[name] = rec.Incarnation
	}
	m, migrating, err := a.d.Relocate(ctx, c)
	a.rep.add(m)
	if err != nil {
		return a.rep, err
	}
	deadline := time.Now().Add(a.opts.Wait)
	for migrating {
		m, busy, err := a.d.MoveCounters(ctx, c)
		a.rep.add(m)
		a.rep.SetAside = m.SetAside // the last pass's list, not a sum
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
			a.log.Warn("topology: still migrating: counters and leaving nodes wait for pending parts; run `shardis topology apply` again later to finish",
				"waiting", busy, "waited", a.opts.Wait)
			return a.rep, nil
		}
		a.log.Info("topology: waiting for pending parts before moving counters and letting nodes leave", "waiting", busy)
		select {
		case <-ctx.Done():
			return a.rep, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	from := a.rep.From
	for _, name := range nodes {
		// whole, for a node whose record was lost meanwhile (Write writes
		// it again); at the incarnation read before step 3
		stable := Record{Node: name, Epoch: a.rep.ToEpoch, Token: tok, Current: a.to, Prev: &from, Phase: PhaseStable, Attempt: a.attempt, Incarnation: inc[name]}
		if err := a.d.Write(ctx, name, tok, stable); err != nil {
			return a.rep, fmt.Errorf("writing %s stable at epoch %d (run apply again to resume): %w", name, a.rep.ToEpoch, err)
		}
	}
	a.rep.Phase = PhaseStable
	a.log.Info("topology: applied", "epoch", a.rep.ToEpoch, "orders_moved", a.rep.OrdersMoved,
		"quotas_moved", a.rep.QuotasMoved, "stock_moved", a.rep.StockMoved)
	return a.rep, nil
}
