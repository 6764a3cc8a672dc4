package inventory

import "sync"

// maxIdleWorkers bounds the goroutines a [workers] keeps parked between
// functions. The functions it runs send groups or refusal reads (at most
// groupInFlight, or peekInFlight, batches per node at once) or the calls
// a caller does not wait for (start), so a few dozen cover a busy
// instance; a burst above that starts goroutines that exit when done.
const maxIdleWorkers = 32

// workers runs functions on goroutines it reuses: one that finished a
// function parks until the next one (last parked, first reused), up to
// maxIdleWorkers of them. A sender goes deep into go-redis, and a
// goroutine's stack starts small and is copied each time it doubles: a
// new goroutine per send paid that growth every time (3 to 4 % of the
// client's CPU in the parallel reserve benchmarks, 16 callers). A parked
// goroutine keeps its stack until a garbage collection shrinks it.
//
// The zero value is ready. After close, run starts a goroutine per
// function, which exits when it is done; close makes the parked ones exit
// and the busy ones exit when their function returns, so none is left
// once every function returned.
type workers struct {
	mu sync.Mutex // guards the fields below
	// idle holds a channel per parked worker, each of capacity 1: run
	// takes one out and sends it a function, which its worker receives;
	// a closed channel tells its worker to exit.
	idle   []chan func()
	closed bool
	live   int // workers started and not yet exited, parked ones included
}

// run runs f on a parked worker, or on a new goroutine when none is
// parked. It never blocks.
func (w *workers) run(f func()) {
	w.mu.Lock()
	if n := len(w.idle); n > 0 {
		ch := w.idle[n-1]
		w.idle[n-1] = nil
		w.idle = w.idle[:n-1]
		w.mu.Unlock()
		ch <- f
		return
	}
	closed := w.closed
	if !closed {
		w.live++
	}
	w.mu.Unlock()
	if closed {
		go f()
		return
	}
	go w.loop(f)
}

// loop runs f, then each function it is handed while parked, until it is
// told to exit, the pool is closed, or it finds maxIdleWorkers parked.
func (w *workers) loop(f func()) {
	ch := make(chan func(), 1)
	for {
		f()
		w.mu.Lock()
		if w.closed || len(w.idle) >= maxIdleWorkers {
			w.live--
			w.mu.Unlock()
			return
		}
		w.idle = append(w.idle, ch)
		w.mu.Unlock()
		var ok bool
		if f, ok = <-ch; !ok {
			w.mu.Lock()
			w.live--
			w.mu.Unlock()
			return
		}
	}
}

// close makes every parked worker exit, and the busy ones once their
// function returns. run still works afterwards, without reuse.
func (w *workers) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	for _, ch := range w.idle {
		close(ch)
	}
	w.idle = nil
}
