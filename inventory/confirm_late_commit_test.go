package inventory

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A one-round order whose takes all landed on time but whose commit did
// not (lost with its instance, or late: carry.go allows both) is committed
// by the next reader (resolveStaged), so its record's reserved_at is that
// reader's time; every part came due at the deadline + partGrace and its
// settled copy expires the retention after that (settle.lua), while the
// record lives longer (order.lua, final, counts the commit's lag as a take
// might have been that late). A Confirm retried in between reads the parts
// gone while the record lives: expiry, not loss, so Confirm answers no
// ErrDataLoss (partsMayHaveExpired counts from the deadline). Counting the
// commit's lag there too, as a late take's, reported a false data loss
// (found by a review).
func TestConfirmAfterALateCommitIsNoDataLoss(t *testing.T) {
	t.Parallel() // it mostly waits a retention out
	const retention = 6 * time.Second
	// a hold of 5 s, read 2.5 s before its deadline: on a loaded machine
	// (load 10 on two cores, make test beside an explorer) a hold of 2 s
	// read 0.5 s before its deadline was confirmed too late (the Reserve
	// and the Confirm took longer). The record outlives the parts by about
	// the commit's lag less partGrace, the retry's window: 2.5 s of lag
	// leave it about 2 s. The retention must exceed the hold.
	e := newRetentionEnv(t, retention, 5*time.Second)
	if _, err := e.inv.LoadStock(e.ctx, "b", "t", 2, 0); err != nil {
		t.Fatal(err)
	}
	items := []Item{{Route: "b", SKU: "t", Quantity: 2}}
	x := e.awayOrder("x")
	f := &hookFaults{call: func(ctx context.Context, c ScriptCall, send func() (any, error)) (any, error) {
		if c.Script == "order" && len(c.Args) > 0 && c.Args[0] == "commit" {
			return nil, errors.New("commit lost (injected)")
		}
		return send()
	}}
	lost := e.faultyInstance(f)
	res, err := lost.Reserve(e.ctx, x, items, "", 5*time.Second)
	if err != nil {
		t.Fatalf("Reserve %s: %v", x, err)
	}
	// the next reader comes about 2.5 s later, 2.5 s before the deadline
	// (counted from the deadline: a Reserve slowed by a loaded machine
	// returned so late that 1.7 s after it the order had expired)
	time.Sleep(time.Until(res.Deadline.Add(-2500 * time.Millisecond)))
	out, err := e.inv.Confirm(e.ctx, x)
	if err != nil || out.Status != StatusConfirmed {
		t.Fatalf("Confirm %s = %+v, %v", x, out, err)
	}
	for id := range e.partsOf(x) {
		t.Logf("part %s on n2: PTTL %v", id, e.clients["n2"].PTTL(e.ctx, partKey(id)).Val())
	}
	// past every part's retention (they came due at the deadline + partGrace):
	// wait until n2 expired them (settle.lua rounds the TTL up to a second)
	time.Sleep(time.Until(res.Deadline.Add(partGrace + retention)))
	for len(e.partsOf(x)) > 0 {
		time.Sleep(20 * time.Millisecond)
	}
	home, _ := e.inv.orderHome(e.inv.topo.cur.Load(), x)
	t.Logf("parts on n2 now: %v; record on %s PTTL %v", e.partsOf(x), home.Name(), e.clients[home.Name()].PTTL(e.ctx, orderKey(x)).Val())
	if out, err := e.inv.Confirm(e.ctx, x); err != nil {
		t.Errorf("Confirm %s retried while its record lives = %+v, %v; want confirmed, no error (no node lost anything)", x, out, err)
	}
}
