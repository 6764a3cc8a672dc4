package explore

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/topology"
)

// The stock checks (check.go): each node's counters against its parts,
// each SKU's units over all nodes against what the schedule loaded, and
// no unit left on a node off the SKU's route.
//
// What the schedule loaded is stockPerSKU before any actor ran, and the
// topology actor's load at T1 (observed.extra: exactly its units when
// it answered success, from none to all of them when its outcome is
// unknown). Transfers between nodes (topology apply) conserve the total
// over all nodes at quiescence (no transfer record is left: checkQuiet),
// so the SKU's loaded count summed over every node, the ones off its
// route included, is what the schedule loaded, with one exception: an
// accepted data loss (loss.go). A node that went back to an older copy
// lost whatever its loaded count gained since the copy (a share of the
// load at T1, a transfer in), and gained whatever it gave away (a
// transfer out whose done the copy predates). The checks hold a SKU to
// bounds those losses explain, read on the node itself just before its
// roll back (writes paused until the kill) and just after it
// (stockLoss):
//
//   - no stock from nothing: the loaded count over all nodes is at most
//     what the schedule loaded (a unit a loss gave back is taken off
//     again by the apply's rerun: the transfer's marker on its
//     destination makes the rerun's in a no-op, and its done subtracts
//     the units again; or, for a node brought forward, by the move
//     forward's take back, inventory/apply_takeback.go; or, for a node
//     a resume bumps again, by its take back before the bump, which a
//     concurrent apply's step 4 cannot cut short as it can the rerun's
//     step 3: seed 168235), and the units confirmed by the parts over all
//     nodes are at most that too (no oversell);
//     A stock hash a move forward left on its node (topology.Report's
//     LeftBehind: units reserved in the older copy, or no marker on the
//     transfer's destination) is the exception: its units are counted on
//     the destination too, and the node, which does not serve the route,
//     keeps them out of every instance's reach (an apply that would serve
//     them again refuses: inventory/apply_stale.go). Such a hash's loaded
//     count on a node off the route at the end is allowed on top, and
//     named (leftUnits). A move forward that should have taken a hash
//     back and did not still fails the bound: only those it reports left
//     are allowed;
//   - no stock lost but by a loss: the loaded count over all nodes is at
//     least what the schedule loaded less, for each loss, what the node's
//     loaded count fell by from just before its roll back to just after
//     it. A loss whose node could not be read then bounds nothing below
//     for a SKU whose route that node served at a topology the schedule
//     used (routeNodes), and takes nothing of any other SKU.

// stockLoss is what one accepted data loss did to its node's stock
// hashes: by stock key, the loaded count the node held just before its
// roll back and the one it came back with. read is false when the node
// could not be read at either point (writes not paused, a failed read):
// the loss's effect on the stock is then unknown. at is when the roll
// back killed the node (lossMoved weighs the applies begun before it).
type stockLoss struct {
	node          string
	at            time.Time
	read          bool
	before, after map[string]int64
}

// stockLossOf is the stockLoss of node pre.name, read as pre just before
// its roll back, begun at at, and as post just after it.
func stockLossOf(pre, post *nodeState, at time.Time) stockLoss {
	sl := stockLoss{node: pre.name, at: at, read: true, before: map[string]int64{}, after: map[string]int64{}}
	for k, f := range pre.stock {
		sl.before[k] = atoi(f["loaded"])
	}
	for k, f := range post.stock {
		sl.after[k] = atoi(f["loaded"])
	}
	return sl
}

// took is how many loaded units of key the loss took off its node (what
// the count held just before the roll back beyond what it came back
// with; 0 when it came back with as many or more).
func (sl stockLoss) took(key string) int64 { return max(0, sl.before[key]-sl.after[key]) }

// gave is how many loaded units of key the loss gave back to its node
// (what it came back with beyond what it held just before the roll back).
func (sl stockLoss) gave(key string) int64 { return max(0, sl.after[key]-sl.before[key]) }

