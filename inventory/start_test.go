package inventory

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
)

// start (lua.go) against a real node: calls begun on a paused node return
// at once, those that queue behind its groups under way take no goroutine,
// every call gets its own reply when the node answers, in as few script
// calls as run's would, and a queued call whose caller gives up sends
// nothing.
func TestStartQueuesWithoutGoroutines(t *testing.T) {
	e := newGroupEnv(t, 32)
	e.warm(t)
	const calls = 20
	before := runtime.NumGoroutine()
	e.pause(t, 500*time.Millisecond)
	began := time.Now()
	waits := make([]func() (any, error), calls)
	for i := range waits {
		waits[i] = e.inv.start(e.ctx, e.n, groupTestScript, []string{"started", "x"}, "1")
	}
	ctx, cancel := context.WithTimeout(e.ctx, 50*time.Millisecond)
	defer cancel()
	gaveUp := e.inv.start(ctx, e.n, groupTestScript, []string{"gaveup", "x"}, "1")
	if d := time.Since(began); d > 300*time.Millisecond {
		t.Fatalf("starting %d calls on a paused node took %v: start waited for the node", calls+1, d)
	}
	// the first groupInFlight calls took the node's slots, each sent by a
	// goroutine of its own; the others wait in the queue, with none (the
	// slack is for the router's own goroutines that come and go: its
	// probes)
	if grew := runtime.NumGoroutine() - before; grew > groupInFlight+4 {
		t.Fatalf("%d calls begun, %d of them queued: %d more goroutines, want at most %d (the senders of the slots' groups, and slack)",
			calls+1, calls+1-groupInFlight, grew, groupInFlight+4)
	}
	q := e.inv.groups.queue(e.n)
	q.mu.Lock()
	inflight, waiting := q.inflight, q.waiting
	q.mu.Unlock()
	if inflight != groupInFlight || waiting != calls+1-groupInFlight {
		t.Fatalf("%d groups under way and %d calls waiting, want %d and %d", inflight, waiting, groupInFlight, calls+1-groupInFlight)
	}
	if _, err := gaveUp(); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("queued call past its deadline: err %v, want ErrUnavailable wrapping the deadline", err)
	}
	seen := map[int64]bool{}
	for i, wait := range waits {
		v, err := wait()
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		n, ok := v.(int64)
		if !ok || n < 1 || n > calls || seen[n] {
			t.Fatalf("call %d replied %v: want its own count, 1..%d, once each", i, v, calls)
		}
		seen[n] = true
	}
	if got := e.sent.of(groupTestScript); got > 2*groupInFlight {
		t.Fatalf("%d calls begun on a paused node ran as %d script calls; want them grouped (at most %d)", calls, got, 2*groupInFlight)
	}
	if n, err := e.admin.Exists(e.ctx, "gaveup").Result(); err != nil || n != 0 {
		t.Fatalf("the call given up while queued ran (exists %d, %v)", n, err)
	}
}
