package explore

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/shardis/shardis/inventory"
)

// checkRedo holds ns's redo log to its parts: every queue gap-free from
// offset 1 to its head, one part at each offset, and each stock part
// (not a tombstone) in the log once, at the queue and offset its record
// names. Nothing trims the log in a schedule (entries are trimmed once a
// consumer acknowledged them, and none runs), and a node that lost data
// went back to a copy whose log and parts agree, so a gap, a second part
// at an offset, an entry naming no part, a part missing from the log or
// in it twice is a take or settle that wrote the one without the other:
// the system of record, built from the log, would miss the part or land
// it twice. A settled stock part whose record names no place (rewritten
// by SettleStuckLost, which DecodePart reads with no place) is held to one entry naming it,
// wherever. A violation about a part is excused for an order a node's
// data loss exposed. Queues are looked at in key order, so a schedule's
// violations read the same on every run.
func checkRedo(v *violations, ns *nodeState) {
	where := map[string][]string{} // part id → "queue@offset" of each entry naming it
	for _, xk := range slices.Sorted(maps.Keys(ns.heads)) {
		h := ns.heads[xk]
		for off := int64(1); off <= h; off++ {
			ids := ns.redo[xk][off]
			switch {
			case len(ids) == 0:
				v.add("redo-log", "node %s: %s has no entry at offset %d (head %d): a gap", ns.name, xk, off, h)
			case len(ids) > 1:
				v.add("redo-log", "node %s: %s holds parts %v at offset %d", ns.name, xk, ids, off)
			}
			for _, id := range ids {
				where[id] = append(where[id], fmt.Sprintf("%s@%d", xk, off))
			}
		}
		for _, off := range slices.Sorted(maps.Keys(ns.redo[xk])) {
			if off < 1 || off > h {
				v.add("redo-log", "node %s: %s holds parts %v at offset %d, outside 1..%d (its head)", ns.name, xk, ns.redo[xk][off], off, h)
			}
		}
	}
	for _, xk := range slices.Sorted(maps.Keys(ns.redo)) {
		if _, ok := ns.heads[xk]; !ok {
			v.add("redo-log", "node %s: %s holds entries, but the node's redo offsets name no head for it", ns.name, xk)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(where)) {
		if ns.parts[id] == nil {
			v.order(orderOfPart(id), "redo-log", "node %s: redo entry %v names part %s, which has no record on the node", ns.name, where[id], id)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(ns.parts)) {
		p := ns.parts[id]
		if p.Kind != inventory.PartStock || p.Tombstone {
			continue
		}
		if ns.placeless[id] {
			// settled by SettleStuckLost: its record names no place, and
			// the log must name it once, wherever
			if got := where[id]; len(got) != 1 {
				v.order(p.Order, "redo-log", "node %s: %s part %s (its record rewritten by SettleStuckLost, naming no place) is in the log at %v, want one entry", ns.name, p.State, id, got)
			}
			continue
		}
		at := fmt.Sprintf("%s@%d", p.Redo, p.Offset)
		if got := where[id]; len(got) != 1 || got[0] != at {
			v.order(p.Order, "redo-log", "node %s: %s part %s's record names redo entry %s, the log has it at %v", ns.name, p.State, id, at, got)
		}
	}
}

// orderOfPart is the order a part id names: part ids start with their
// order's id and a "|" (inventory.DecodePart); for a part whose record is
// gone.
func orderOfPart(id string) string {
	order, _, _ := strings.Cut(id, "|")
	return order
}
