package inventory

import (
	"context"
	"errors"
	"testing"
	"time"
)

// partsMayHaveExpired bounds a part's retention by the record's deadline +
// partGrace + retention, but a one-round take that reached its node late
// comes due later (order.lua final moves the record's retention on by the
// commit's lag for exactly that reason), and its settled part lives the
// retention from its own due (settle.lua). A node losing that part inside
// the lag window is real data loss, yet Confirm answers success.
// A part whose take reached its node late comes due that much later than
// its order's deadline + partGrace, and lives the retention from then
// (settle.lua); a node that loses it in that gap lost data, and a Confirm
// retried then answers ErrDataLoss. Confirm reads the parts' latest due
// from the record (order.lua, parts_due, as final counts the record's
// TTL). Counted from the deadline alone, it took the loss for expiry and
// answered confirmed (found by a review).
func TestConfirmReportsALateTakesLoss(t *testing.T) {
	const retention = 3 * time.Second
	e := newShortRetentionEnv(t, retention)
	if _, err := e.inv.LoadStock(e.ctx, "b", "t", 2, 0); err != nil {
		t.Fatal(err)
	}
	items := []Item{{Route: "b", SKU: "t", Quantity: 2}}
	x := e.awayOrder("x")
	f := &hookFaults{call: func(ctx context.Context, c ScriptCall, send func() (any, error)) (any, error) {
		if c.Script == "reserve" && c.Node == "n2" && callOrder(c) == x {
			time.Sleep(1500 * time.Millisecond) // the take reaches n2 late
		}
		return send()
	}}
	slow := e.faultyInstance(f)
	res, err := slow.Reserve(e.ctx, x, items, "", 2*time.Second)
	if err != nil {
		t.Fatalf("Reserve %s: %v", x, err)
	}
	out, err := slow.Confirm(e.ctx, x)
	if err != nil || out.Status != StatusConfirmed {
		t.Fatalf("Confirm %s = %+v, %v", x, out, err)
	}
	// just past the bound partsMayHaveExpired uses
	time.Sleep(time.Until(res.Deadline.Add(partGrace + retention + 300*time.Millisecond)))
	parts := e.partsOf(x)
	if len(parts) == 0 {
		t.Fatalf("precondition: %s's settled part already expired on n2", x)
	}
	for id, st := range parts {
		pttl := e.clients["n2"].PTTL(e.ctx, partKey(id)).Val()
		t.Logf("part %s on n2 is %s, PTTL %v: alive, not expired", id, st, pttl)
		// n2 loses the part (restarted from a snapshot without it)
		e.clients["n2"].Del(e.ctx, partKey(id))
	}
	home, _ := e.inv.orderHome(e.inv.topo.cur.Load(), x)
	t.Logf("record on %s PTTL %v", home.Name(), e.clients[home.Name()].PTTL(e.ctx, orderKey(x)).Val())
	out, err = e.inv.Confirm(e.ctx, x)
	if !errors.Is(err, ErrDataLoss) {
		t.Errorf("Confirm %s after n2 lost its live part = %+v, %v; want ErrDataLoss", x, out, err)
	}
}
