package inventory

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestSettleRefusesAQuotaCountBelowItsPart: a pending quota part whose
// counter holds less than the part's quantity (the key deleted, as a
// stale-counter refusal advises for a copy's keys, or another copy's
// count) is refused when cancelled, before any write (ErrCorrupt naming
// the counter), as a stock part whose hash's reserved is below its
// quantity is. Before, the cancel took the part's quantity off whatever
// count was there and deleted the key once it fell to 0 or below: a
// user's live count, rebuilt by later orders, lost what a stale part
// held, and the user bought past the per-user limit (found by a review).
func TestSettleRefusesAQuotaCountBelowItsPart(t *testing.T) {
	e := newStagedEnv(t)
	if _, err := e.inv.LoadStock(e.ctx, "b", "lim", stagedStock, 5); err != nil {
		t.Fatal(err)
	}
	id := e.awayOrder("qg")
	if _, err := e.inv.Reserve(e.ctx, id, []Item{{Route: "b", SKU: "lim", Quantity: 3}}, "u", time.Hour); err != nil {
		t.Fatal(err)
	}
	var quota string
	for pid := range e.partsOf(id) {
		if strings.Contains(pid, "|q|") {
			quota = pid
		}
	}
	if quota == "" {
		t.Fatalf("order %s has no quota part: %v", id, e.partsOf(id))
	}
	c := e.clients["n2"]
	counter := partFieldsOn(t, e.ctx, c, quota)["counter"]
	if err := c.Set(e.ctx, counter, 2, 0).Err(); err != nil { // below the part's 3
		t.Fatal(err)
	}
	res, err := e.inv.SettleNow(e.ctx, Settle{Node: "n2", Action: Cancel, OrderID: id, PartIDs: []string{quota}})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), counter) {
		t.Fatalf("SettleNow(cancel) of a quota part of 3 over a count of 2 = %v, %v; want ErrCorrupt naming %s", res, err, counter)
	}
	if st, v := partFieldsOn(t, e.ctx, c, quota)["state"], c.Get(e.ctx, counter).Val(); st != "pending" || v != "2" {
		t.Fatalf("after the refusal: part %s, count %s; want pending, 2 (nothing written)", st, v)
	}
}
