package inventory

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// idleWorkers is how many workers w has parked.
func idleWorkers(w *workers) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.idle)
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

// TestWorkersReuseAndClose: a worker that finished a function parks and
// runs the next one (no new goroutine); at most maxIdleWorkers park, the
// others exit; close makes the parked ones exit; run still runs
// functions after close, on goroutines that exit. Not parallel: it
// counts the process's goroutines.
func TestWorkersReuseAndClose(t *testing.T) {
	before := runtime.NumGoroutine()
	var w workers
	ran := make(chan int, 1)
	w.run(func() { ran <- 1 })
	<-ran
	waitFor(t, "the first worker to park", func() bool { return idleWorkers(&w) == 1 })
	parked := runtime.NumGoroutine()

	w.run(func() { ran <- 2 })
	if got := <-ran; got != 2 {
		t.Fatalf("ran %d, want 2", got)
	}
	waitFor(t, "the worker to park again", func() bool { return idleWorkers(&w) == 1 })
	if n := runtime.NumGoroutine(); n != parked {
		t.Fatalf("%d goroutines after a second function, want %d: the parked worker was not reused", n, parked)
	}

	// More functions at once than may park: all run, maxIdleWorkers park.
	const burst = maxIdleWorkers + 5
	var started, release sync.WaitGroup
	started.Add(burst)
	release.Add(1)
	for range burst {
		w.run(func() { started.Done(); release.Wait() })
	}
	started.Wait()
	release.Done()
	waitFor(t, "the burst's workers to park or exit", func() bool {
		return idleWorkers(&w) == maxIdleWorkers && runtime.NumGoroutine() == before+maxIdleWorkers
	})

	w.close()
	if n := idleWorkers(&w); n != 0 {
		t.Fatalf("%d workers parked after close", n)
	}
	w.run(func() { ran <- 3 })
	if got := <-ran; got != 3 {
		t.Fatalf("ran %d after close, want 3", got)
	}
	waitFor(t, "every worker to exit after close", func() bool { return runtime.NumGoroutine() == before })
	if n := idleWorkers(&w); n != 0 {
		t.Fatalf("%d workers parked after close and a run", n)
	}
}
