package inventory

import (
	"context"
	"errors"
	"testing"
	"time"
)

// slowTakes is the Faults of an instance whose takes of one order reach
// their node late (queued behind groups, a stall, a slow link): every
// "reserve" call of order is delayed by delay; its stage goes at once.
type slowTakes struct {
	order string
	delay time.Duration
}

func (s *slowTakes) Call(ctx context.Context, c ScriptCall, send func() (any, error)) (any, error) {
	if c.Script == "reserve" && callOrder(c) == s.order {
		time.Sleep(s.delay) // the take is late (an injected delay, not a synchronisation)
	}
	return send()
}

func (s *slowTakes) Crash(context.Context, string) bool { return false }

// A one-round attempt R1 refused for good behind its own failed record
// (soldout.go: "the one-round path's take refused for the limit keeps its
// record as a fence"; needsUserMayBeOwn / limitMayBeOwn) relies on that
// record from the refusal on, as a refusal behind the fence op does. The
// fail op kept the TTL the stage gave the record (the retention from the
// stage, KEEPTTL), so when R1's take reached its node late, the record
// expired shortly after the refusal, and the late stage of an attempt R0
// of the same order (sent after R1's stage landed, delayed by less than
// the retention) landed on the empty key: R0 answered success and the
// order refused for good was confirmed by the units R0 held when R1
// answered.
func TestStagedRefusalFenceOutlivesStageTTL(t *testing.T) {
	t.Parallel() // it mostly waits a retention out
	// The schedule's times, twice those it was written with (a 1.6 s
	// window for R0's start and the limit, not 0.8 s: a loaded machine
	// needs it). The retention must exceed the hold.
	const (
		retention = 6 * time.Second
		hold      = 4 * time.Second // R1's and R0's ttl
	)
	e := newRetentionEnv(t, retention, hold)
	const loaded = 10
	if _, err := e.inv.LoadStock(e.ctx, "b", "t", loaded, 0); err != nil {
		t.Fatal(err)
	}
	items := []Item{{Route: "b", SKU: "t", Quantity: 2}}
	x := e.awayOrder("x")
	home, _ := e.inv.orderHome(e.inv.topo.cur.Load(), x)
	hc := e.clients[home.Name()]

	// R1: its stage lands at once, its take on n2 a hold later.
	r1 := e.faultyInstance(&slowTakes{order: x, delay: hold})
	start := time.Now()
	r1done := make(chan error, 1)
	go func() {
		_, err := r1.Reserve(e.ctx, x, items, "", hold)
		r1done <- err
	}()
	for hc.Exists(e.ctx, orderKey(x)).Val() == 0 {
		if time.Since(start) > 5*time.Second {
			t.Fatal("R1's stage did not land")
		}
		time.Sleep(5 * time.Millisecond)
	}
	staged := time.Now()

	// R0, another attempt of X, starts after R1's stage landed: its take
	// lands on n2 (no limit yet), its stage is held back.
	time.Sleep(time.Until(staged.Add(2400 * time.Millisecond)))
	r0 := e.startHeld(x, items, "", hold)
	r0sent := time.Now()
	// The operator sets a per-user limit before R1's take lands. (R1's
	// take must land within R1's own TTL, 4 s, and R0's stage within
	// R0's: 1.6 s of margin for R0's take and the limit.)
	if _, err := e.inv.LoadStock(e.ctx, "b", "t", 0, 1); err != nil {
		t.Fatal(err)
	}
	if late := time.Since(staged); late > 3800*time.Millisecond {
		t.Fatalf("the limit was set %v after R1's stage, too close to R1's take (4 s): the machine is too slow for this schedule", late)
	}
	var rerr error
	select {
	case rerr = <-r1done:
	case <-time.After(20 * time.Second):
		t.Fatal("R1 did not answer")
	}
	refusedAt := time.Now()
	t.Logf("R1 answered %v, %v after its stage; X's record has %v left", rerr, refusedAt.Sub(staged).Round(time.Millisecond),
		hc.PTTL(e.ctx, orderKey(x)).Val())
	if !errors.Is(rerr, ErrLimitExceeded) {
		t.Fatalf("R1 = %v, want ErrLimitExceeded (a limited SKU without a user) behind its failed record", rerr)
	}
	held := map[string]bool{}
	for id, st := range e.partsOf(x) {
		if st == "pending" {
			held[id] = true
		}
	}
	if len(held) == 0 {
		t.Fatal("no part of R0 is pending when R1 was refused")
	}

	// R0's stage lands 3.9s after it was sent (less than the retention),
	// 2.3s after R1's refusal, after the stage's own retention ran out.
	time.Sleep(time.Until(staged.Add(retention + 300*time.Millisecond)))
	t.Logf("R0's stage lands %v after it was sent, %v after the refusal; X's record exists=%v",
		time.Since(r0sent).Round(time.Millisecond), time.Since(refusedAt).Round(time.Millisecond),
		hc.Exists(e.ctx, orderKey(x)).Val() == 1)
	lerr := r0.land()
	_, cerr := e.inv.Confirm(e.ctx, x)
	t.Logf("R0 answered %v; Confirm answered %v; parts %v", lerr, cerr, e.partsOf(x))
	if lerr == nil && cerr == nil {
		t.Errorf("order %s was refused for good (%v) while R0 held what it wanted, then R0 answered success and Confirm confirmed it", x, rerr)
	}
	for id, st := range e.partsOf(x) {
		if held[id] && st != "cancelled" {
			t.Errorf("part %s, held when a Reserve of %s was refused for good, ended %s", id, x, st)
		}
	}
}
