package tests

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/shardis/shardis/internal/chaos"
)

// TestChaosShort is a short `make chaos` run (~20s) with a fixed seed: clients
// reserving, confirming and cancelling over HTTP against the in-process
// service and three AOF redis-server nodes, while every kind of fault
// (kill -9 and restart, SIGSTOP past the client timeout, a route drain, a
// service restart) is injected at least once; then healing and every
// invariant check. A failure prints the command that replays the run
// (timings differ; the choices are the same).
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos run: skipped with -short")
	}
	// beside the package's other parallel tests: its invariants hold
	// whatever the load (a violation under load is a bug), and it spends
	// most of its 12 s waiting on its faults and deadlines
	t.Parallel()
	var out bytes.Buffer
	start := time.Now()
	rep, err := chaos.Run(context.Background(), chaos.Options{
		Seed:           20260611,
		Duration:       12 * time.Second,
		Clients:        6,
		ReservationTTL: 2 * time.Second,
		FaultGapMin:    300 * time.Millisecond,
		FaultGapMax:    600 * time.Millisecond,
		Out:            &out,
	})
	if rep != nil {
		rep.Print(&out)
	}
	t.Logf("chaos run took %v:\n%s", time.Since(start).Round(time.Millisecond), out.String())
	if err != nil {
		t.Fatalf("chaos run: %v", err)
	}
	if !rep.OK() {
		t.Fatalf("chaos run found %d kinds of violations (report above)", len(rep.ViolationCounts))
	}
	// The nemesis injects every kind once first; on a very slow machine
	// the last ones may not fit in the run, which is worth a note only.
	kinds := map[string]bool{}
	for _, f := range rep.Timeline {
		kinds[f.Kind] = true
	}
	if !kinds[chaos.FaultKill] && !kinds[chaos.FaultPause] {
		t.Errorf("no node was killed or paused: faults %v", rep.Timeline)
	}
	for _, k := range []string{chaos.FaultKill, chaos.FaultPause, chaos.FaultDrain, chaos.FaultRestart, chaos.FaultTopology, chaos.FaultRollback} {
		if !kinds[k] {
			t.Logf("note: fault %q was not injected in this run", k)
		}
	}
}
