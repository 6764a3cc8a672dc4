package explore

import (
	"strings"
	"testing"
	"time"
)

// TestOOMActorRefusesAndLifts: schedules with the memory actor fill a
// node, some actor is refused for it (inventory.ErrOutOfMemory: "node nX is out of memory"), every
// check holds, and no node is left with a memory limit.
func TestOOMActorRefusesAndLifts(t *testing.T) {
	t.Parallel() // most of a schedule is waiting for deadlines
	w, ctx := testWorld(t, false, 2*time.Minute)
	filled, refused := false, false
	for seed := int64(1); seed <= 8 && !(filled && refused); seed++ {
		res, err := w.RunSchedule(ctx, seed, Options{OOM: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Violations) > 0 {
			t.Errorf("seed %d: %v", seed, res.Violations)
		}
		for _, l := range res.Log {
			filled = filled || strings.HasPrefix(l, "oom: node ") && strings.HasSuffix(l, " out of memory: ok")
			refused = refused || !strings.HasPrefix(l, "oom: ") && strings.Contains(l, " is out of memory (maxmemory")
		}
	}
	if !filled || !refused {
		t.Errorf("a node filled: %v, an actor refused for it: %v; want both", filled, refused)
	}
	for _, name := range allNodes {
		if v, err := w.direct[name].ConfigGet(ctx, "maxmemory").Result(); err != nil || v["maxmemory"] != "0" {
			t.Errorf("node %s's maxmemory after the schedules: %v, %v; want 0", name, v, err)
		}
	}
}
