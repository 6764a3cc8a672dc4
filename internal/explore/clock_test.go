package explore

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestClockActorStepsANodesClock: in a world made with skew, setClock
// moves one node's TIME (and no other's) and Reset sets it right; a
// schedule with the clock actor steps a clock and holds every check; a
// schedule asking for it in a world made without skew is refused.
func TestClockActorStepsANodesClock(t *testing.T) {
	t.Parallel() // most of a schedule is waiting for deadlines
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not installed: no clock skew library")
	}
	if _, err := (&World{}).RunSchedule(context.Background(), 1, Options{Clock: 1}); err == nil || !strings.Contains(err.Error(), "Options.Clock") {
		t.Errorf("a schedule with the clock actor in a world without skew: %v, want an error naming Options.Clock", err)
	}
	w, ctx := testWorld(t, true, time.Minute)
	off := func(name string) time.Duration {
		t.Helper()
		at, err := w.direct[name].Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return time.Until(at)
	}
	near := func(name string, d, want time.Duration) {
		t.Helper()
		if d < want-100*time.Millisecond || d > want+100*time.Millisecond {
			t.Errorf("node %s's TIME is %v off the machine's clock, want %v", name, d.Round(time.Millisecond), want)
		}
	}
	if err := w.setClock("n2", 250); err != nil {
		t.Fatal(err)
	}
	near("n2", off("n2"), 250*time.Millisecond)
	near("n1", off("n1"), 0)
	if err := w.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	near("n2", off("n2"), 0)

	stepped := false
	for seed := int64(1); seed <= 3 && !stepped; seed++ {
		res, err := w.RunSchedule(ctx, seed, Options{Clock: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Violations) > 0 {
			t.Errorf("seed %d: %v", seed, res.Violations)
		}
		for _, l := range res.Log {
			stepped = stepped || strings.HasPrefix(l, "clock: clock of ") && strings.HasSuffix(l, ": ok")
		}
	}
	if !stepped {
		t.Error("no schedule's clock actor stepped a clock")
	}
	for _, name := range allNodes {
		near(name, off(name), 0) // set right before the heal
	}
}
