package inventory

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// hookFaults calls call for every script call (send as it is when nil)
// and crashes nowhere.
type hookFaults struct {
	call func(ctx context.Context, c ScriptCall, send func() (any, error)) (any, error)
}

func (h *hookFaults) Call(ctx context.Context, c ScriptCall, send func() (any, error)) (any, error) {
	if h.call == nil {
		return send()
	}
	return h.call(ctx, c, send)
}

func (h *hookFaults) Crash(context.Context, string) bool { return false }

// reserveAsync starts inv.Reserve of id in the background; the function
// it returns waits up to 10 s for its error.
func reserveAsync(ctx context.Context, inv *Inventory, id string, items []Item, ttl time.Duration) func(t *testing.T) error {
	done := make(chan error, 1)
	go func() {
		_, err := inv.Reserve(ctx, id, items, "", ttl)
		done <- err
	}()
	return func(t *testing.T) error {
		t.Helper()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatalf("Reserve %s did not answer", id)
			return nil
		}
	}
}

// orderOpOf is the op of an order script call ("" for other scripts).
func orderOpOf(c ScriptCall) string {
	if c.Script != "order" || len(c.Args) == 0 {
		return ""
	}
	s, _ := c.Args[0].(string)
	return s
}

// The reconciler reads a due part's order staging under a retry's token,
// decides it, and reads it again: between the two, the retry (which took
// nothing) withdrew its record, and the first attempt's held stage landed
// on the empty key, so the first attempt answers success. The second read
// finds staging again: the part is put off, not cancelled. Before, the
// reconciler cancelled the part of an order Reserve had answered
// reserved, and its units were sold again (4 confirmed of 2 loaded).
// Found by a review.
func TestResolveExpiredLeavesARestagedOrder(t *testing.T) {
	t.Parallel() // its own nodes; it mostly waits
	e := newStagedEnv(t)
	const loaded = 2
	if _, err := e.inv.LoadStock(e.ctx, "b", "t", loaded, 0); err != nil {
		t.Fatal(err)
	}
	items := []Item{{Route: "b", SKU: "t", Quantity: 2}}
	x := e.awayOrder("x")
	quiet := slog.New(slog.DiscardHandler)

	// S0: its take lands on n2, its stage is held; its commit (sent by
	// itself: CarryWait < 0) waits for commitRelease.
	l := newLateStage(x)
	stageDone, commitRelease := make(chan struct{}), make(chan struct{})
	var stageOnce sync.Once
	lateF := &hookFaults{call: func(ctx context.Context, c ScriptCall, send func() (any, error)) (any, error) {
		if orderOpOf(c) == "commit" {
			<-commitRelease
			return send()
		}
		v, err := l.Call(ctx, c, send)
		if c.Script == "stage-take" {
			stageOnce.Do(func() { close(stageDone) })
		}
		return v, err
	}}
	late, err := New(e.r, Options{Logger: quiet, AttemptLease: stagedLease, Faults: lateF, CarryWait: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(late.Close)
	s0 := reserveAsync(e.ctx, late, x, items, 2*time.Second)
	e.wait(l.held, "S0's stage held")
	e.wait(l.taken, "S0's take")
	tookAt := time.Now()

	// S: a retry on another instance takes nothing (S0 holds the stock)
	// and withdraws its stage (held until the reconciler decided it),
	// then dies.
	withdrawReached, withdrawRelease, withdrawDone, dead := make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
	retryF := &hookFaults{call: func(ctx context.Context, c ScriptCall, send func() (any, error)) (any, error) {
		select {
		case <-dead:
			return nil, ErrCrashed
		default:
		}
		if orderOpOf(c) == "withdraw" {
			close(withdrawReached)
			<-withdrawRelease
			v, err := send()
			close(withdrawDone)
			close(dead)
			return v, err
		}
		return send()
	}}
	retry, err := New(e.r, Options{Logger: quiet, AttemptLease: stagedLease, Faults: retryF})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(retry.Close)
	sAns := make(chan error, 1)
	time.Sleep(time.Until(tookAt.Add(2200 * time.Millisecond))) // S0's part is due; the withdraw is within its 2s timeout
	go func() {
		_, err := retry.Reserve(e.ctx, x, items, "", time.Minute)
		sAns <- err
	}()
	e.wait(withdrawReached, "S's withdraw")

	// R: its fail of S's record goes after S's withdraw; its second read
	// after S0's stage landed.
	var mu sync.Mutex
	expires := 0
	recF := &hookFaults{call: func(ctx context.Context, c ScriptCall, send func() (any, error)) (any, error) {
		switch orderOpOf(c) {
		case "fail":
			close(withdrawRelease)
			<-withdrawDone
		case "expire":
			mu.Lock()
			expires++
			second := expires == 2
			mu.Unlock()
			if second {
				close(l.release)
				<-stageDone
			}
		}
		return send()
	}}
	rec, err := New(e.r, Options{Logger: quiet, AttemptLease: stagedLease, Faults: recF})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rec.Close)
	n2, _ := e.r.Node("n2")
	resolved := false
	for deadline := time.Now().Add(15 * time.Second); !resolved; time.Sleep(20 * time.Millisecond) {
		due, err := rec.DueParts(e.ctx, n2, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range due {
			if p.OrderID != x || p.State != PartPending {
				continue
			}
			res, err := rec.ResolveExpired(e.ctx, p)
			if res != Postponed || !errors.Is(err, ErrUnavailable) {
				t.Errorf("ResolveExpired of S0's part, its order staged again = %s, %v; want postponed, ErrUnavailable", res, err)
			}
			resolved = true
		}
		if !resolved && time.Now().After(deadline) {
			t.Fatal("S0's part did not come due")
		}
	}
	if err := s0(t); err != nil {
		t.Fatalf("S0, its stage landed on the emptied key, answered %v; want success", err)
	}
	close(commitRelease)
	late.Close()
	<-sAns
	if _, err := e.inv.Confirm(e.ctx, x); err != nil {
		t.Fatalf("Confirm %s, reserved: %v", x, err)
	}
	confirmed := []string{x}
	if _, err := e.inv.Reserve(e.ctx, "y", items, "", time.Minute); err == nil {
		if _, err := e.inv.Confirm(e.ctx, "y"); err != nil {
			t.Fatal(err)
		}
		confirmed = append(confirmed, "y")
	} else if !errors.Is(err, ErrInsufficientStock) {
		t.Fatal(err)
	}
	for _, p := range e.checkConfirmed("b", "t", loaded, confirmed...) {
		t.Error(p)
	}
}

// A Cancel's tombstone (or any record that keeps an attempt's stage out)
// read by the reconciler near its expiry: the reconciler cancels the due
// part of an attempt whose stage is still on its way, relying on the
// record to keep that stage out. The expire op gives the record the
// retention again, so the stage, sent before the read and delayed far
// less than the retention, is refused and the attempt does not answer
// success. Before, the tombstone expired a moment later, the stage landed
// on the empty key, and the order was reserved without its part: 4 units
// confirmed of 2 loaded. Found by a review.
func TestExpireKeepsTheRecordItReliesOn(t *testing.T) {
	t.Parallel()
	const retention = 4 * time.Second
	e := newShortRetentionEnv(t, retention)
	const loaded = 2
	if _, err := e.inv.LoadStock(e.ctx, "b", "t", loaded, 0); err != nil {
		t.Fatal(err)
	}
	items := []Item{{Route: "b", SKU: "t", Quantity: 2}}
	x := e.awayOrder("x")
	if out, err := e.inv.Cancel(e.ctx, x); err != nil || out.Reason != "tombstone" {
		t.Fatalf("Cancel %s = %+v, %v", x, out, err)
	}
	home, _ := e.inv.orderHome(e.inv.topo.cur.Load(), x)
	hc := e.clients[home.Name()]
	for hc.PTTL(e.ctx, orderKey(x)).Val() > 2200*time.Millisecond {
		time.Sleep(20 * time.Millisecond)
	}
	l := newLateStage(x)
	late, err := New(e.r, Options{Logger: slog.New(slog.DiscardHandler), AttemptLease: stagedLease, Faults: l, CarryWait: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(late.Close)
	s0 := reserveAsync(e.ctx, late, x, items, 300*time.Millisecond)
	e.wait(l.held, "x's stage held")
	e.wait(l.taken, "x's take")
	before := hc.PTTL(e.ctx, orderKey(x)).Val()
	if res := e.expireOrder(x); len(res) != 1 || res[0] != Cancelled {
		t.Fatalf("reconciler on x's part (its record a tombstone) = %v; want cancelled", res)
	}
	if after := hc.PTTL(e.ctx, orderKey(x)).Val(); after < retention-time.Second {
		t.Errorf("tombstone's TTL after the reconciler relied on it = %v (was %v); want about the retention, %v", after, before, retention)
	}
	if _, err := e.inv.Reserve(e.ctx, "y", items, "", time.Second); err != nil {
		t.Fatalf("Reserve y: %v", err)
	}
	if _, err := e.inv.Confirm(e.ctx, "y"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(before + 200*time.Millisecond) // past the tombstone's own expiry
	close(l.release)
	confirmed := []string{"y"}
	if s0(t) == nil {
		t.Errorf("x's Reserve, its part cancelled and its stage late, answered success")
		if _, err := e.inv.Confirm(e.ctx, x); err == nil {
			confirmed = append(confirmed, x)
		}
	}
	for _, p := range e.checkConfirmed("b", "t", loaded, confirmed...) {
		t.Error(p)
	}
}
