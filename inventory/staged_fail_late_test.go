package inventory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// A one-round attempt whose caller gave up mid-round (order_ops.go,
// releaseStaged): its takes never left this instance (taken off their
// groups' queues), its stage was under way, and the attempt's fail went
// out on another connection and reached the home node first, where no
// record was yet. The stage lands after it. Met in CI (2026-12-04,
// tests.TestSvcRetryAfterTimeoutIsPrompt): the fail wrote nothing there,
// so the stage left a staging record whose takes could never be found,
// and a retry of the order id waited out the whole attempt lease (10 s by
// default) before it could decide it.

// failBeforeStage is the Faults of that attempt: the takes of order are
// lost before they reach a node; its first stage is answered at once
// with an unknown outcome and sent only after the attempt's fail (or
// release) of the order ran on the home node.
type failBeforeStage struct {
	order    string
	failRan  chan struct{} // closed once the fail ran
	landed   chan any      // the late stage's reply (or error), once it ran
	failOnce sync.Once

	mu     sync.Mutex
	stages int
}

func (f *failBeforeStage) Call(ctx context.Context, c ScriptCall, send func() (any, error)) (any, error) {
	if callOrder(c) != f.order {
		return send()
	}
	switch {
	case c.Script == "reserve" && !f.ran():
		return nil, fmt.Errorf("take taken off its queue: %w", context.DeadlineExceeded)
	case c.Script == "stage-take":
		f.mu.Lock()
		f.stages++
		first := f.stages == 1
		f.mu.Unlock()
		if !first {
			return send()
		}
		go func() {
			<-f.failRan
			v, err := send()
			if err != nil {
				f.landed <- err
				return
			}
			f.landed <- v
		}()
		return nil, fmt.Errorf("the caller stopped waiting, its group under way: %w", context.DeadlineExceeded)
	case len(c.Args) > 0 && (c.Args[0] == string(opFail) || c.Args[0] == string(opRelease)):
		v, err := send()
		f.failOnce.Do(func() { close(f.failRan) })
		return v, err
	}
	return send()
}

// ran reports whether the attempt's fail ran (the first attempt is over).
func (f *failBeforeStage) ran() bool {
	select {
	case <-f.failRan:
		return true
	default:
		return false
	}
}

func (f *failBeforeStage) Crash(context.Context, string) bool { return false }

// TestStageLandingAfterItsFailLeavesNoLease: the attempt's fail records
// the failure under its token where the order has no record (as the
// general path's release does), so the late stage meets it and writes
// nothing, and a retry of the order id is answered at once, not after the
// attempt lease.
func TestStageLandingAfterItsFailLeavesNoLease(t *testing.T) {
	t.Parallel()
	e := newStagedEnv(t)
	id := e.awayOrder("late")
	f := &failBeforeStage{order: id, failRan: make(chan struct{}), landed: make(chan any, 1)}
	const lease = 30 * time.Second // far longer than the retry may take
	inv, err := New(e.r, Options{Logger: slog.New(slog.DiscardHandler), AttemptLease: lease, Faults: f})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(inv.Close)

	if _, err := inv.Reserve(e.ctx, id, stagedItems(), "", time.Minute); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Reserve with its stage's outcome unknown = %v, want ErrUnavailable", err)
	}
	var got any
	select {
	case got = <-f.landed:
	case <-time.After(10 * time.Second):
		t.Fatal("the attempt's fail did not run within 10s")
	}
	t.Logf("the late stage answered %v", got)
	e.verify(id, "failed")

	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	res, err := inv.Reserve(ctx, id, stagedItems(), "", time.Minute)
	if err != nil {
		t.Fatalf("retry of the order id after %v: %v", time.Since(start).Round(time.Millisecond), err)
	}
	if len(res.Receipts) != 3 {
		t.Errorf("retry's receipts %+v, want 3", res.Receipts)
	}
	e.verify(id, "reserved")
	e.stock()
}
