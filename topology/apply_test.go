package topology

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/router"
)

// fakeDriver keeps node records in memory with the compare-and-set rule
// of the inventory's topology write script, so Apply's protocol steps can
// be checked without nodes (the inventory package's tests run the same
// apply against real ones).
type fakeDriver struct {
	recs         map[string]Record // by node; absent: no record
	writes       []string          // "node:token:phase", in order
	relocs       int
	passes       int
	busy         []int // MoveCounters' waiting counts, one per pass (then 0)
	pending      map[string]int
	stable       bool            // Relocate reports the nodes finished step 3
	gone         map[string]bool // nodes not configured: Read and Write fail
	copied       int             // what the first CopyLimits call reports (a copy again writes nothing new)
	copiesAt     []int           // len(writes) at each CopyLimits call
	checked      []Change        // Check's calls
	checkErr     error           // what Check returns
	retired      int             // what Retire reports
	retires      int             // Retire's calls
	retiredOn    [][]string      // the nodes of each Retire call
	reinstalled  int             // what Retire reports it put back
	retireChange Change          // the change of the last Retire call
	attempts     []string        // the attempt of each Retire call's change
	lastSeen     Change
}

func newFake() *fakeDriver {
	return &fakeDriver{recs: map[string]Record{}, pending: map[string]int{}}
}

func (f *fakeDriver) Read(_ context.Context, name string) (Record, error) {
	if f.gone[name] {
		return Record{}, fmt.Errorf("unknown node %q", name)
	}
	r, ok := f.recs[name]
	if !ok {
		return Record{Node: name}, nil
	}
	return r, nil
}

func (f *fakeDriver) Write(_ context.Context, name, expect string, rec Record) error {
	if f.gone[name] {
		return fmt.Errorf("unknown node %q", name)
	}
	cur := f.recs[name]
	if cur.Token == rec.Token && cur.Token != "" {
		if rec.Attempt != "" && cur.Attempt != "" && rec.Attempt != cur.Attempt {
			return fmt.Errorf("node %s is at %q by attempt %s, not %s", name, cur.Token, cur.Attempt, rec.Attempt)
		}
		if cur.Attempt == "" {
			cur.Attempt = rec.Attempt
			f.recs[name] = cur
		}
		if rec.Phase == PhaseStable {
			cur.Phase = PhaseStable
			f.recs[name] = cur
			f.writes = append(f.writes, name+":"+rec.Token+":stable")
		}
		return nil
	}
	if cur.Token != expect {
		return fmt.Errorf("node %s is at %q, expected %q", name, cur.Token, expect)
	}
	rec.Node = name
	f.recs[name] = rec
	f.writes = append(f.writes, name+":"+rec.Token+":"+string(rec.Phase))
	return nil
}

func (f *fakeDriver) Pending(_ context.Context, name string) (int, error) {
	return f.pending[name], nil
}

func (f *fakeDriver) Retire(_ context.Context, c Change, nodes []string) (Retirement, error) {
	f.retiredOn = append(f.retiredOn, nodes)
	f.retires++
	f.retireChange = c
	f.attempts = append(f.attempts, c.Attempt)
	return Retirement{Retired: f.retired, Reinstalled: f.reinstalled}, nil
}

func (f *fakeDriver) Check(_ context.Context, c Change) error {
	f.checked = append(f.checked, c)
	return f.checkErr
}

func (f *fakeDriver) CopyLimits(_ context.Context, c Change) (int, error) {
	f.lastSeen = c
	f.copiesAt = append(f.copiesAt, len(f.writes))
	n := f.copied
	f.copied = 0
	return n, nil
}

func (f *fakeDriver) Relocate(_ context.Context, c Change) (Moved, bool, error) {
	f.relocs++
	f.lastSeen = c
	if f.stable {
		return Moved{}, false, nil
	}
	return Moved{OrdersMoved: 2, StagedDecided: 1}, true, nil
}

