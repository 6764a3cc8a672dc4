package inventory

import (
	"strings"
	"testing"

	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/topology"
)

// TestApplyTakesBackFromAFencedCopyTakenDuringStep3: as
// TestApplyTakesBackFromACopyTakenDuringStep3, but n3 is accepted while
// n1 does not answer, so it is fenced at the apply's own token and
// attempt, and the apply brings it forward (every record at the token
// stable). Retire skipped such a node ("it holds what the apply wrote"):
// c's 10 units stayed on n3, counted on n2 too (found by a review). Now
// what step 3 moved off it is taken back, its records left alone.
func TestApplyTakesBackFromAFencedCopyTakenDuringStep3(t *testing.T) {
	t.Parallel()
	w := newMidStep3(t, 2)
	n3 := w.srvs[2].Client(t)
	w.copy.restore(t, n3)
	acceptWithPaused(t, w.ctx, openInv(t, w.after, Options{}), "n3", w.srvs[0])
	if tok := n3.HGet(w.ctx, node.StampKey, "epoch").Val(); !strings.HasPrefix(tok, node.FencePrefix) {
		t.Fatalf("setup: n3 not fenced: %s", tok)
	}
	if l3 := w.loaded(t, 2); l3 != 10 {
		t.Fatalf("setup: n3 holds %d loaded, want 10", l3)
	}
	rep, err := w.apply(nil)
	if err != nil || rep.Phase != topology.PhaseStable {
		t.Fatalf("apply after n3 went back = %+v, %v; want stable", rep, err)
	}
	if l2, l3 := w.loaded(t, 1), w.loaded(t, 2); l2 != 10 || l3 != 0 || rep.TakenBack != 1 {
		t.Errorf("after the apply: n2 holds %d loaded, n3 %d, %d taken back; want 10 and 0 (counted once), 1", l2, l3, rep.TakenBack)
	}
}

// TestResumeAfterStep3TakesBackFromANodeBehind: n3 goes back to a copy
// from before an apply that moved route c off it, and n1 to one taken
// during that apply's step 3 (at the token, migrating) while n2 is
// stable: the rerun resumes, finds step 3 ended and runs none, and bumped
// n3 from behind without a take back: c's 10 units stayed on n3, counted
// on n2 too, reported nowhere (found by a review). Now the nodes behind
// are brought forward (Change.Forward) too when step 3 ended.
func TestResumeAfterStep3TakesBackFromANodeBehind(t *testing.T) {
	t.Parallel()
	w := newMidStep3(t, 0) // n1's copy, bumped, in step 3
	n1, n3 := w.srvs[0].Client(t), w.srvs[2].Client(t)
	w.copy.restore(t, n1)
	if fenced := acceptNode(t, w.ctx, w.after, n1, "n1"); fenced {
		t.Fatal("setup: n1 fenced")
	}
	w.old3.restore(t, n3)
	if fenced := acceptNode(t, w.ctx, w.after, n3, "n3"); !fenced {
		t.Fatal("setup: n3 not fenced")
	}
	if ph := n1.HGet(w.ctx, keyTopology, "phase").Val(); ph != string(topology.PhaseMigrating) || w.loaded(t, 2) != 10 {
		t.Fatalf("setup: n1 phase %q, n3 loaded %d; want migrating, 10", ph, w.loaded(t, 2))
	}
	rep, err := w.apply(nil)
	if err != nil || rep.Phase != topology.PhaseStable {
		t.Fatalf("apply after n1, n3 went back = %+v, %v; want stable", rep, err)
	}
	if l2, l3 := w.loaded(t, 1), w.loaded(t, 2); l2 != 10 || l3 != 0 || rep.TakenBack != 1 {
		t.Errorf("after the apply: n2 holds %d loaded, n3 %d, %d taken back; want 10 and 0 (counted once), 1", l2, l3, rep.TakenBack)
	}
}
