package chaos

import (
	"sort"
	"strconv"
	"strings"

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
	// Units confirmed per (route:sku, user), from the parts of confirmed orders.
	confirmed := map[string]int64{}
	for _, v := range views {
		if v.status != "confirmed" || v.rec["user"] == "" {
			continue
		}
		for _, p := range v.parts {
			if p.kind != "s" || p.state != "confirmed" {
				continue
			}
			rs := strings.TrimPrefix(p.counter, "inv:stock:")
			if _, ok := limits[rs]; ok {
				confirmed[rs+":"+v.rec["user"]] += p.qty
			}
		}
	}
	// Quota parts held per quota counter.
	type qsum struct{ held, confirmed int64 }
	quotaParts := map[string]*qsum{}
	counters := map[string]int64{}
	for _, name := range st.names {
		ns := st.nodes[name]
		for _, f := range ns.parts {
			if f["kind"] != "q" {
				continue
			}
			k := quotaID(f["counter"])
			s := quotaParts[k]
			if s == nil {
				s = &qsum{}
				quotaParts[k] = s
			}
			switch f["state"] {
			case "pending":
				s.held += atoi(f["qty"])
			case "confirmed":
				s.held += atoi(f["qty"])
				s.confirmed += atoi(f["qty"])
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
				rep.violate("quota-balance", "quota counter %s (no limit) is %d, its pending and confirmed quota parts hold %d", k, counters[k], qp.held)
			}
			continue
		}
		if c := confirmed[k]; c > limit {
			rep.violate("user-limit", "user %s holds %d confirmed units of %s/%s, limit %d", seg[2], c, seg[0], seg[1], limit)
		}
		if counters[k] < 0 || counters[k] > limit {
			rep.violate("user-limit", "quota counter %s is %d, limit %d", k, counters[k], limit)
		}
		if counters[k] != qp.held {
			rep.violate("quota-balance", "quota counter %s is %d, its pending and confirmed quota parts hold %d", k, counters[k], qp.held)
		}
		if qp.confirmed != confirmed[k] {
			rep.violate("quota-balance", "%s: confirmed quota parts hold %d, confirmed stock parts of the user's orders %d", k, qp.confirmed, confirmed[k])
		}
		if confirmed[k] == limit {
			rep.LimitReached++
		}
	}
}

// checkRedo checks every redo-log queue of every node: offsets exactly
// 1..max with max the queue's recorded offset, every entry a stock part
// of that queue at that offset, and every stock part in its queue.
func checkRedo(rep *Report, st *state) {
	for _, name := range st.names {
		ns := st.nodes[name]
		queues := map[string]bool{}
		for q := range ns.redo {
			queues[q] = true
		}
		for q := range ns.redoOffsets {
			queues[q] = true
		}
		at := map[string]map[int64]string{} // queue → offset → part id
		for q := range queues {
			entries := ns.redo[q]
			rep.RedoEntries += int64(len(entries))
			last := atoi(ns.redoOffsets[q])
			at[q] = map[int64]string{}
			for i, z := range entries {
				want := int64(i + 1)
				if float64(want) != z.Score {
					rep.violate("redo-log", "node %s %s: entry %d has offset %v, want %d (gap or duplicate)", name, q, i, z.Score, want)
					break
				}
				id, _ := z.Member.(string)
				at[q][want] = id
				f, ok := ns.parts[id]
				switch {
				case !ok:
					rep.violate("redo-log", "node %s %s offset %d: part %s has no record", name, q, want, id)
				case f["kind"] != "s" || f["redo"] != q || atoi(f["offset"]) != want:
					rep.violate("redo-log", "node %s %s offset %d: part %s says kind %s queue %s offset %s", name, q, want, id, f["kind"], f["redo"], f["offset"])
				}
			}
			if int64(len(entries)) != last {
				rep.violate("redo-log", "node %s %s: %d entries, last offset recorded %d", name, q, len(entries), last)
			}
		}
		if st.svcRedo != nil {
			checkRedoRead(rep, ns, st.svcRedo[name])
		}
		for id, f := range ns.parts {
			if f["kind"] != "s" {
				continue
			}
			if at[f["redo"]][atoi(f["offset"])] != id {
				rep.violate("redo-log", "node %s: stock part %s (queue %s offset %s) is not in the redo log", name, id, f["redo"], f["offset"])
			}
		}
	}
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
		if len(direct) != len(read) {
			rep.violate("redo-read", "node %s %s: ReadRedoLog returned %d entries, the node holds %d", ns.name, q, len(read), len(direct))
			continue
		}
		for i, e := range read {
			id, _ := direct[i].Member.(string)
			f := ns.parts[id]
			wantState := f["state"]
			if wantState == "" {
				wantState = "expired"
			}
			if float64(e.Offset) != direct[i].Score || e.PartId != id || e.State != wantState ||
				e.OrderId != f["order"] || e.Quantity != atoi(f["qty"]) || e.SkuId != f["sku"] {
				rep.violate("redo-read", "node %s %s: ReadRedoLog entry %+v, the node holds %s at %v with %v",
					ns.name, q, e, id, direct[i].Score, f)
				break
			}
		}
	}
}

// quotaID turns a quota counter key, inv:quota:ROUTE:LEN(SKU):SKU:USER,
// into "ROUTE:SKU:USER". A key it cannot parse is returned as it is, so it
// shows up in the report instead of being dropped.
func quotaID(key string) string {
	rest, ok := strings.CutPrefix(key, "inv:quota:")
	route, rest, ok2 := strings.Cut(rest, ":")
	lenStr, rest, ok3 := strings.Cut(rest, ":")
	n, err := strconv.Atoi(lenStr)
	if !ok || !ok2 || !ok3 || err != nil || n < 0 || n+1 > len(rest) || rest[n] != ':' {
		return key
	}
	return route + ":" + rest[:n] + ":" + rest[n+1:]
}