func (f *fakeDriver) MoveCounters(_ context.Context, c Change) (Moved, int, error) {
	f.passes++
	busy := 0
	if len(f.busy) > 0 {
		busy, f.busy = f.busy[0], f.busy[1:]
	}
	return Moved{QuotasMoved: 1}, busy, nil
}

func topo(routes map[string][]string) Topology {
	t := Topology{Routes: map[string][]router.Member{}}
	for r, ms := range routes {
		for _, m := range ms {
			t.Routes[r] = append(t.Routes[r], router.Member{Name: m, Weight: 1})
		}
	}
	return t
}

// at gives nodes the stable record of epoch e with topology t.
func (f *fakeDriver) at(e int64, t Topology, prev *Topology, phase Phase, nodes ...string) {
	for _, n := range nodes {
		f.recs[n] = Record{Node: n, Epoch: e, Token: Token(e, t.Fingerprint()), Current: t, Prev: prev, Phase: phase}
	}
}

var (
	two   = topo(map[string][]string{"r": {"n1", "n2"}})
	three = topo(map[string][]string{"r": {"n1", "n2", "n3"}})
	quiet = slog.New(slog.DiscardHandler)
)

func apply(t *testing.T, f *fakeDriver, opts Options) (Report, error) {
	t.Helper()
	opts.Logger = quiet
	return Apply(context.Background(), opts, f)
}

// TestApplyAddsNode: every node is bumped once from the current token
// (a joining one from none), step 3 runs until nothing waits, then every
// node goes stable; the report counts what the driver moved.
func TestApplyAddsNode(t *testing.T) {
	f := newFake()
	f.at(1, two, nil, PhaseStable, "n1", "n2")
	f.copied, f.busy, f.retired = 3, []int{2}, 4
	rep, err := apply(t, f, Options{To: three})
	if err != nil {
		t.Fatal(err)
	}
	tok := Token(2, three.Fingerprint())
	want := []string{"n1:" + tok + ":migrating", "n2:" + tok + ":migrating", "n3:" + tok + ":migrating",
		"n1:" + tok + ":stable", "n2:" + tok + ":stable", "n3:" + tok + ":stable"}
	if !reflect.DeepEqual(f.writes, want) {
		t.Fatalf("writes = %v, want %v", f.writes, want)
	}
	if rep.FromEpoch != 1 || rep.ToEpoch != 2 || rep.Phase != PhaseStable || !reflect.DeepEqual(rep.Joined, []string{"n3"}) ||
		len(rep.Left) != 0 || rep.LimitsCopied != 3 || rep.OrdersMoved != 2 || rep.StagedDecided != 1 || rep.QuotasMoved != 2 ||
		rep.Retired != 4 || f.retires != 1 {
		t.Fatalf("report = %+v (retires %d)", rep, f.retires)
	}
	if f.passes != 2 || f.lastSeen.Token != tok || f.lastSeen.Epoch != 2 {
		t.Fatalf("passes = %d, change = %+v", f.passes, f.lastSeen)
	}
	// the limits are copied before the first bump, and again once the old
	// nodes n1 and n2 are bumped, before the joining n3
	if !reflect.DeepEqual(f.copiesAt, []int{0, 2}) {
		t.Fatalf("CopyLimits called after %v writes, want [0 2]", f.copiesAt)
	}
	rep, err = apply(t, f, Options{To: three})
	if err != nil || !rep.AlreadyApplied || len(f.writes) != len(want) {
		t.Fatalf("second apply = %+v, %v; writes %v", rep, err, f.writes)
	}
}

