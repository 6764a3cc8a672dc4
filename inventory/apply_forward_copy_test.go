package inventory

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/shardis/shardis/topology"
)

// TestForwardRefusedOnACopyTakenBeforeItsTakeBackAccepted: route c moved
// off n3 (its 10 units of c/s on n2), then n3 went back and was accepted
// (fenced: a copy from before the apply; or unfenced, migrating at the
// token: a copy taken during its step 3, before the transfer's out): it
// holds c's 10 units again. The apply of the current topology brings n3
// forward: its take back subtracts the 10 units on n3. Its copy is taken
// just before that take back, and once the take back answered, n3 goes
// back to it and is accepted again (as it was: still fenced, or unfenced
// at the token), with the 10 units, which n2 holds too. Before, the move
// forward then wrote n3 stable as it was (compare-and-set on the token it
// read, which the copy holds too): 10 units on n2 and on n3, and a rerun
// reported the topology already applied. Now the move forward writes a
// node stable only at the incarnation it read from it before its take
// back (topology.Record.Incarnation), as step 4 does: the accept gave n3
// a new one, so the write is refused, and the rerun brings n3 forward
// again, taking c/s back off it.
func TestForwardRefusedOnACopyTakenBeforeItsTakeBackAccepted(t *testing.T) {
	t.Parallel()
	for _, back := range []string{"fenced", "migrating"} {
		t.Run(back, func(t *testing.T) { copyAcceptedDuringForward(t, back == "fenced") })
	}
}

// copyAcceptedDuringForward runs the test above with n3 gone back to a
// copy from before the apply (fenced) or to one taken during its step 3.
func copyAcceptedDuringForward(t *testing.T, fenced bool) {
	w := newMidStep3(t, 2)
	n3 := w.srvs[2].Client(t)
	back := w.copy
	if fenced {
		back = w.old3
	}
	back.restore(t, n3)
	if f := acceptNode(t, w.ctx, w.after, n3, "n3"); f != fenced {
		t.Fatalf("setup: n3 accepted fenced %v; want %v", f, fenced)
	}
	if l3 := w.loaded(t, 2); l3 != 10 {
		t.Fatalf("setup: n3 back to its copy holds %d loaded; want 10", l3)
	}
	copied := &copyBeforeScript{t: t, node: "n3", script: xferTakeBackScript.name, c: n3}
	accepted := &afterScript{node: "n3", script: xferTakeBackScript.name, then: func() {
		if l2, l3 := w.loaded(t, 1), w.loaded(t, 2); l2 != 10 || l3 != 0 {
			t.Errorf("setup: after the take back n2 holds %d loaded, n3 %d; want 10 and 0", l2, l3)
		}
		copied.copy.restore(t, n3)
		if f := acceptNode(t, w.ctx, w.after, n3, "n3"); f != fenced {
			t.Errorf("setup: n3 accepted again fenced %v; want %v", f, fenced)
		}
		if l3 := w.loaded(t, 2); l3 != 10 {
			t.Errorf("setup: n3 back to the copy taken before the take back holds %d loaded; want 10", l3)
		}
	}}
	rep, err := w.apply(chainedFaults{copied, accepted})
	if !errors.Is(err, ErrTopology) || !strings.Contains(err.Error(), "incarnation") {
		t.Errorf("the move forward during which n3 went back = %+v, %v; want its stable write refused on n3 for its new incarnation", rep, err)
	}
	w.rerunBringsN3Forward(t)
}

// rerunBringsN3Forward runs the apply again after a run refused n3 for
// its new incarnation: it wants n3 brought forward with c/s taken back
// (10 loaded on n2, 0 on n3: counted once), a last run already applied,
// and GetStock(c, s) at 10.
func (w *midStep3) rerunBringsN3Forward(t *testing.T) {
	t.Helper()
	again, err := w.apply(nil)
	if err != nil || again.Phase != topology.PhaseStable {
		t.Fatalf("the rerun = %+v, %v; want stable", again, err)
	}
	if !reflect.DeepEqual(again.Forward, []string{"n3"}) || again.TakenBack != 1 {
		t.Errorf("the rerun brought forward %v, took back %d; want n3, 1 (c/s)", again.Forward, again.TakenBack)
	}
	if l2, l3 := w.loaded(t, 1), w.loaded(t, 2); l2 != 10 || l3 != 0 {
		t.Errorf("at the end: n2 holds %d loaded, n3 %d; want 10 and 0 (counted once)", l2, l3)
	}
	if rep, err := w.apply(nil); err != nil || !rep.AlreadyApplied {
		t.Fatalf("a last run = %+v, %v; want already applied", rep, err)
	}
	lvl, err := openInv(t, w.after, Options{}).GetStock(w.ctx, "c", "s")
	if err != nil || lvl.Loaded != 10 || lvl.Available != 10 {
		t.Errorf("GetStock(c, s) = %+v, %v; want 10 loaded, 10 available", lvl, err)
	}
}