// stockBounds is what a SKU's loaded count over all nodes may be at
// quiescence: from lo to hi, with why saying how they were reached.
type stockBounds struct {
	lo, hi int64
	why    string
}

// boundsOf is key's stockBounds: stockPerSKU and the schedule's loads of
// key during the schedule (extra), less what each of losses took off its
// node (all of it, lo 0, for a loss whose node was not read and is one of
// served, the nodes key's route had at a topology the schedule used: no
// other node ever held a unit of key, so its loss, read or not, took
// none; before, an unread loss of any node dropped every key's bound).
func boundsOf(key string, extra loadRange, losses []stockLoss, served []string) stockBounds {
	b := stockBounds{lo: stockPerSKU + extra.min, hi: stockPerSKU + extra.max}
	why := []string{fmt.Sprintf("%d loaded at the start", stockPerSKU)}
	switch {
	case extra.min == extra.max && extra.max > 0:
		why = append(why, fmt.Sprintf("%d during the schedule", extra.max))
	case extra.min != extra.max:
		why = append(why, fmt.Sprintf("%d to %d during the schedule (a load's outcome unknown)", extra.min, extra.max))
	}
	for _, sl := range losses {
		switch {
		case !sl.read && !slices.Contains(served, sl.node):
			continue
		case !sl.read:
			b.lo = 0
			why = append(why, fmt.Sprintf("any number lost by %s's data loss (not read around its roll back)", sl.node))
		case sl.took(key) > 0:
			b.lo -= sl.took(key)
			why = append(why, fmt.Sprintf("%d lost by %s's data loss (loaded %d just before its roll back, %d after)",
				sl.took(key), sl.node, sl.before[key], sl.after[key]))
		}
	}
	b.lo = max(b.lo, 0)
	b.why = strings.Join(why, ", ")
	return b
}

// checkStock holds each SKU's counters against its parts, and its units
// over all nodes against boundsOf. On a route in split (a node left it
// while it stayed in the server: splitRoutes) a node's confirmed count
// is held against its confirmed parts over all nodes only: the apply
// moved the leaving node's confirmed count with its stock, and its
// confirmed parts, final, stayed there. On such a route whose counters a
// data loss may have changed (lostRoutes: lossMoved), that comparison is
// excused, as checkQuota excuses a quota counter's: a node that went
// back after the apply moved its confirmed count away comes back without
// the confirmed parts the count still holds (seed 172039: o2's 4 units,
// confirmed on n3, moved to n2 by T2, then n3 rolled back to its copy
// from the start). The units' bounds (boundsOf) and each node's own
// counters against its parts (checkNodeStock) still hold.
func checkStock(v *violations, st *worldState, obs *observed, split, lostRoutes map[string]bool, routes map[string][]string) {
	obs.mu.Lock()
	extra, losses, ran, left := maps.Clone(obs.extra), slices.Clone(obs.stockLosses), slices.Clone(obs.ran), maps.Clone(obs.leftBehind)
	obs.mu.Unlock()
	for _, k := range skus {
		key := inventory.StockKey(k.Route, k.SKU)
		var sum stockSums
		for _, name := range allNodes {
			sum.add(checkNodeStock(v, st.nodes[name], key, split[k.Route]))
		}
		if lc := leftConfirmed(st, key, left[key], routes[k.Route]); split[k.Route] && sum.confirmed-lc != sum.partsConfirmed {
			const format = "%s: confirmed %d over all nodes (%d of them in hashes a move forward left off the route), but its parts hold %d confirmed"
			if lostRoutes[k.Route] {
				v.excused = append(v.excused, "settled-twice: "+fmt.Sprintf(format, key, sum.confirmed, lc, sum.partsConfirmed))
			} else {
				v.add("settled-twice", format, key, sum.confirmed, lc, sum.partsConfirmed)
			}
		}
		b := boundsOf(key, extra[key], losses, routeNodes(k.Route, ran))
		if units, why := leftUnits(st, key, left[key], routes[k.Route]); units > 0 {
			b.hi += units
			b.why += ", " + why
		}
		if sum.total != sum.loaded {
			v.add("stock-conserved", "%s: %d units over all nodes, %d loaded", key, sum.total, sum.loaded)
		}
		switch {
		case sum.loaded > b.hi:
			v.add("stock-conserved", "%s: %d loaded over all nodes, at most %d may be (%s): stock from nothing", key, sum.loaded, b.hi, b.why)
		case sum.loaded < b.lo:
			v.add("stock-conserved", "%s: %d loaded over all nodes, at least %d must be (%s): units lost", key, sum.loaded, b.lo, b.why)
		}
		if sum.partsConfirmed > b.hi {
			v.add("oversold", "%s: its parts over all nodes confirm %d units, at most %d were loaded (%s)", key, sum.partsConfirmed, b.hi, b.why)
		}
	}
}

