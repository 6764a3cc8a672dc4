package explore

import (
	"context"
	"maps"
	"reflect"
	"slices"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
)

// What a data loss took, order by order: the data-loss actor reads the
// node's keys just before its roll back and just after (readNode), and
// an order is exposed (its per-order checks excused) only when the two
// differ in its record or in one of its parts there: those are the
// writes of it the node lost. An order whose keys on the node came back
// as they were lost nothing, whatever its items' routes and homes.
//
// One difference exposes nothing: a record that was marked moved before
// the roll back (a topology apply moved the order's record to its home
// elsewhere, its data with it) and comes back live or absent, when the
// order's record was live on another node then (its install had landed:
// movedLive, read before the roll back and again after it, for an
// install under way at the first read: the other nodes are not paused).
// The node lost the mark, not the
// order: the order's record lives where the move put it, and the
// protocol must keep it there. A mark whose install had not landed is a
// lost write like any other: the move's rerun finishes it from the marked
// copy, which the roll back took (seed 29223: the apply's move-out of m4
// marked its record and lost its reply, and n2 went back to a copy from
// before m4's Reserve before the rerun). Such a record is
// resurrected on the node: dead by the rule (a live record away from its
// home is never read, and the next apply retires it before any move onto
// the node: topology.Driver.Retire), so the checks pass over it while it
// is away from its home; at its home it is checked as the order's record,
// so a stale copy kept over the order's current one there fails them.

// An order whose record the node lost is exposed further than one that
// lost only parts there: a Confirm or Cancel acknowledged before the loss
// decided the record for good, and only losing the record itself (or
// keeping a stale one over it: the resurrected records) can change that
// decision; a lost part changes what later readers of the record find,
// not the record. So the checks that an acknowledged Confirm or Cancel is
// the order's final status are excused only for the orders whose record
// a loss took (lossDiff.records).

// A record that comes back unchanged lost nothing, even on a node that
// went back behind an apply: the apply's rerun retires it when it is
// away from its home in the topology the apply moves from, and puts back
// the order's record from its copy marked moved at its home when the
// apply had moved it onto the node (topology.Driver.Retire). Before that
// put back, seed 24412 (PROFILE=crash TOPOLOGY=1 RESTART=0.3 LOSS=0.6)
// left order p6 without a live record: n2 was copied at T1, before the
// apply moved p6's record to n4; the apply of T0 moved it back; n2 went
// back to the copy, where p6's record, the same value, is away from its
// home n4 at T1, whose copy is marked moved; the resumed apply retired it.

// lossDiff is what one node's roll back took.
type lossDiff struct {
	exposed     map[string]bool // orders whose record or parts the node lost
	records     map[string]bool // of exposed, those whose record the node lost
	resurrected map[string]bool // orders whose moved record came back unmarked
}

// diffLoss compares the node's state before its roll back (pre) with the
// state it came back with (post).
func diffLoss(pre, post *nodeState) lossDiff {
	d := lossDiff{exposed: map[string]bool{}, records: map[string]bool{}, resurrected: map[string]bool{}}
	for id := range unionKeys(pre.orders, post.orders) {
		a, b := pre.orders[id], post.orders[id]
		switch {
		case a != nil && a.Moved != "" && pre.movedLive[id]:
			if b != nil && b.Moved == "" {
				d.resurrected[id] = true
			}
		case a == nil || b == nil || !reflect.DeepEqual(*a, *b):
			d.exposed[id], d.records[id] = true, true
		}
	}
	for id := range unionKeys(pre.parts, post.parts) {
		a, b := pre.parts[id], post.parts[id]
		if a == nil || b == nil || !reflect.DeepEqual(*a, *b) {
			if a != nil {
				d.exposed[a.Order] = true
			}
			if b != nil {
				d.exposed[b.Order] = true
			}
		}
	}
	return d
}

// unionKeys is the set of the keys of a and b.
func unionKeys[V any](a, b map[string]V) map[string]bool {
	out := map[string]bool{}
	for k := range maps.Keys(a) {
		out[k] = true
	}
	for k := range maps.Keys(b) {
		out[k] = true
	}
	return out
}

// readForDiff reads node name's state for diffLoss; nil when it cannot
// (the checks then fall back to lossExposure for that loss).
func (w *World) readForDiff(ctx context.Context, name string) *nodeState {
	ns, err := readNode(ctx, w.direct[name], name)
	if err != nil {
		return nil
	}
	return ns
}

// liveElsewhere returns the orders marked moved in ns (node ns.name's
// state, read just before its roll back) whose record is live on another
// node: their install landed (diffLoss). An order whose records cannot
// be read is left out (its mark's loss then exposes it).
func (w *World) liveElsewhere(ctx context.Context, ns *nodeState) map[string]bool {
	out := map[string]bool{}
	for id, r := range ns.orders {
		if r.Moved == "" {
			continue
		}
		for name, c := range w.direct {
			if name == ns.name {
				continue
			}
			if f, err := inventory.ReadOrder(ctx, c, id).Fields(); err == nil && f["status"] != "" && f["moved"] == "" {
				out[id] = true
				break
			}
		}
	}
	return out
}

// exposure returns what the schedule's losses took (lossView but for
// lostRoutes): for a lost node whose state was read around its roll
// back, what the roll back took (diffLoss); for one that was not, every
// order of plans lossExposure names, its record included. Called with
// o.mu held.
func (w *World) exposure(o *observed, plans []orderPlan) lossView {
	exposed, records, resurrected := map[string]bool{}, map[string]bool{}, map[string]map[string]bool{}
	var unread []string
	for _, name := range o.losses {
		ds := o.diffs[name]
		if len(ds) == 0 {
			unread = append(unread, name)
			continue
		}
		for _, d := range ds {
			maps.Copy(exposed, d.exposed)
			maps.Copy(records, d.records)
			if resurrected[name] == nil {
				resurrected[name] = map[string]bool{}
			}
			maps.Copy(resurrected[name], d.resurrected)
		}
	}
	broad := w.lossExposure(unread, plans, o.ranTo("T2"))
	maps.Copy(exposed, broad)
	maps.Copy(records, broad)
	return lossView{exposed: exposed, records: records, resurrected: resurrected}
}

// promisedAcross adds to exposed the orders whose live record promises a
// part on a lost node at an incarnation other than the node's current
// one (inc, by node): a probe that finds such a part absent reports it
// lost, not never taken (inventory's OrderPart.Incarnation), and the
// order is decided as if the node had lost it, whether its take ever
// reached the node or not. The loss took that answer from it.
func promisedAcross(st *worldState, lost []string, inc map[string]string, exposed map[string]bool) {
	for _, ns := range st.nodes {
		for id, r := range ns.orders {
			if r.Moved != "" {
				continue
			}
			for _, p := range r.Parts {
				if p.Incarnation != "" && slices.Contains(lost, p.Node) && p.Incarnation != inc[p.Node] {
					exposed[id] = true
				}
			}
		}
	}
}

// incarnations reads the current incarnation of each of names' stamps.
func (w *World) incarnations(ctx context.Context, names []string) map[string]string {
	out := map[string]string{}
	for _, name := range names {
		out[name], _ = w.direct[name].HGet(ctx, node.StampKey, "incarnation").Result()
	}
	return out
}
