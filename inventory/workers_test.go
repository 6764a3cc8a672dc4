package inventory

import (
	"sync"
	"testing"
	"time"
)

// workerCounts is how many workers w has parked and alive.
func workerCounts(w *workers) (idle, live int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.idle), w.live
}

// waitFor polls cond until it holds, failing the test after 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s after 5s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// countsAre is a condition: w has idle parked and live alive workers.
func countsAre(w *workers, idle, live int) func() bool {
	return func() bool {
		i, l := workerCounts(w)
		return i == idle && l == live
	}
}

// TestWorkersReuseAndClose: a worker that finished a function parks and
// runs the next one (no new goroutine); at most maxIdleWorkers park, the
// others exit; close makes the parked ones exit; run still runs
// functions after close, on goroutines that exit. It counts the pool's
// own workers, not the process's goroutines, which other tests' routers
// start and stop at any time.
func TestWorkersReuseAndClose(t *testing.T) {
	t.Parallel()
	var w workers
	ran := make(chan int, 1)
	w.run(func() { ran <- 1 })
	<-ran
	waitFor(t, "the first worker to park", countsAre(&w, 1, 1))

	w.run(func() { ran <- 2 })
	if got := <-ran; got != 2 {
		t.Fatalf("ran %d, want 2", got)
	}
	waitFor(t, "the worker to park again", countsAre(&w, 1, 1)) // reused: no second worker

	// More functions at once than may park: all run, maxIdleWorkers park.
	const burst = maxIdleWorkers + 5
	var started, release sync.WaitGroup
	started.Add(burst)
	release.Add(1)
	for range burst {
		w.run(func() { started.Done(); release.Wait() })
	}
	started.Wait()
	if idle, live := workerCounts(&w); idle != 0 || live != burst {
		t.Fatalf("%d workers parked and %d alive while %d functions run, want 0 and %d", idle, live, burst, burst)
	}
	release.Done()
	waitFor(t, "the burst's workers to park or exit", countsAre(&w, maxIdleWorkers, maxIdleWorkers))

	w.close()
	if idle, _ := workerCounts(&w); idle != 0 {
		t.Fatalf("%d workers parked after close", idle)
	}
	waitFor(t, "every worker to exit after close", countsAre(&w, 0, 0))
	w.run(func() { ran <- 3 })
	if got := <-ran; got != 3 {
		t.Fatalf("ran %d after close, want 3", got)
	}
	if idle, live := workerCounts(&w); idle != 0 || live != 0 {
		t.Fatalf("%d workers parked and %d alive after close and a run, want none", idle, live)
	}
}
