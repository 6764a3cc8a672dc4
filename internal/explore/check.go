package explore

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/topology"
)

// The checks at quiescence, on what the nodes hold (read directly, not
// through the inventory) and what the clients were told:
//
//   - stock conserved per SKU and node: available + reserved + confirmed
//     = loaded, none negative, reserved and confirmed equal to what the
//     node's pending and confirmed parts hold, and the SKU's total loaded
//     what the schedule loaded, less only what a data loss took off its
//     node, and its confirmed parts no more than that (check_stock.go);
//   - no stock stranded: a node that does not serve a SKU's route at the
//     topology the schedule ends at holds none of its units (the apply
//     that took it off the route moved them, whether it left the server
//     or only the route: checkStranded);
//   - quota counters equal what their parts hold, and no user above the
//     per-user limit, by their quota parts and by the confirmed stock
//     parts of the orders the schedule gave the user (check_quota.go);
//   - no part settled twice (the counters above would drift) or against
//     its order's decision: the parts of the record's attempt follow its
//     status, every other part is cancelled;
//   - every order decided once: one live record, on its home, decided
//     (not staging, reserving, or reserved past its deadline);
//   - no acknowledged reservation silently gone: a Reserve that answered
//     success leaves the order reserved, confirmed or cancelled with the
//     receipts it answered (or a Confirm reported data_loss, which only a
//     node's data loss that took a write of the order may cause); a
//     Confirm or Cancel that answered success is the order's final
//     status;
//   - no refusal for good answered while an attempt of the same order
//     held what it wanted and then ended reserved (checkRefusedHeld);
//   - each node's redo log gap-free from offset 1 to each queue's head
//     (nothing trims it here: no consumer acknowledges), one part per
//     offset, and every stock part on the node in it once, at the queue
//     and offset its record names (checkRedo): the log is what the
//     system of record is built from;
//   - nothing left in a pending index, no pending part outside the
//     pending index (nothing would ever settle it: checkUnindexed), and
//     no part left set aside (the stuck index: the heal retried every
//     such part, so one still there fails on every retry and holds its
//     units for good);
//   - no topology left migrating, no transfer record left.

// topoView is what the checks weigh of the schedule's topologies: the
// routes of the one it ended at (checkStranded), and split, the routes a
// node left while it stayed in the server (splitRoutes).
type topoView struct {
	routes map[string][]string
	split  map[string]bool
}

// check runs every check; it returns the violations found and those it
// excused (lossView).
func check(st *worldState, obs *observed, orders []orderPlan, homes *inventory.Homes, topo topoView, loss lossView) (found, excused []string) {
	v := &violations{exposed: loss.exposed, records: loss.records}
	lostRoutes := loss.lostRoutes
	for _, name := range allNodes {
		for _, b := range st.nodes[name].bad {
			v.add("bad-record", "node %s: %s", name, b)
		}
	}
	checkStock(v, st, obs, topo.split, lostRoutes, topo.routes)
	checkStranded(v, st, obs, topo.routes, lostRoutes)
	checkQuota(v, st, lostRoutes, topo.split, lostQuotaRecords(obs))
	obs.mu.Lock()
	plans := slices.Concat(orders, obs.atT1)
	obs.mu.Unlock()
	checkUserLimit(v, st, plans)
	checkOrders(v, st, obs, orders, homes, loss.resurrected)
	checkExpired(v, st, obs)
	for _, name := range allNodes {
		checkRedo(v, st.nodes[name])
	}
	checkQuiet(v, st)
	return v.list, v.excused
}

// checkQuiet: nothing left in a pending index (the heal ran the
// reconciler until the indexes were empty, or gave up past the latest
// deadline plus the bound, or after healCap: whatever is still there was
// not settled), no pending part outside the indexes (checkUnindexed), no
// part left set aside (checkStuck), no topology left migrating, no
// transfer record left.
func checkQuiet(v *violations, st *worldState) {
	token := st.nodes["n1"].topo["token"]
	for _, name := range allNodes {
		ns := st.nodes[name]
		for _, z := range ns.pending {
			dl := time.UnixMilli(int64(z.Score))
			v.add("pending-past-deadline", "node %s: part %v still pending, deadline %s ago", name, z.Member, time.Since(dl).Round(time.Millisecond))
		}
		checkUnindexed(v, ns)
		checkStuck(v, ns)
		for _, k := range ns.xfers {
			v.add("topology-migrating", "node %s: transfer record %s left", name, k)
		}
		if name == "n4" {
			continue
		}
		if ns.topo["phase"] != string(topology.PhaseStable) || ns.topo["token"] != token {
			v.add("topology-migrating", "node %s: topology token %s phase %s (n1: %s)", name, ns.topo["token"], ns.topo["phase"], token)
		}
	}
}

// checkUnindexed: every pending part on ns is in its pending index (or
// set aside, for checkStuck). The reconcilers meet a pending part only
// through the index, and the heal stops once the indexes are empty, so a
// pending part outside it holds its units reserved for good, whatever
// its deadline says: one still in the future (or none) was reported by
// nothing before (a take or a put-off writes the part and its index
// entry in one script, and a data loss puts back a whole copy of a
// node's data, both or neither).
func checkUnindexed(v *violations, ns *nodeState) {
	indexed := map[string]bool{}
	for _, zs := range [][]redis.Z{ns.pending, ns.stuck} {
		for _, z := range zs {
			if id, ok := z.Member.(string); ok {
				indexed[id] = true
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(ns.parts)) {
		p := ns.parts[id]
		if p.State != inventory.PartPending || p.Tombstone || indexed[id] {
			continue
		}
		dl := "no deadline"
		if !p.Deadline.IsZero() {
			dl = "deadline " + p.Deadline.Format("15:04:05.000")
		}
		v.add("pending-unindexed", "node %s: part %s of order %s pending (%d units, %s) and in no pending index: nothing settles it",
			ns.name, id, p.Order, p.Qty, dl)
	}
}

// checkStuck: no part left in ns's stuck index. The heal retried every
// set-aside part with the faults gone (retryStuck), so a part still there
// failed again with nothing but the code against it: its units stay
// reserved and nothing settles it. Excused for an order a node's data
// loss exposed (its record or counters may be what the settle fails on).
func checkStuck(v *violations, ns *nodeState) {
	for _, z := range ns.stuck {
		id, _ := z.Member.(string)
		order, state := orderOfPart(id), "no record"
		if p := ns.parts[id]; p != nil {
			order, state = p.Order, string(p.State)
		}
		v.order(order, "part-stuck", "node %s: part %s (%s) set aside and not settled after the heal's retry: %s",
			ns.name, id, state, ns.stuckWhy[id])
	}
}

// lostQuotaRecords are the counters ("route sku user") of the quota parts
// whose records the record-loss actor deleted. On a route a topology
// apply split (the count moves to the user's new quota node once no part
// whose record names it is pending) such a count may have moved away from
// the part, and SECURITY.md leaves it to a hand fix ("a lost quota part
// whose count a topology change moved to the user's new quota node
// since": SettleStuckLost refuses it, the count below the part's units on
// its node): checkQuota excuses that counter there (seed 173608).
func lostQuotaRecords(obs *observed) map[string]bool {
	obs.mu.Lock()
	defer obs.mu.Unlock()
	out := map[string]bool{}
	for key, u := range obs.synced {
		if strings.Contains(key, "|q|") && u.User != "" {
			out[u.Route+" "+u.SKU+" "+u.User] = true
		}
	}
	return out
}
