package explore

import (
	"testing"

	"github.com/shardis/shardis/inventory"
)

// TestCheckUserLimit: a user's confirmed units of a limited SKU are held
// to its limit by the stock parts of the orders the schedule gave the
// user, whether or not quota parts were written for them; by the quota
// parts too, as before; a user under the limit, orders of two users, and
// a user whose order a data loss exposed pass (the last excused). Before,
// only the confirmed quota parts were added up, so a path that reserved
// c/s without its quota part went unseen.
func TestCheckUserLimit(t *testing.T) {
	key := inventory.StockKey("c", "s")
	stock := func(order string, qty int64) *inventory.PartRecord {
		return &inventory.PartRecord{ID: order + "|T|0", Order: order, Kind: inventory.PartStock, Counter: key,
			State: inventory.PartConfirmed, Qty: qty}
	}
	quota := func(order, user string, qty int64) *inventory.PartRecord {
		return &inventory.PartRecord{ID: order + "|T|q|c|s", Order: order, Kind: inventory.PartQuota,
			Counter: "inv:quota:c:1:s:" + user, State: inventory.PartConfirmed, Qty: qty}
	}
	o1 := orderPlan{ID: "o1", User: "u", Items: []inventory.Item{{Route: "c", SKU: "s", Quantity: 3}}}
	o6 := orderPlan{ID: "o6", User: "u", Items: []inventory.Item{{Route: "c", SKU: "s", Quantity: 4}}}
	o6v := o6
	o6v.User = "v"
	for _, c := range []struct {
		name    string
		plans   []orderPlan
		parts   []*inventory.PartRecord // on n3
		exposed string
		list    int
		excused int
	}{
		{"under the limit", []orderPlan{o1, o6}, []*inventory.PartRecord{stock("o1", 3), stock("o6", 2)}, "", 0, 0},
		{"over it, no quota parts", []orderPlan{o1, o6}, []*inventory.PartRecord{stock("o1", 3), stock("o6", 4)}, "", 1, 0},
		{"over it by quota parts only", []orderPlan{o1, o6}, []*inventory.PartRecord{quota("o1", "u", 3), quota("o6", "u", 4)}, "", 1, 0},
		{"two users", []orderPlan{o1, o6v}, []*inventory.PartRecord{stock("o1", 3), stock("o6", 4)}, "", 0, 0},
		{"over it, an order exposed", []orderPlan{o1, o6}, []*inventory.PartRecord{stock("o1", 3), stock("o6", 4)}, "o1", 0, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := emptyWorld()
			for _, ns := range st.nodes {
				ns.quota = map[string]int64{}
			}
			for _, p := range c.parts {
				st.nodes["n3"].parts[p.ID] = p
				if p.Kind == inventory.PartQuota {
					st.nodes["n3"].quota[p.Counter] += p.Qty
				}
			}
			v := &violations{exposed: map[string]bool{c.exposed: c.exposed != ""}}
			checkQuota(v, st, nil, nil, nil)
			checkUserLimit(v, st, c.plans)
			if len(v.list) != c.list || len(v.excused) != c.excused {
				t.Fatalf("violations %q, excused %q; want %d and %d", v.list, v.excused, c.list, c.excused)
			}
			if c.list > 0 && !listed(v, "quota-limit") {
				t.Errorf("violations %q, want a quota-limit one", v.list)
			}
		})
	}
}

// TestQuotaCountOfALostPartMovedBySplitIsExcused: a user's count on a
// route a topology apply split, with no part left naming it, is excused
// only when the record-loss actor deleted that user's quota part record
// (SECURITY.md leaves such a moved count to a hand fix: seed 173608);
// another user's, or the same on a route not split, is still a violation.
func TestQuotaCountOfALostPartMovedBySplitIsExcused(t *testing.T) {
	for _, c := range []struct {
		name          string
		split         bool
		lost          string
		list, excused int
	}{
		{"split, its part's record deleted", true, "c s u", 0, 1},
		{"split, another user's deleted", true, "c s v", 1, 0},
		{"not split, its part's record deleted", false, "c s u", 1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := emptyWorld()
			for _, ns := range st.nodes {
				ns.quota = map[string]int64{}
			}
			st.nodes["n4"].quota["inv:quota:c:1:s:u"] = 4
			v := &violations{}
			checkQuota(v, st, nil, map[string]bool{"c": c.split}, map[string]bool{c.lost: true})
			if len(v.list) != c.list || len(v.excused) != c.excused {
				t.Fatalf("violations %q, excused %q; want %d and %d", v.list, v.excused, c.list, c.excused)
			}
		})
	}
}