// TestApplyRefusals: an apply that cannot be safe writes nothing.
func TestApplyRefusals(t *testing.T) {
	for name, tc := range map[string]struct {
		setup func(*fakeDriver)
		opts  Options
	}{
		"no record and no from": {func(*fakeDriver) {}, Options{To: three}},
		"from is not applied": {func(f *fakeDriver) { f.at(1, two, nil, PhaseStable, "n1", "n2") },
			Options{To: three, From: &Topology{Routes: map[string][]router.Member{"r": {{Name: "n1", Weight: 1}}}}}},
		"node at another token": {func(f *fakeDriver) {
			f.at(1, two, nil, PhaseStable, "n1", "n2")
			f.recs["n2"] = Record{Node: "n2", Epoch: 1, Token: Token(1, "other"), Current: two, Phase: PhaseStable}
		}, Options{To: three}},
		"no route": {func(*fakeDriver) {}, Options{}},
		// another topology, or the previous one, while the current one
		// still migrates (check): its step 3 has not moved everything
		"while migrating": {func(f *fakeDriver) { f.at(2, three, &two, PhaseMigrating, "n1", "n2", "n3") },
			Options{To: Topology{Routes: map[string][]router.Member{"r": {{Name: "n1", Weight: 1}, {Name: "n3", Weight: 1}}}}}},
		"back while migrating": {func(f *fakeDriver) { f.at(2, three, &two, PhaseMigrating, "n1", "n2", "n3") }, Options{To: two}},
		// the driver refuses what the nodes hold (Driver.Check), before
		// any write, a dry run too
		"driver check": {func(f *fakeDriver) {
			f.at(1, two, nil, PhaseStable, "n1", "n2")
			f.checkErr = fmt.Errorf("%w: counters left", ErrInvalid)
		}, Options{To: three}},
		"driver check, dry run": {func(f *fakeDriver) {
			f.at(1, two, nil, PhaseStable, "n1", "n2")
			f.checkErr = fmt.Errorf("%w: counters left", ErrInvalid)
		}, Options{To: three, DryRun: true}},
		// the applied topology again on nodes without a record but one
		// whose record is lost under another token's stamp (firstEpoch
		// leaves it as read): refused naming it, as check refuses it on
		// a new epoch's path; before, the others got epoch 1 and the
		// apply reported AlreadyApplied with that node left behind
		"from is to, a node lost its record under another token": {func(f *fakeDriver) {
			f.recs["n2"] = Record{Node: "n2", Token: Token(1, "other"), Lost: true}
		}, Options{To: two, From: &two}},
		// no record yet: From's epoch 1 is not written either (it was,
		// before any check)
		"driver check, from on nodes without a record": {func(f *fakeDriver) {
			f.checkErr = fmt.Errorf("%w: counters left", ErrInvalid)
		}, Options{To: three, From: &two}},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFake()
			tc.setup(f)
			_, err := apply(t, f, tc.opts)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			if len(f.writes) != 0 || f.retires != 0 {
				t.Fatalf("refused apply wrote %v (retires %d)", f.writes, f.retires)
			}
		})
	}
}

// TestApplyFromInitialises: nodes without any record get From as epoch 1
// before the change; a dry run only reports the change (it wrote epoch 1,
// before).
func TestApplyFromInitialises(t *testing.T) {
	f := newFake()
	from := two
	rep, err := apply(t, f, Options{To: three, From: &from, DryRun: true})
	if err != nil || rep.FromEpoch != 1 || rep.ToEpoch != 2 || len(f.writes) != 0 {
		t.Fatalf("dry run = %+v, %v; writes %v", rep, err, f.writes)
	}
	rep, err = apply(t, f, Options{To: three, From: &from})
	if err != nil || rep.FromEpoch != 1 || rep.ToEpoch != 2 || rep.Phase != PhaseStable {
		t.Fatalf("apply = %+v, %v", rep, err)
	}
	if f.writes[0] != "n1:"+Token(1, two.Fingerprint())+":stable" {
		t.Fatalf("first write %q, want epoch 1 of the from topology", f.writes[0])
	}
}

