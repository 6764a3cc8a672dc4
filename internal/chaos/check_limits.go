package chaos

import (
	"sort"
	"strconv"
	"strings"

	"github.com/shardis/shardis/inventory"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

// Per-user limit and redo-log checks of the final state.

// checkLimits checks per-user limits two ways: the units of each limited
// SKU in a user's confirmed orders, and each quota counter (kept for every
// SKU an order with a user took, limited or not) against the quota parts
// it counts.
func checkLimits(rep *Report, st *state, views map[string]*orderView, skus []SKU) {
	limits := map[string]int64{} // "route:sku" → limit
	for _, s := range skus {
		if s.Limit > 0 {
			limits[s.Route+":"+s.SKU] = s.Limit
		}
	}
	// Units confirmed per (route:sku, user), from the parts of confirmed
	// orders, for the user their client sent (checkOrderUser holds the
	// record's against it).
	confirmed := map[string]int64{}
	for _, v := range views {
		user := v.orderUser()
		if v.status != inventory.OrderConfirmed || user == "" {
			continue
		}
		for _, p := range v.parts {
			if p.Kind != inventory.PartStock || p.State != inventory.PartConfirmed {
				continue
			}
			route, sku, _ := inventory.ParseStockKey(p.Counter) // the decoder checked it
			if rs := route + ":" + sku; limits[rs] > 0 {
				confirmed[rs+":"+user] += p.Qty
			}
		}
	}
	// Quota parts held per quota counter.
	type qsum struct{ held, confirmed int64 }
	quotaParts := map[string]*qsum{}
	counters := map[string]int64{}
	for _, name := range st.names {
		ns := st.nodes[name]
		for _, p := range ns.parts {
			if p.Kind != inventory.PartQuota {
				continue
			}
			k := quotaID(p.Counter)
			s := quotaParts[k]
			if s == nil {
				s = &qsum{}
				quotaParts[k] = s
			}
			switch p.State {
			case inventory.PartPending:
				s.held += p.Qty
			case inventory.PartConfirmed:
				s.held += p.Qty
				s.confirmed += p.Qty
			}
		}
		for k, val := range ns.quota {
			counters[quotaID(k)] += atoi(val)
		}
	}
	keys := map[string]bool{}
	for k := range confirmed {
		keys[k] = true
	}
	for k := range quotaParts {
		keys[k] = true
	}
	for k := range counters {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		seg := strings.SplitN(k, ":", 3) // route, sku, user
		if len(seg) != 3 {
			rep.violate("user-limit", "unreadable quota key %q", k)
			continue
		}
		limit := limits[seg[0]+":"+seg[1]]
		qp := quotaParts[k]
		if qp == nil {
			qp = &qsum{}
		}
		rep.LimitPairs++
		if limit == 0 {
			// Counted without a limit too (so a limit set later sees
			// what users hold): the counter must match its parts.
			if counters[k] != qp.held {
				rep.violateQuota("quota-balance", k, false, "quota counter %s (no limit) is %d, its pending and confirmed quota parts hold %d", k, counters[k], qp.held)
			}
			continue
		}
		if c := confirmed[k]; c > limit {
			rep.violateQuota("user-limit", k, false, "user %s holds %d confirmed units of %s/%s, limit %d", seg[2], c, seg[0], seg[1], limit)
		}
		if counters[k] < 0 || counters[k] > limit {
			rep.violateQuota("user-limit", k, false, "quota counter %s is %d, limit %d", k, counters[k], limit)
		}
		if counters[k] != qp.held {
			rep.violateQuota("quota-balance", k, false, "quota counter %s is %d, its pending and confirmed quota parts hold %d", k, counters[k], qp.held)
		}
		if qp.confirmed != confirmed[k] {
			rep.violateQuota("quota-balance", k, true, "%s: confirmed quota parts hold %d, confirmed stock parts of the user's orders %d", k, qp.confirmed, confirmed[k])
		}
		if confirmed[k] == limit {
			rep.LimitReached++
		}
	}
}

// checkRedo checks every redo-log queue of every node: offsets exactly
// first..max with max the queue's recorded offset, every entry a stock
// part of that queue at that offset, and every stock part in its queue.
// first is 1 unless a sync acknowledged the queue (Options.Sync): the
// entries before first were trimmed, which the node does only to settled
// parts at or before the acknowledged offset, so first is at most one past
// it and no part before first is pending.
func checkRedo(rep *Report, st *state) {
	for _, name := range st.names {
		ns := st.nodes[name]
		queues := map[string]bool{}
		for q := range ns.redo {
			queues[q] = true
		}
		for f, v := range ns.redoOffsets {
			if f == inventory.RedoOffsetsPad {
				continue // no queue's: it keeps the hash a hash table
			}
			// a queue's head, or its first offset in the 32-offset
			// segments (inventory/redolog.go): an integer from 1 to one
			// past the head
			if q, ok := strings.CutSuffix(f, inventory.RedoFirstSuffix); ok {
				if first := atoi(v); strconv.FormatInt(first, 10) != v || first < 1 || first > atoi(ns.redoOffsets[q])+1 {
					rep.violate("redo-log", "node %s %s: first offset in the segments %q, want 1 to %d", name, q, v, atoi(ns.redoOffsets[q])+1)
				}
				continue
			}
			queues[f] = true
		}
		at := map[string]map[int64]string{} // queue → offset → part id
		first := map[string]int64{}         // queue → its first entry's offset
		for q := range queues {
			first[q], at[q] = checkQueue(rep, ns, q), map[int64]string{}
			for i, z := range ns.redo[q] {
				id, _ := z.Member.(string)
				at[q][first[q]+int64(i)] = id
			}
		}
		if got, ok := st.svcRedo[name]; ok { // read through the service (redoViaService)
			checkRedoRead(rep, ns, got)
		}
		for id, p := range ns.parts {
			if p.Kind != inventory.PartStock {
				continue
			}
			switch {
			case first[p.Redo] > 0 && p.Offset < first[p.Redo]:
				if p.State == inventory.PartPending {
					rep.violate("redo-log", "node %s: stock part %s (queue %s offset %d) is pending but trimmed from the redo log", name, id, p.Redo, p.Offset)
				}
			case at[p.Redo][p.Offset] != id:
				rep.violate("redo-log", "node %s: stock part %s (queue %s offset %d) is not in the redo log", name, id, p.Redo, p.Offset)
			}
		}
	}
}

// checkQueue checks queue q of node ns (checkRedo) and returns the offset
// its entries start at (0 when they are broken).
func checkQueue(rep *Report, ns *nodeState, q string) int64 {
	entries := ns.redo[q]
	rep.RedoEntries += int64(len(entries))
	last, acked := atoi(ns.redoOffsets[q]), ackedOffset(ns, q)
	first := last + 1 // every entry trimmed
	if len(entries) > 0 {
		first = int64(entries[0].Score)
	}
	if first < 1 || first > acked+1 {
		rep.violate("redo-log", "node %s %s: entries start at offset %d, acknowledged up to %d (want 1 to %d)", ns.name, q, first, acked, acked+1)
		return 0
	}
	for i, z := range entries {
		want := first + int64(i)
		if float64(want) != z.Score {
			rep.violate("redo-log", "node %s %s: entry %d has offset %v, want %d (gap or duplicate)", ns.name, q, i, z.Score, want)
			return 0
		}
		id, _ := z.Member.(string)
		p, ok := ns.parts[id]
		switch {
		case !ok:
			rep.violate("redo-log", "node %s %s offset %d: part %s has no record", ns.name, q, want, id)
		case p.Kind != inventory.PartStock || p.Redo != q || p.Offset != want:
			rep.violate("redo-log", "node %s %s offset %d: part %s says kind %s queue %s offset %d", ns.name, q, want, id, p.Kind, p.Redo, p.Offset)
		}
	}
	if first+int64(len(entries))-1 != last {
		rep.violate("redo-log", "node %s %s: %d entries from offset %d, last offset recorded %d", ns.name, q, len(entries), first, last)
	}
	return first
}

// ackedOffset is the offset up to which queue q of node ns was
// acknowledged in its current incarnation (0: none).
func ackedOffset(ns *nodeState, q string) int64 {
	if inc := ns.redoAcked["inc"]; inc == "" || inc == ns.incarnation {
		return atoi(ns.redoAcked[q])
	}
	return 0
}

// checkRedoRead compares what ReadRedoLog returned with the node's queues
// and part records.
func checkRedoRead(rep *Report, ns *nodeState, got map[string][]*v1.RedoEntry) {
	keys := map[string]bool{}
	for q := range ns.redo {
		keys[q] = true
	}
	for q := range got {
		keys[q] = true
	}
	for q := range keys {
		direct, read := ns.redo[q], got[q]
		// The service was read first. The service's reconciler trims what
		// the sync acknowledged, a prefix of a queue, up to 200 entries a
		// pass, also between the two reads (seed 447: 2377 read, 2177
		// held): the read may start earlier, by acknowledged entries only.
		skip := len(read) - len(direct)
		if skip < 0 || (skip > 0 && read[skip-1].Offset > ackedOffset(ns, q)) {
			rep.violate("redo-read", "node %s %s: ReadRedoLog returned %d entries, the node holds %d (acknowledged up to %d)",
				ns.name, q, len(read), len(direct), ackedOffset(ns, q))
			continue
		}
		for i, e := range read[skip:] {
			id, _ := direct[i].Member.(string)
			want := inventory.PartRecord{State: "expired"} // as ReadRedoLog says of a record gone
			if p := ns.parts[id]; p != nil {
				want = *p
			}
			if float64(e.Offset) != direct[i].Score || e.PartId != id || e.State != string(want.State) ||
				e.OrderId != want.Order || e.Quantity != want.Qty || e.SkuId != want.SKU {
				rep.violate("redo-read", "node %s %s: ReadRedoLog entry %+v, the node holds %s at %v with %+v",
					ns.name, q, e, id, direct[i].Score, want)
				break
			}
		}
	}
}

// quotaID turns a quota counter key, inv:quota:ROUTE:LEN(SKU):SKU:USER,
// into "ROUTE:SKU:USER". A key it cannot parse is returned as it is, so it
// shows up in the report instead of being dropped.
func quotaID(key string) string {
	route, sku, user, err := inventory.ParseQuotaKey(key)
	if err != nil {
		return key
	}
	return route + ":" + sku + ":" + user
}
