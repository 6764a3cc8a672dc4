package inventory

import (
	"context"
	"errors"
	"testing"
	"time"
)

// staged.go's twin assumption: a part left pending (its settle did not
// land) is looked at by a reconciler within inventory.retention of coming
// due, and a decided record lives the retention from when its parts come
// due (order.lua, final). A one-round take's part comes due by its own
// node's clock when the take runs (a hold: ttl + partGrace), so a take
// that reached its node late (a pause of a second here) comes due that
// much later than the record's deadline + partGrace: final counts from
// the deadline moved on by the commit's lag behind the record's created
// (every take ran before the commit). Counted from the deadline alone, a
// reconciler within the retention of the part's due met no record and
// cancelled a confirmed part (found by a review).
func TestDecidedRecordOutlivesALateTakesDue(t *testing.T) {
	t.Parallel() // it mostly waits a retention out
	const retention = 3 * time.Second
	e := newShortRetentionEnv(t, retention)
	if _, err := e.inv.LoadStock(e.ctx, "b", "t", 2, 0); err != nil {
		t.Fatal(err)
	}
	items := []Item{{Route: "b", SKU: "t", Quantity: 2}}
	x := e.awayOrder("x")
	f := &hookFaults{call: func(ctx context.Context, c ScriptCall, send func() (any, error)) (any, error) {
		if c.Script == "reserve" && c.Node == "n2" && callOrder(c) == x {
			time.Sleep(time.Second) // the take reaches n2 a second late (a pause)
		}
		if c.Script == "settle" && c.Node == "n2" {
			return nil, errors.New("n2 unreachable (injected: the call never reached the node)")
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
	part := e.dueOf("n2", x)
	t.Logf("order deadline %v, its part on n2 due %v later than deadline+grace", res.Deadline.Format("15:04:05.000"),
		part.Deadline.Sub(res.Deadline.Add(partGrace)).Round(time.Millisecond))
	// the reconciler looks within the retention of the part's due
	time.Sleep(time.Until(part.Deadline.Add(retention - 500*time.Millisecond)))
	home, _ := e.inv.orderHome(e.inv.topo.cur.Load(), x)
	t.Logf("%s's record exists: %v", x, e.clients[home.Name()].Exists(e.ctx, orderKey(x)).Val() == 1)
	r, err := e.inv.ResolveExpired(e.ctx, part)
	t.Logf("ResolveExpired: %v, %v", r, err)
	for id, st := range e.partsOf(x) {
		if st != "confirmed" {
			t.Errorf("part %s of %s, whose Confirm answered success, is %s; want confirmed", id, x, st)
		}
	}
}