// TestApplyResumesAfterCrash: a crash after the first bump leaves the
// nodes split between two tokens; a rerun retires the stale records of
// the nodes not yet bumped (Driver.Retire: one may have gone back to an
// older copy meanwhile), bumps them (none twice) and finishes.
func TestApplyResumesAfterCrash(t *testing.T) {
	f := newFake()
	f.at(1, two, nil, PhaseStable, "n1", "n2")
	crashed := errors.New("crashed")
	_, err := apply(t, f, Options{To: three, Crash: func(context.Context, string) error { return crashed }})
	if !errors.Is(err, crashed) || len(f.writes) != 1 || f.relocs != 0 {
		t.Fatalf("crashing apply = %v; writes %v, relocates %d", err, f.writes, f.relocs)
	}
	rep, err := apply(t, f, Options{To: three})
	if err != nil || rep.Phase != PhaseStable || rep.FromEpoch != 1 || !reflect.DeepEqual(rep.Joined, []string{"n3"}) {
		t.Fatalf("resumed apply = %+v, %v", rep, err)
	}
	migrating := map[string]int{}
	for _, w := range f.writes {
		if w[len(w)-len("migrating"):] == "migrating" {
			migrating[w[:2]]++
		}
	}
	if !reflect.DeepEqual(migrating, map[string]int{"n1": 1, "n2": 1, "n3": 1}) {
		t.Fatalf("bumps per node = %v (writes %v)", migrating, f.writes)
	}
	if want := [][]string{{"n1", "n2", "n3"}, {"n2", "n3"}}; !reflect.DeepEqual(f.retiredOn, want) {
		t.Fatalf("Retire's nodes per call = %v, want %v", f.retiredOn, want)
	}
	if rep.Retired != f.retired {
		t.Fatalf("resumed apply reports %d retired, the driver %d", rep.Retired, f.retired)
	}
}

// TestApplyAttempt: an apply draws its attempt id before its first bump
// and writes it with every bump; a resume and a forward read it from the
// nodes at the token and pass it on (Change.Attempt); an apply of the
// same topology after every node went back below its epoch runs at the
// same token but draws another.
func TestApplyAttempt(t *testing.T) {
	f := newFake()
	f.at(1, two, nil, PhaseStable, "n1", "n2")
	crashed := errors.New("crashed")
	if _, err := apply(t, f, Options{To: three, Crash: func(context.Context, string) error { return crashed }}); !errors.Is(err, crashed) {
		t.Fatalf("crashing apply = %v", err)
	}
	first := f.attempts[0]
	if len(first) != 16 || f.recs["n1"].Attempt != first {
		t.Fatalf("the first apply's attempt %q, n1's record %+v; want 16 hex digits, written with the bump", first, f.recs["n1"])
	}
	if _, err := apply(t, f, Options{To: three}); err != nil {
		t.Fatal(err)
	}
	f.wantAttempt(t, "the resume", first, "n1", "n2", "n3")
	if got := f.attempts[len(f.attempts)-1]; got != first {
		t.Fatalf("the resume's change names attempt %q, want %q", got, first)
	}
	// n3 goes back to no record: the forward passes the attempt on
	delete(f.recs, "n3")
	f.at(1, two, nil, PhaseStable, "n3")
	rep, err := apply(t, f, Options{To: three})
	if err != nil || len(rep.Forward) != 1 || f.retireChange.Attempt != first || f.recs["n3"].Attempt != first {
		t.Fatalf("forward = %+v, %v; change %+v, n3 %+v; want attempt %s", rep, err, f.retireChange, f.recs["n3"], first)
	}
	// every node goes back below epoch 2: the same token, another attempt
	f.at(1, two, nil, PhaseStable, "n1", "n2")
	delete(f.recs, "n3")
	if _, err := apply(t, f, Options{To: three}); err != nil {
		t.Fatal(err)
	}
	if again := f.recs["n1"]; again.Token != Token(2, three.Fingerprint()) || again.Attempt == first || len(again.Attempt) != 16 {
		t.Fatalf("n1 after the apply at the same token again: %+v; want another attempt than %s", again, first)
	}
}

// wantAttempt fails t unless every one of nodes' records names attempt
// after what.
func (f *fakeDriver) wantAttempt(t *testing.T, what, attempt string, nodes ...string) {
	t.Helper()
	for _, n := range nodes {
		if f.recs[n].Attempt != attempt {
			t.Fatalf("%s's record after %s: %+v; want attempt %s", n, what, f.recs[n], attempt)
		}
	}
}

