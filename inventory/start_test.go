package inventory

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
)

// start (round.go) against a real node: calls begun on a paused node return
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

// TestSendRound runs a round (round.go) against a real node: every call's
// outcome comes back in the calls' order, each from its own call (the
// begun ones and the last, which runs on the caller's goroutine), an
// error reply stays its call's, a call whose arguments could not be made
// is not sent and answers its own error, every call has run when the
// round returns, and an empty round appends nothing.
func TestSendRound(t *testing.T) {
	e := newGroupEnv(t, 32)
	e.warm(t)
	noArgs := errors.New("its arguments could not be made")
	call := func(key, add string) scriptCall {
		return scriptCall{n: e.n, s: groupTestScript, keys: []string{key, "x"}, args: []any{add}}
	}
	calls := []scriptCall{call("round-a", "3"), {n: e.n, s: groupTestScript, err: noArgs}, call("round-b", "bad"), call("round-c", "5")}
	out := e.inv.sendRound(e.ctx, calls, make([]callReply, 0, len(calls)))
	if len(out) != len(calls) {
		t.Fatalf("%d outcomes for %d calls", len(out), len(calls))
	}
	if v, ok := out[0].v.(int64); out[0].err != nil || !ok || v != 3 {
		t.Errorf("begun call: %v, %v; want 3", out[0].v, out[0].err)
	}
	if out[1].err != noArgs || out[1].v != nil {
		t.Errorf("call that could not be made: %v, %v; want its own error", out[1].v, out[1].err)
	}
	if out[2].err == nil || errors.Is(out[2].err, noArgs) {
		t.Errorf("call answered with an error reply: %v, %v; want that error", out[2].v, out[2].err)
	}
	if v, ok := out[3].v.(int64); out[3].err != nil || !ok || v != 5 {
		t.Errorf("last call (run on the caller's goroutine): %v, %v; want 5", out[3].v, out[3].err)
	}
	for key, want := range map[string]string{"round-a": "3", "round-b": "", "round-c": "5"} {
		got, err := e.admin.Get(e.ctx, key).Result()
		if err != nil && want != "" || got != want {
			t.Errorf("after the round, %s = %q (%v), want %q", key, got, err, want)
		}
	}
	if out := e.inv.sendRound(e.ctx, nil, out[:0]); len(out) != 0 {
		t.Errorf("an empty round: %d outcomes, want none", len(out))
	}
}
