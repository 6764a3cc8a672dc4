package inventory

import (
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"

	"github.com/shardis/shardis/topology"
)

// TestResumeBesideAConcurrentStep4NamesABusyCounter: as in
// TestResumeTakesBackBeforeItBumpsANodeBehind, apply A moves route c off
// n3 (its 10 units of c/s to n2), n3 goes back once A's step 3 has
// passed it, to a copy from before A, and is accepted (fenced), and apply
// B of the same change resumes, bumps n3 and dies (crash point "bump").
// But n3's copy holds 3 units of c/s reserved and user u's quota count
// of 3, held by order o-p's part pending then (cancelled before A ran):
// busy, so B's take back before its bump leaves both to the step 3 after
// it, which B never runs. Before step 4 wrote a node stable only at the
// incarnation read before its step 3 began, A's step 4 wrote n3 stable
// (at the token since B's bump): every node stable, a rerun reported the
// topology applied, and c's 10 units stayed on n3, counted on n2 too,
// reported nowhere (apply_takeback.go's "not closed"). Now A's step 4
// refuses n3 (accepted since A read it), and the run again, which finds
// n1 and n2 stable, brings n3 forward: its take back leaves both busy
// counters, as every move forward does, and names them (Report.
// LeftBehind, a warning each).
func TestResumeBesideAConcurrentStep4NamesABusyCounter(t *testing.T) {
	t.Parallel()
	ctx, srvs, after, n3, old3 := routeCOffN3WithABusyCopy(t)
	w := &midStep3{ctx: ctx, srvs: srvs, after: after, quiet: slog.New(slog.DiscardHandler)}
	var resumeErr error
	a := &afterScript{node: "n3", script: xferDoneScript.name, then: func() {
		if l2, l3 := w.loaded(t, 1), w.loaded(t, 2); l2 != 10 || l3 != 0 {
			t.Errorf("setup: after A's transfer n2 holds %d loaded, n3 %d; want 10 and 0", l2, l3)
		}
		old3.restore(t, n3)
		if fenced := acceptNode(t, ctx, after, n3, "n3"); !fenced {
			t.Error("setup: n3 accepted unfenced; want it fenced behind its peers")
		}
		_, resumeErr = w.apply(crashAtPoint("bump"))
	}}
	rep, err := w.apply(a)
	if !errors.Is(resumeErr, ErrCrashed) {
		t.Fatalf("apply B = %v; want it crashed after its bump", resumeErr)
	}
	if !errors.Is(err, ErrTopology) || !strings.Contains(err.Error(), "incarnation") || rep.StockMoved != 1 {
		t.Fatalf("apply A = %+v, %v; want 1 stock hash moved, its step 4 refused on n3 for its new incarnation", rep, err)
	}
	again, err := w.apply(nil)
	if err != nil || again.Phase != topology.PhaseStable || !reflect.DeepEqual(again.Forward, []string{"n3"}) {
		t.Fatalf("apply again = %+v, %v; want stable, n3 brought forward", again, err)
	}
	want := []topology.LeftCounter{{Node: "n3", Key: quotaKey("c", "s", "u"), Why: "held by pending parts"},
		{Node: "n3", Key: stockKey("c", "s"), Why: "units reserved"}}
	if again.TakenBack != 0 || !reflect.DeepEqual(again.LeftBehind, want) {
		t.Errorf("taken back %d, left behind %+v; want 0 and %+v", again.TakenBack, again.LeftBehind, want)
	}
	if rep, err := w.apply(nil); err != nil || !rep.AlreadyApplied {
		t.Fatalf("a last run = %+v, %v; want already applied", rep, err)
	}
}