// hookDriver is the fake driver running hook (once) at its first Retire,
// before it.
type hookDriver struct {
	*fakeDriver
	hook func()
}

func (h *hookDriver) Retire(ctx context.Context, c Change, nodes []string) (Retirement, error) {
	if hk := h.hook; hk != nil {
		h.hook = nil
		hk()
	}
	return h.fakeDriver.Retire(ctx, c, nodes)
}

// TestConcurrentFreshAppliesKeepOneAttempt: two fresh applies of the same
// topology at once both read every node at epoch 1 and draw an attempt
// each; P1 bumps n1 and dies; P2's bump of n1 is refused (another
// attempt at its token), so it writes no node; the rerun resumes P1's
// attempt on every node. Before, P2's write at n1's token changed
// nothing and passed, and P2 bumped n2 and n3 under its own attempt: a
// later forward named one attempt or the other depending on which nodes
// had gone back (found by a review), and what the put backs of one had
// left was read under the other's name.
func TestConcurrentFreshAppliesKeepOneAttempt(t *testing.T) {
	f := newFake()
	f.at(1, two, nil, PhaseStable, "n1", "n2")
	crashed := errors.New("crashed")
	h := &hookDriver{fakeDriver: f, hook: func() {
		// P1 runs between P2's reads and P2's bumps
		if _, err := apply(t, f, Options{To: three, Crash: func(context.Context, string) error { return crashed }}); !errors.Is(err, crashed) {
			t.Errorf("P1 = %v, want it crashed after its first bump", err)
		}
	}}
	_, err := Apply(context.Background(), Options{To: three, Logger: quiet}, h)
	p1 := f.recs["n1"].Attempt
	if err == nil || !strings.Contains(err.Error(), "attempt") || f.recs["n2"].Token == f.recs["n1"].Token {
		t.Fatalf("P2 = %v; n2 %+v; want it refused at n1, n2 not bumped", err, f.recs["n2"])
	}
	if _, err := apply(t, f, Options{To: three}); err != nil {
		t.Fatal(err)
	}
	f.wantAttempt(t, "the rerun", p1, "n1", "n2", "n3")
	// records that name two attempts are refused, not guessed between
	f.recs["n2"] = Record{Node: "n2", Epoch: 1, Token: Token(1, two.Fingerprint()), Current: two, Phase: PhaseStable}
	n3 := f.recs["n3"]
	n3.Attempt = "0123456789abcdef"
	f.recs["n3"] = n3
	if _, err := apply(t, f, Options{To: three}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "0123456789abcdef") {
		t.Fatalf("forward with records of two attempts = %v, want ErrInvalid naming both", err)
	}
}

// TestConcurrentAppliesOfDifferentTopologies: two fresh applies from the
// same topology to different ones, X adding a0 and Y adding b0, both
// names sorting before every current node. X bumps its first node and
// dies in Y's retirement; Y's first bump is refused (both write the
// current topology's first node first), so Y writes no node; X's rerun
// finishes it, a0 with the others. Before, each bumped its joining node
// first: Y finished without a0, which stayed migrating at X's token,
// refused by every rerun (found by a review).
func TestConcurrentAppliesOfDifferentTopologies(t *testing.T) {
	f := newFake()
	f.at(1, two, nil, PhaseStable, "n1", "n2")
	x := topo(map[string][]string{"r": {"a0", "n1", "n2"}})
	y := topo(map[string][]string{"r": {"b0", "n1", "n2"}})
	crashed := errors.New("crashed")
	h := &hookDriver{fakeDriver: f, hook: func() {
		if _, err := apply(t, f, Options{To: x, Crash: func(context.Context, string) error { return crashed }}); !errors.Is(err, crashed) {
			t.Errorf("X = %v, want it crashed after its first bump", err)
		}
	}}
	if _, err := Apply(context.Background(), Options{To: y, Logger: quiet}, h); err == nil {
		t.Fatal("Y went through though X had bumped a node")
	}
	if _, ok := f.recs["b0"]; ok {
		t.Fatalf("b0 written by the refused Y: %+v", f.recs["b0"])
	}
	if rep, err := apply(t, f, Options{To: x}); err != nil || rep.Phase != PhaseStable {
		t.Fatalf("X's rerun = %+v, %v", rep, err)
	}
	for _, n := range []string{"a0", "n1", "n2"} {
		if r := f.recs[n]; r.Token != Token(2, x.Fingerprint()) || r.Phase != PhaseStable {
			t.Fatalf("%s after X's rerun: %+v; want stable at X's token", n, r)
		}
	}
}