// noteLeftBehind records the stock hashes a move forward left on their
// node (topology.Report.LeftBehind; quota counters are not stock). Called
// with o.mu held.
func (o *observed) noteLeftBehind(left []topology.LeftCounter) {
	for _, l := range left {
		if !strings.HasPrefix(l.Key, "inv:stock:") || slices.Contains(o.leftBehind[l.Key], l.Node) {
			continue
		}
		if o.leftBehind == nil {
			o.leftBehind = map[string][]string{}
		}
		o.leftBehind[l.Key] = append(o.leftBehind[l.Key], l.Node)
	}
}

// leftUnits is the loaded count of key on the nodes of on (those a move
// forward left it on) that do not serve its route at the end (members),
// and why it is allowed over the bound (checkStock).
func leftUnits(st *worldState, key string, on, members []string) (int64, string) {
	var units int64
	var where []string
	for _, name := range on {
		if slices.Contains(members, name) {
			continue
		}
		if l := atoi(st.nodes[name].stock[key]["loaded"]); l > 0 {
			units += l
			where = append(where, fmt.Sprintf("%d on %s", l, name))
		}
	}
	return units, strings.Join(where, " and ") + " in a hash a move forward left there, out of every instance's reach (topology.Report.LeftBehind)"
}

// leftConfirmed is the confirmed count of key on the nodes of on (those
// a move forward left it on) that do not serve its route at the end
// (members): checkStock's sum over all nodes of a split route leaves it
// out. Such a hash is the node's older copy, out of every instance's
// reach (leftUnits); the move had carried the count it held then to the
// route's nodes, which hold it still, and a part pending in the copy
// settles on it again (inventory/apply_takeback.go: "the reconcilers
// settle its parts; its count is counted on its transfer's destination
// too"), the part itself counted once (seed 195381 of PROFILE=crash
// TOPOLOGY=1 SHRINK=1 REJOIN=1 LOSS=1 MOVED=0.5 TWIN=0.3 LOSS2=0.3
// RESTART=0.2: o2's part of 4 confirmed before n3 went back to a copy
// that held it pending, after T2 moved c's stock off n3). The parts'
// confirmed units, over all nodes, are held to the route's loaded bound
// as ever (no oversell).
func leftConfirmed(st *worldState, key string, on, members []string) int64 {
	var c int64
	for _, name := range on {
		if !slices.Contains(members, name) {
			c += atoi(st.nodes[name].stock[key]["confirmed"])
		}
	}
	return c
}

// routeNodes are the nodes route had at T0 or at the topology of an
// apply that ran (observed.ran), whenever it ran: every node that may
// ever have held a unit of the route's stock (a transfer moves units
// only between nodes of the route at the apply's two topologies).
func routeNodes(route string, ran []topoApply) []string {
	nodes := slices.Clone(routesT0[route])
	for _, a := range ran {
		for _, n := range topologyRoutes[a.to][route] {
			if !slices.Contains(nodes, n) {
				nodes = append(nodes, n)
			}
		}
	}
	return nodes
}

// stockSums is what checkNodeStock read of one SKU on one node, or,
// added up, on all of them.
type stockSums struct{ total, loaded, confirmed, partsConfirmed int64 }

func (s *stockSums) add(o stockSums) {
	s.total += o.total
	s.loaded += o.loaded
	s.confirmed += o.confirmed
	s.partsConfirmed += o.partsConfirmed
}

