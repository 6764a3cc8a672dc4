package explore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/inventory"
)

// The operator's system of record (operator.go): a part is confirmed only
// when its order was paid by the part's own attempt, a part whose record
// is gone is settled with the units its node took (the row synced before
// the loss, else the receipt of its item on its node, else the item), a
// quota part with its order's units of the SKU on the route and its user.
func TestOperatorSystemOfRecord(t *testing.T) {
	ctx := context.Background()
	o := newObserved()
	o.plans["o1"] = []inventory.Item{{Route: "a", SKU: "s", Quantity: 1}, {Route: "c", SKU: "s", Quantity: 3}, {Route: "c", SKU: "s", Quantity: 2}}
	o.users["o1"] = "u"
	o.reserved["o1"] = [][]inventory.Receipt{{{ItemIndex: 1, Node: "n3", Quantity: 2}, {ItemIndex: 1, Node: "n4", Quantity: 1}}}
	o.confirmed["o1"] = "confirm-o1"
	o.paid["o1"] = "PAID0000"
	o.plans["o2"] = []inventory.Item{{Route: "b", SKU: "s", Quantity: 9}}
	o.confirmUnknown["o2"] = true
	o.paidToken = func(_ context.Context, id string) string {
		if id == "o2" {
			return "LATE0000"
		}
		return ""
	}
	o.synced["n2 o2|EARLY000|0"] = inventory.StuckUnits{Route: "b", SKU: "s", Quantity: 7}

	for _, c := range []struct {
		node, id string
		want     inventory.StuckUnits
		action   inventory.Action
	}{
		{"n3", "o1|PAID0000|1", inventory.StuckUnits{Route: "c", SKU: "s", Quantity: 2}, inventory.Confirm},                // its receipt on n3
		{"n1", "o1|PAID0000|0", inventory.StuckUnits{Route: "a", SKU: "s", Quantity: 1}, inventory.Confirm},                // no receipt: the item
		{"n3", "o1|OTHER000|1", inventory.StuckUnits{Route: "c", SKU: "s", Quantity: 2}, inventory.Cancel},                 // an attempt not paid
		{"n3", "o1|PAID0000|q|c|s", inventory.StuckUnits{Route: "c", SKU: "s", Quantity: 5, User: "u"}, inventory.Confirm}, // c/s summed
		{"n2", "o2|EARLY000|0", inventory.StuckUnits{Route: "b", SKU: "s", Quantity: 7}, inventory.Cancel},                 // the synced row; paid by another attempt
		{"n2", "o2|LATE0000|0", inventory.StuckUnits{Route: "b", SKU: "s", Quantity: 9}, inventory.Confirm},                // a Confirm of unknown outcome that landed
	} {
		u, action, why := o.lostUnits(ctx, c.node, c.id)
		if why != "" || u != c.want || action != c.action {
			t.Errorf("lostUnits(%s %s) = %+v, %q, %q; want %+v, %q", c.node, c.id, u, action, why, c.want, c.action)
		}
	}
	if _, _, why := o.lostUnits(ctx, "n1", "o9|T0000000|0"); why == "" {
		t.Error("lostUnits of an order the schedule never planned gave values")
	}
	delete(o.paid, "o1")
	if action, why := o.decisionOf(ctx, "o1", "o1|PAID0000|0"); why == "" {
		t.Errorf("decisionOf a confirmed order whose attempt is unknown = %q; want it left", action)
	}
	if action, why := o.decisionOf(ctx, "o3", "o3|ANY00000|0"); action != inventory.Cancel || why != "" {
		t.Errorf("decisionOf an order never confirmed = %q, %q; want cancel", action, why)
	}
}

// operatorOptions are the schedules in which the operator meets lost
// part records most: the record-loss actor in half of them, one reply in
// five lost (a settle run again must be refused), no other actor but the
// orders of phase 1 and 2.
var operatorOptions = Options{Profile: "lossy", Topology: -1, Restart: -1, Limit: -1, Inline: -1, Loss: -1, Moved: -1, Operator: 1}

// TestOperatorSettlesLostPartRecords runs a handful of schedules with the
// operator actor on one world: in each, the record-loss actor deleted
// pending part records on a node, and the operator listed them set aside
// and settled them with the system of record's values while the
// reconcilers ran (seeds 4, 11, 14 and 26 on 2026-12-07, each settling
// two). Every check must hold, the operator's settles unexcused, and at
// least one of its settles must have answered: a schedule replays its
// seed's decisions, not the machine's timing, so under load one may
// settle nothing.
func TestOperatorSettlesLostPartRecords(t *testing.T) {
	w, ctx := testWorld(t, false, 3*time.Minute)
	var operated, evicted int
	for _, seed := range []int64{4, 11, 14, 26} {
		res, err := w.RunSchedule(ctx, seed, operatorOptions)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Violations) > 0 {
			var b strings.Builder
			WriteResult(&b, res, operatorOptions, true)
			t.Error(b.String())
		}
		operated, evicted = operated+res.Operated, evicted+res.Evicted
	}
	if operated == 0 || evicted == 0 {
		t.Errorf("the operator settled %d part(s) of %d part record(s) deleted; want at least one of each", operated, evicted)
	}
}