// TestApplyWaitsThenFinishes: counters held past Wait leave the phase
// migrating with Waiting counted and nothing stable; a later rerun ends it.
func TestApplyWaitsThenFinishes(t *testing.T) {
	f := newFake()
	f.at(1, two, nil, PhaseStable, "n1", "n2")
	f.busy = []int{4, 4, 4, 4}
	rep, err := apply(t, f, Options{To: three, Wait: time.Millisecond})
	if err != nil || rep.Phase != PhaseMigrating || rep.Waiting != 4 {
		t.Fatalf("apply = %+v, %v", rep, err)
	}
	for n, r := range f.recs {
		if r.Phase != PhaseMigrating {
			t.Fatalf("%s is %s while counters wait", n, r.Phase)
		}
	}
	f.busy = nil
	rep, err = apply(t, f, Options{To: three})
	if err != nil || rep.Phase != PhaseStable || rep.AlreadyApplied {
		t.Fatalf("rerun = %+v, %v", rep, err)
	}
}

// TestApplyDryRunAndFinishedMigration: a dry run writes nothing; a rerun
// whose driver finds step 3 done goes straight to stable.
func TestApplyDryRunAndFinishedMigration(t *testing.T) {
	f := newFake()
	f.at(1, two, nil, PhaseStable, "n1", "n2")
	f.pending["n9"] = 5
	rep, err := apply(t, f, Options{To: three, DryRun: true})
	if err != nil || len(f.writes) != 0 || rep.ToEpoch != 2 {
		t.Fatalf("dry run = %+v, %v; writes %v", rep, err, f.writes)
	}
	if tok := Token(2, three.Fingerprint()); len(f.checked) != 1 || f.checked[0].Token != tok || f.checked[0].From.Fingerprint() != two.Fingerprint() {
		t.Fatalf("the dry run's Driver.Check calls: %+v, want one for %s from %s", f.checked, tok, two)
	}
	f.at(2, three, &two, PhaseMigrating, "n1", "n2", "n3")
	f.stable = true
	rep, err = apply(t, f, Options{To: three})
	if err != nil || rep.Phase != PhaseStable || f.passes != 0 || len(f.writes) != 3 {
		t.Fatalf("apply = %+v, %v; passes %d, writes %v", rep, err, f.passes, f.writes)
	}
}

// TestApplyCountsLeavingPending: the check counts what leaving nodes hold.
func TestApplyCountsLeavingPending(t *testing.T) {
	f := newFake()
	f.at(1, three, nil, PhaseStable, "n1", "n2", "n3")
	f.pending["n3"] = 5
	rep, err := apply(t, f, Options{To: two})
	if err != nil || rep.LeftPending != 5 || !reflect.DeepEqual(rep.Left, []string{"n3"}) {
		t.Fatalf("apply = %+v, %v", rep, err)
	}
}

