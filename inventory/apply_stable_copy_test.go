package inventory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/topology"
)

// chainedFaults is the tests' Faults made of several: each call goes
// through every one of them, the first outermost; an actor crashes at a
// point where any of them crashes it.
type chainedFaults []Faults

// Call implements Faults.
func (fs chainedFaults) Call(ctx context.Context, call ScriptCall, send func() (any, error)) (any, error) {
	if len(fs) == 0 {
		return send()
	}
	return fs[0].Call(ctx, call, func() (any, error) { return fs[1:].Call(ctx, call, send) })
}

// Crash implements Faults.
func (fs chainedFaults) Crash(ctx context.Context, point string) bool {
	for _, f := range fs {
		if f.Crash(ctx, point) {
			return true
		}
	}
	return false
}

// TestStableRefusedOnACopyTakenDuringStep3AcceptedBeforeStep4: one apply
// moves route c off a node (its 10 units of c/s to n2: out, in, done on
// the node). The node's copy is taken during its step 3, at the token,
// just before the transfer's out there; once the transfer's done ran
// there (step 3 has passed the node: its last call there), the node goes
// back to that copy and is accepted unfenced (its peers hold the same
// token and attempt), with c's 10 units, which n2 holds too. Before, step
// 4 then wrote it stable as it was (nothing in its record tells it from
// the node step 3 wrote): 10 units on n2 and on the node, and a rerun
// reported the topology already applied. Now step 4 refuses a node whose
// incarnation changed since step 3 began (the accept gave it a new one):
// the apply fails, and its rerun finishes. With the node n3, step 4 wrote
// n1 and n2 stable before it refused n3: the rerun finds step 3 ended and
// brings n3 forward, taking c/s back off it (the marker on n2). With the
// node n1, step 4 refused it first, no node stable: the rerun resumes, and
// its step 3 finishes the transfer (its in a no-op on n2's marker, its
// done taking the units off n1 again).
func TestStableRefusedOnACopyTakenDuringStep3AcceptedBeforeStep4(t *testing.T) {
	t.Parallel()
	for _, off := range []int{2, 0} {
		t.Run(fmt.Sprintf("off=n%d", off+1), func(t *testing.T) { copyAcceptedBeforeStep4(t, off) })
	}
}

// copyAcceptedBeforeStep4 runs the test above with route c moved off node
// off (0, 2: n1, n3) onto n2.
func copyAcceptedBeforeStep4(t *testing.T, off int) {
	srvs := redistest.StartN(t, 3, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	name := fmt.Sprintf("n%d", off+1)
	addrs := map[string]string{"n1": srvs[0].Addr(), "n2": srvs[1].Addr(), "n3": srvs[2].Addr()}
	before := leaveConfig(t, addrs, map[string][]string{"a": {"n1"}, "b": {"n2"}, "c": {name}, "d": {"n3"}})
	after := leaveConfig(t, addrs, map[string][]string{"a": {"n1"}, "b": {"n2"}, "c": {"n2"}, "d": {"n3"}})
	nx := srvs[off].Client(t)
	w := &midStep3{ctx: ctx, srvs: srvs, after: after, quiet: slog.New(slog.DiscardHandler)}
	inv := openInv(t, before, Options{})
	if _, err := inv.LoadStock(ctx, "c", "s", 10, 0); err != nil {
		t.Fatal(err)
	}
	inv.Close()
	copied := &copyBeforeScript{t: t, node: name, script: xferOutScript.name, c: nx}
	accepted := &afterScript{node: name, script: xferDoneScript.name, then: func() {
		if l2, lx := w.loaded(t, 1), w.loaded(t, off); l2 != 10 || lx != 0 {
			t.Errorf("setup: after the transfer n2 holds %d loaded, %s %d; want 10 and 0", l2, name, lx)
		}
		copied.copy.restore(t, nx)
		if fenced := acceptNode(t, ctx, after, nx, name); fenced {
			t.Errorf("setup: %s fenced; want it accepted at the token (same token and attempt as its peers)", name)
		}
		if lx := w.loaded(t, off); lx != 10 {
			t.Errorf("setup: %s back to its copy holds %d loaded; want 10", name, lx)
		}
	}}
	rep, err := w.apply(chainedFaults{copied, accepted})
	if !errors.Is(err, ErrTopology) || !strings.Contains(err.Error(), "incarnation") || rep.Phase == topology.PhaseStable {
		t.Errorf("the apply during which %s went back = %+v, %v; want its step 4 refused on %s for its new incarnation", name, rep, err, name)
	}
	again, err := w.apply(nil)
	if err != nil || again.Phase != topology.PhaseStable {
		t.Fatalf("the rerun = %+v, %v; want stable", again, err)
	}
	switch name {
	case "n3":
		if !reflect.DeepEqual(again.Forward, []string{"n3"}) || again.TakenBack != 1 {
			t.Errorf("the rerun brought forward %v, took back %d; want n3, 1 (c/s)", again.Forward, again.TakenBack)
		}
	case "n1":
		if len(again.Forward) != 0 || again.StockMoved != 1 {
			t.Errorf("the rerun brought forward %v, moved %d stock hashes; want none, 1 (its step 3: c/s)", again.Forward, again.StockMoved)
		}
	}
	if l2, lx := w.loaded(t, 1), w.loaded(t, off); l2 != 10 || lx != 0 {
		t.Errorf("at the end: n2 holds %d loaded, %s %d; want 10 and 0 (counted once)", l2, name, lx)
	}
	if rep, err := w.apply(nil); err != nil || !rep.AlreadyApplied {
		t.Fatalf("a last run = %+v, %v; want already applied", rep, err)
	}
	lvl, err := openInv(t, after, Options{}).GetStock(ctx, "c", "s")
	if err != nil || lvl.Loaded != 10 || lvl.Available != 10 {
		t.Errorf("GetStock(c, s) = %+v, %v; want 10 loaded, 10 available", lvl, err)
	}
}