// checkNodeStock checks the stock counters of key on ns against its parts
// there (their confirmed counts only unless split: checkStock).
func checkNodeStock(v *violations, ns *nodeState, key string, split bool) stockSums {
	var pending, confirmed int64
	for _, p := range ns.parts {
		if p.Kind != inventory.PartStock || p.Counter != key {
			continue
		}
		switch p.State {
		case inventory.PartPending:
			pending += p.Qty
		case inventory.PartConfirmed:
			confirmed += p.Qty
		}
	}
	f, ok := ns.stock[key]
	if !ok {
		if pending != 0 || (confirmed != 0 && !split) {
			v.add("stock-vs-parts", "%s on %s: no counters, its parts hold %d pending and %d confirmed", key, ns.name, pending, confirmed)
		}
		return stockSums{partsConfirmed: confirmed}
	}
	a, r, c, l := atoi(f["available"]), atoi(f["reserved"]), atoi(f["confirmed"]), atoi(f["loaded"])
	if a < 0 || r < 0 || c < 0 || l < 0 {
		v.add("stock-negative", "%s on %s: available %d reserved %d confirmed %d loaded %d", key, ns.name, a, r, c, l)
	}
	if a+r+c != l {
		v.add("stock-conserved", "%s on %s: available %d + reserved %d + confirmed %d = %d, loaded %d", key, ns.name, a, r, c, a+r+c, l)
	}
	if r != pending || (c != confirmed && !split) {
		v.add("settled-twice", "%s on %s: reserved %d confirmed %d, but its parts hold %d pending and %d confirmed",
			key, ns.name, r, c, pending, confirmed)
	}
	return stockSums{total: a + r + c, loaded: l, confirmed: c, partsConfirmed: confirmed}
}

// checkStranded: a node that does not serve a SKU's route in routes (the
// topology the schedule ended at) holds none of the SKU's units, nor any
// loaded count of it. No instance takes, loads or gives back the route's
// stock there any more, so units left on it are out of every order's
// reach for good, though checkStock's totals over all nodes still count
// them. Units a data loss gave back to the node itself are excused, as
// far as its losses gave them back (stockLoss.gave; all of them for a
// loss not read around its roll back), on a route whose counters a loss
// may have changed (lostRoutes: lossMoved); checkStock's totals still
// hold them.
func checkStranded(v *violations, st *worldState, obs *observed, routes map[string][]string, lostRoutes map[string]bool) {
	obs.mu.Lock()
	losses := slices.Clone(obs.stockLosses)
	obs.mu.Unlock()
	for _, k := range skus {
		key := inventory.StockKey(k.Route, k.SKU)
		for _, name := range allNodes {
			f, ok := st.nodes[name].stock[key]
			if !ok || slices.Contains(routes[k.Route], name) {
				continue
			}
			a, r, c, l := atoi(f["available"]), atoi(f["reserved"]), atoi(f["confirmed"]), atoi(f["loaded"])
			if a == 0 && r == 0 && c == 0 && l == 0 {
				continue
			}
			msg := fmt.Sprintf("%s on %s, which does not serve route %s (its nodes %v): available %d reserved %d confirmed %d loaded %d",
				key, name, k.Route, routes[k.Route], a, r, c, l)
			if gave, lost := givenBack(losses, name, key); lost && lostRoutes[k.Route] && l <= gave && a+r+c <= gave {
				v.excused = append(v.excused, "stock-stranded: "+msg)
				continue
			}
			v.add("stock-stranded", "%s", msg)
		}
	}
}

// givenBack is how many loaded units of key losses gave back to node
// name (lost: whether it lost data at all; gave is then the most any
// count may be for a loss not read around its roll back).
func givenBack(losses []stockLoss, name, key string) (gave int64, lost bool) {
	for _, sl := range losses {
		if sl.node != name {
			continue
		}
		lost = true
		if !sl.read {
			return 1 << 62, true
		}
		gave += sl.gave(key)
	}
	return gave, lost
}