// TestApplyBringsBackANodeThatWentBack: a node restored from an older
// copy of its data (accepted) holds the previous epoch's stable record
// while the others are stable at the current one; applying the current
// topology again writes it the current stable record from the token it
// read, without a step 3, then every node is stable at the current
// token; so is one whose copy is two epochs older. The node that left
// with the last apply is not touched: it may be gone.
func TestApplyBringsBackANodeThatWentBack(t *testing.T) {
	f := newFake()
	f.at(2, three, &two, PhaseStable, "n1", "n2", "n3")
	f.at(1, two, nil, PhaseStable, "n2") // n2 went back to a copy of epoch 1
	rep, err := apply(t, f, Options{To: three, DryRun: true})
	if err != nil || !reflect.DeepEqual(rep.Forward, []string{"n2"}) || len(f.writes) != 0 {
		t.Fatalf("dry run = %+v, %v; writes %v", rep, err, f.writes)
	}
	if f.retires != 0 {
		t.Fatalf("the dry run retired on %v", f.retiredOn)
	}
	f.retired, f.reinstalled = 2, 1
	rep, err = apply(t, f, Options{To: three})
	if err != nil || rep.Phase != PhaseStable || rep.AlreadyApplied || f.relocs != 0 || !reflect.DeepEqual(rep.Forward, []string{"n2"}) {
		t.Fatalf("apply = %+v, %v; relocates %d", rep, err, f.relocs)
	}
	// before the write, what came back on n2 is retired and what step 3
	// moved onto it put back, for the move from two to three at epoch 2
	c := f.retireChange
	if f.retires != 1 || !reflect.DeepEqual(f.retiredOn[0], []string{"n2"}) || rep.Retired != 2 || rep.Reinstalled != 1 ||
		!c.Forward || c.Token != Token(2, three.Fingerprint()) || c.From.Fingerprint() != two.Fingerprint() ||
		c.To.Fingerprint() != three.Fingerprint() || !reflect.DeepEqual(c.Joined, []string{"n3"}) {
		t.Fatalf("retire calls %v with %+v; report %+v", f.retiredOn, c, rep)
	}
	tok := Token(2, three.Fingerprint())
	for _, n := range []string{"n1", "n2", "n3"} {
		if r := f.recs[n]; r.Token != tok || r.Phase != PhaseStable {
			t.Fatalf("%s is at %s %s, want %s stable (writes %v)", n, r.Token, r.Phase, tok, f.writes)
		}
	}
	if !reflect.DeepEqual(f.writes, []string{"n2:" + tok + ":stable"}) {
		t.Fatalf("writes %v, want n2's stable record alone", f.writes)
	}
	rep, err = apply(t, f, Options{To: three})
	if err != nil || !rep.AlreadyApplied {
		t.Fatalf("second apply = %+v, %v", rep, err)
	}
	// n1 goes back now: n2's forwarded record, read first as the newest,
	// keeps the previous topology, so the apply is not taken as done
	if p := f.recs["n2"].Prev; p == nil || p.Fingerprint() != two.Fingerprint() {
		t.Fatalf("n2's forwarded record has prev %v, want the previous topology", p)
	}
	f.at(1, two, nil, PhaseStable, "n1")
	rep, err = apply(t, f, Options{To: three})
	if err != nil || rep.AlreadyApplied || !reflect.DeepEqual(rep.Forward, []string{"n1"}) || f.recs["n1"].Token != tok {
		t.Fatalf("apply after n1 went back = %+v, %v; n1 at %s", rep, err, f.recs["n1"].Token)
	}

	// n4 left with the last apply and is gone; n2 is two epochs behind.
	f = newFake()
	four := topo(map[string][]string{"r": {"n1", "n2", "n3", "n4"}})
	f.at(3, three, &four, PhaseStable, "n1", "n2", "n3")
	f.at(1, two, nil, PhaseStable, "n2")
	f.gone = map[string]bool{"n4": true}
	rep, err = apply(t, f, Options{To: three})
	if r := f.recs["n2"]; err != nil || rep.Phase != PhaseStable || r.Epoch != 3 || r.Phase != PhaseStable {
		t.Fatalf("apply over a node two epochs behind, n4 gone = %+v, %v; n2 at epoch %d %s", rep, err, r.Epoch, r.Phase)
	}
}
