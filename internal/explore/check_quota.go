package explore

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/shardis/shardis/inventory"
)

// The per-user limit's checks (check.go): each quota counter against the
// parts that count it, and each user's confirmed units of a limited SKU
// against its limit, counted twice: by the confirmed quota parts (what
// the code under test wrote of the user's holdings) and by the confirmed
// stock parts of the orders the schedule gave the user (checkUserLimit:
// what the user holds whatever quota parts were written).

// checkQuota holds each quota counter against the parts that count it
// on its node, and the units its confirmed parts count against the
// per-user limit. On a
// route in split (splitRoutes) a counter is held against its parts over
// all nodes: the apply moves a counter to its new home once no pending
// part counts it, and the confirmed parts stay where they were taken.
//
// lostRecords (lostQuotaRecords) are the counters whose quota part's
// record the record-loss actor deleted: on a split route their
// violations are excused (the documented hand fix).
func checkQuota(v *violations, st *worldState, lostRoutes, split, lostRecords map[string]bool) {
	held := map[string]int64{} // route/sku/user → confirmed units
	// counted adds a counter-against-its-parts violation, or counts it
	// as excused on a route whose counters a data loss may have changed,
	// or whose count a lost part's record may have been moved from.
	counted := func(key, format string, a ...any) {
		route, sku, user, err := inventory.ParseQuotaKey(key)
		if err == nil && (lostRoutes[route] || (split[route] && lostRecords[route+" "+sku+" "+user])) {
			v.excused = append(v.excused, "quota-vs-parts: "+fmt.Sprintf(format, a...))
			return
		}
		v.add("quota-vs-parts", format, a...)
	}
	splitKey := func(key string) bool {
		route, _, _, err := inventory.ParseQuotaKey(key)
		return err == nil && split[route]
	}
	allCounters, allParts := map[string]int64{}, map[string]int64{} // of split routes' keys, over all nodes
	for _, name := range allNodes {
		ns := st.nodes[name]
		sums := map[string]int64{}
		for _, p := range ns.parts {
			if p.Kind != inventory.PartQuota || (p.State != inventory.PartPending && p.State != inventory.PartConfirmed) {
				continue
			}
			if p.State == inventory.PartConfirmed {
				held[p.Counter] += p.Qty
			}
			if splitKey(p.Counter) {
				allParts[p.Counter] += p.Qty
				continue
			}
			sums[p.Counter] += p.Qty
		}
		for key, n := range ns.quota {
			if splitKey(key) {
				allCounters[key] += n
				continue
			}
			if n != sums[key] {
				counted(key, "%s on %s holds %d, its parts hold %d", key, name, n, sums[key])
			}
			delete(sums, key)
		}
		for key, n := range sums {
			if n != 0 {
				counted(key, "%s on %s is absent, its parts hold %d", key, name, n)
			}
		}
	}
	for key := range allParts {
		allCounters[key] += 0 // a key whose counter is absent everywhere
	}
	for key, n := range allCounters {
		if n != allParts[key] {
			counted(key, "%s holds %d over all nodes, its parts hold %d", key, n, allParts[key])
		}
	}
	for key, n := range held {
		route, sku, _, err := inventory.ParseQuotaKey(key)
		if err != nil {
			v.add("bad-record", "%v", err)
			continue
		}
		for _, k := range skus {
			if k.Route == route && k.SKU == sku && k.Limit > 0 && n > k.Limit {
				v.add("quota-limit", "%s: %d units confirmed, limit %d", key, n, k.Limit)
			}
		}
	}
}

// checkUserLimit holds each user's confirmed units of a limited SKU to
// the SKU's per-user limit from the schedule's own knowledge, not the
// quota parts, which the code under test writes (a path that reserves a
// limited item without its quota part leaves nothing for checkQuota to
// count): the user of an order is its plan's (plans: orderPlan.User), and
// its units of the SKU are its confirmed stock parts of it on every node.
// The limit is the one loaded (skuPlan.Limit): an operator may lower it
// mid-schedule (Options.Relimit), and units confirmed before stay. A user
// above it is excused when a data loss exposed one of the user's orders
// (the loss may have taken a quota part that held a later order back).
func checkUserLimit(v *violations, st *worldState, plans []orderPlan) {
	user := map[string]string{} // order id → its user
	for _, p := range plans {
		if p.User != "" {
			user[p.ID] = p.User
		}
	}
	type holding struct{ key, user string }
	held := map[holding]map[string]int64{} // → order id → confirmed units
	for _, name := range allNodes {
		for _, p := range st.nodes[name].parts {
			u := user[p.Order]
			if p.Kind != inventory.PartStock || p.State != inventory.PartConfirmed || u == "" {
				continue
			}
			h := holding{p.Counter, u}
			if held[h] == nil {
				held[h] = map[string]int64{}
			}
			held[h][p.Order] += p.Qty
		}
	}
	for _, k := range skus {
		key := inventory.StockKey(k.Route, k.SKU)
		for h, orders := range held {
			if h.key != key || k.Limit <= 0 {
				continue
			}
			var n int64
			var each []string
			for _, id := range slices.Sorted(maps.Keys(orders)) {
				n += orders[id]
				each = append(each, fmt.Sprintf("%s %d", id, orders[id]))
			}
			if n <= k.Limit {
				continue
			}
			msg := fmt.Sprintf("user %s: %d units of %s confirmed by its orders' stock parts (%s), limit %d", h.user, n, key, strings.Join(each, ", "), k.Limit)
			if slices.ContainsFunc(plans, func(p orderPlan) bool { return p.User == h.user && v.exposed[p.ID] }) {
				v.excused = append(v.excused, "quota-limit: "+msg)
				continue
			}
			v.add("quota-limit", "%s", msg)
		}
	}
}
