package inventory

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The reconciler's expire op gives a confirmed record it reads the
// retention again (relied_on: it may be what keeps another attempt's late
// stage out), but the parts its Confirm settled keep the retention from
// their due (settle.lua): the record then outlives a part it lists. A
// Confirm retried within the record's life, past its parts' retention,
// reads the part missing: that is expiry, not a node's loss, and Confirm
// answers confirmed (partsMayHaveExpired). Before, it answered
// ErrDataLoss and logged DATA LOSS though no node lost anything (found by
// a review).
func TestConfirmRetryAfterARecordReliedOn(t *testing.T) {
	t.Parallel() // it mostly waits a retention out
	const retention = 3 * time.Second
	e := newShortRetentionEnv(t, retention)
	for _, rt := range []string{"b", "c"} {
		if _, err := e.inv.LoadStock(e.ctx, rt, "t", 2, 0); err != nil {
			t.Fatal(err)
		}
	}
	items := []Item{{Route: "b", SKU: "t", Quantity: 1}, {Route: "c", SKU: "t", Quantity: 1}}
	x := e.awayOrder("x")
	f := &hookFaults{call: func(ctx context.Context, c ScriptCall, send func() (any, error)) (any, error) {
		if c.Script == "settle" && c.Node == "n2" {
			return nil, errors.New("n2 unreachable (injected)")
		}
		return send()
	}}
	slow := e.faultyInstance(f)
	if _, err := slow.Reserve(e.ctx, x, items, "", time.Second); err != nil {
		t.Fatalf("Reserve %s: %v", x, err)
	}
	out, err := slow.Confirm(e.ctx, x)
	if err != nil || out.Status != StatusConfirmed {
		t.Fatalf("Confirm %s = %+v, %v", x, out, err)
	}
	t.Logf("Confirm: %+v", out)
	part := e.dueOf("n2", x)
	// the reconciler reaches the pending part late, within the retention of its due
	time.Sleep(time.Until(part.Deadline.Add(retention - 700*time.Millisecond)))
	r, err := e.inv.ResolveExpired(e.ctx, part)
	t.Logf("ResolveExpired: %v, %v", r, err)
	// past the retention of the parts' due: the part settled on n3 is gone,
	// the record the reconciler relied on is not
	time.Sleep(time.Until(part.Deadline.Add(retention + 800*time.Millisecond)))
	home, _ := e.inv.orderHome(e.inv.topo.cur.Load(), x)
	t.Logf("home %s; record TTL %v", home.Name(), e.clients[home.Name()].PTTL(e.ctx, orderKey(x)).Val())
	if out, err := e.inv.Confirm(e.ctx, x); errors.Is(err, ErrDataLoss) {
		t.Errorf("Confirm %s retried while its record lives = %+v, %v; want confirmed, no error", x, out, err)
	}
}
