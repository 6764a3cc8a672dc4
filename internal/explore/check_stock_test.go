package explore

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/topology"
)

// TestCheckStranded: a SKU's units on a node that does not serve its
// route at the topology the schedule ended at are stranded (n3 left
// route c for route d, and kept c/s: the bug 4dd7130 fixed), a drained
// hash there is not, a node that serves the route is not looked at, and
// on a route a data loss may have changed, the units are excused only
// on the node that lost data and as far as its loss gave them back
// (before, any units on any node of such a route were excused).
func TestCheckStranded(t *testing.T) {
	key := inventory.StockKey("c", "s")
	state := func(n3 map[string]string) *worldState {
		st := &worldState{nodes: map[string]*nodeState{}}
		for _, name := range allNodes {
			st.nodes[name] = &nodeState{stock: map[string]map[string]string{}}
		}
		if n3 != nil {
			st.nodes["n3"].stock[key] = n3
		}
		return st
	}
	held := map[string]string{"available": "6", "reserved": "0", "confirmed": "3", "loaded": "9"}
	drained := map[string]string{"available": "0", "reserved": "0", "confirmed": "0", "loaded": "0"}
	loss := func(node string, before, after int64) []stockLoss {
		return []stockLoss{{node: node, read: true, before: map[string]int64{key: before}, after: map[string]int64{key: after}}}
	}
	for _, c := range []struct {
		name          string
		n3            map[string]string
		routes        map[string][]string
		lost          bool
		losses        []stockLoss
		list, excused int
	}{
		{"left the route, kept its units", held, routesT2, false, nil, 1, 0},
		{"left the route, drained", drained, routesT2, false, nil, 0, 0},
		{"serves the route", held, routesT0, false, nil, 0, 0},
		{"left the route, its loss gave them back", held, routesT2, true, loss("n3", 0, 9), 0, 1},
		{"left the route, its loss gave back fewer", held, routesT2, true, loss("n3", 2, 9), 1, 0},
		{"left the route, its loss gave none back", held, routesT2, true, loss("n3", 9, 9), 1, 0},
		{"left the route, another node's loss", held, routesT2, true, loss("n1", 0, 9), 1, 0},
		{"left the route, its loss not read", held, routesT2, true, []stockLoss{{node: "n3"}}, 0, 1},
		{"no hash", nil, routesT2, false, nil, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			var v violations
			obs := newObserved()
			obs.stockLosses = c.losses
			checkStranded(&v, state(c.n3), obs, c.routes, map[string]bool{"c": c.lost})
			if len(v.list) != c.list || len(v.excused) != c.excused {
				t.Fatalf("violations %q, excused %q; want %d and %d", v.list, v.excused, c.list, c.excused)
			}
			if c.list > 0 && !strings.Contains(v.list[0], "stock-stranded: inv:stock:c:s on n3") {
				t.Errorf("violation %q does not name c/s on n3", v.list[0])
			}
		})
	}
}

// TestCheckStockBounds: a SKU's loaded count over all nodes is held to
// what the schedule loaded, less what each data loss took off its node
// (its loaded count just before the roll back beyond the one it came
// back with), and never above what was loaded; an unknown load's units
// may or may not be in; units confirmed over all nodes are never more
// than were loaded. Before, a route a loss may have changed (lostRoutes)
// was held only to available + reserved + confirmed = loaded over all
// nodes, which checkNodeStock already holds node by node: the
// transfer that lost n4's units (MUTATIONS=xfer-no-source, seeds 50601,
// 50611, 50619 with n3's loss: 2 of 14 units left) passed.
func TestCheckStockBounds(t *testing.T) {
	key := inventory.StockKey("c", "s")
	lossOn := func(node string, before, after int64) stockLoss {
		return stockLoss{node: node, read: true, before: map[string]int64{key: before}, after: map[string]int64{key: after}}
	}
	for _, c := range []struct {
		name      string
		loaded    int64 // c/s on n2, all available
		confirmed int64 // confirmed parts of c/s on n1 (split: counted over all nodes)
		extra     loadRange
		losses    []stockLoss
		want      string // a substring of the one violation; "" none
	}{
		{"as loaded", 14, 0, loadRange{4, 4}, nil, ""},
		{"short, no loss", 12, 0, loadRange{4, 4}, nil, "at least 14 must be"},
		{"short by what the loss took", 12, 0, loadRange{4, 4}, []stockLoss{lossOn("n3", 12, 10)}, ""},
		{"short beyond what the loss took", 2, 0, loadRange{4, 4}, []stockLoss{lossOn("n3", 12, 10)}, "at least 12 must be"},
		{"short, the loss gave units back", 2, 0, loadRange{4, 4}, []stockLoss{lossOn("n3", 0, 10)}, "at least 14 must be"},
		{"short, two losses", 7, 0, loadRange{4, 4}, []stockLoss{lossOn("n3", 12, 10), lossOn("n1", 5, 0)}, ""},
		{"short, a loss not read", 2, 0, loadRange{4, 4}, []stockLoss{{node: "n3"}}, ""},
		{"above what was loaded", 16, 0, loadRange{4, 4}, []stockLoss{lossOn("n3", 12, 10)}, "at most 14 may be"},
		{"a load's outcome unknown, in", 14, 0, loadRange{0, 4}, nil, ""},
		{"a load's outcome unknown, out", 10, 0, loadRange{0, 4}, nil, ""},
		{"a load's outcome unknown, above", 15, 0, loadRange{0, 4}, nil, "at most 14 may be"},
		{"confirmed beyond what was loaded", 14, 15, loadRange{4, 4}, nil, "oversold"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := stockedWorld()
			st.nodes["n2"].stock[key] = stockHash(c.loaded-c.confirmed, c.confirmed)
			if c.confirmed > 0 {
				st.nodes["n1"].parts["x|T|0"] = &inventory.PartRecord{ID: "x|T|0", Order: "x", Kind: inventory.PartStock,
					Counter: key, State: inventory.PartConfirmed, Qty: c.confirmed}
			}
			obs := newObserved()
			obs.extra[key], obs.stockLosses = c.extra, c.losses
			var v violations
			checkStock(&v, st, obs, map[string]bool{"c": true}, nil, routesT0)
			switch {
			case c.want == "" && len(v.list) > 0:
				t.Errorf("violations %q, want none", v.list)
			case c.want != "" && !listed(&v, c.want):
				t.Errorf("violations %q, want one with %q", v.list, c.want)
			}
		})
	}
}

// stockedWorld is an empty world whose every SKU's stock hash, as
// loaded at the start, is on n2 (and no other node holds a stock hash).
func stockedWorld() *worldState {
	st := emptyWorld()
	for _, ns := range st.nodes {
		ns.stock = map[string]map[string]string{}
	}
	for _, k := range skus {
		st.nodes["n2"].stock[inventory.StockKey(k.Route, k.SKU)] = stockHash(stockPerSKU, 0)
	}
	return st
}

// stockHash is a stock hash's fields: available units, confirmed units,
// and loaded their sum.
func stockHash(available, confirmed int64) map[string]string {
	return map[string]string{"available": strconv.FormatInt(available, 10), "reserved": "0",
		"confirmed": strconv.FormatInt(confirmed, 10), "loaded": strconv.FormatInt(available+confirmed, 10)}
}

// TestStockLeftBehindByAMoveForward: a stock hash a move forward reported
// left on n3 (units reserved in its older copy: topology.Report's
// LeftBehind), n3 off route c at the end, is allowed over the SKU's
// bound, and named; the same units on n3 unreported, or on a node that
// serves the route, are stock from nothing as before (the explorer's
// seeds 155100 and 155263 failed on the former: a hash the take back had
// to leave, busy).
func TestStockLeftBehindByAMoveForward(t *testing.T) {
	key := inventory.StockKey("c", "s")
	for _, c := range []struct {
		name    string
		left    []topology.LeftCounter
		members []string // route c's nodes at the end
		want    string
	}{
		{"left on n3, off the route", []topology.LeftCounter{{Node: "n3", Key: key, Why: "units reserved"}}, []string{"n2"}, ""},
		{"not reported", nil, []string{"n2"}, "at most 14 may be"},
		{"left on n3, which serves the route", []topology.LeftCounter{{Node: "n3", Key: key, Why: "units reserved"}}, []string{"n2", "n3"}, "at most 14 may be"},
		{"a quota counter left", []topology.LeftCounter{{Node: "n3", Key: "inv:quota:c:1:s:u", Why: "no marker"}}, []string{"n2"}, "at most 14 may be"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := stockedWorld()
			st.nodes["n2"].stock[key] = stockHash(14, 0)
			st.nodes["n3"].stock[key] = stockHash(12, 0)
			obs := newObserved()
			obs.extra[key] = loadRange{4, 4}
			obs.mu.Lock()
			obs.noteLeftBehind(c.left)
			obs.mu.Unlock()
			routes := map[string][]string{"a": {"n1"}, "b": {"n2"}, "c": c.members}
			var v violations
			checkStock(&v, st, obs, map[string]bool{}, nil, routes)
			switch {
			case c.want == "" && len(v.list) > 0:
				t.Errorf("violations %q, want none", v.list)
			case c.want != "" && !listed(&v, c.want):
				t.Errorf("violations %q, want one with %q", v.list, c.want)
			}
		})
	}
}

// TestConfirmedLeftBehindOnASplitRoute: on a split route (checkStock's
// sum of confirmed counts over all nodes), the confirmed count of a hash
// a move forward reported left on n3, off the route at the end, is left
// out of the sum: a part pending in n3's older copy settled there again
// while the count it took before the loss lives on n2 (seed 195381 with
// REJOIN=1). Unreported, or on a node of the route, it is settled twice
// as before.
func TestConfirmedLeftBehindOnASplitRoute(t *testing.T) {
	key := inventory.StockKey("c", "s")
	left := []topology.LeftCounter{{Node: "n3", Key: key, Why: "units reserved"}}
	for _, c := range []struct {
		name    string
		left    []topology.LeftCounter
		members []string
		want    string
	}{
		{"left on n3, off the route", left, []string{"n1", "n2"}, ""},
		{"not reported", nil, []string{"n1", "n2"}, "settled-twice"},
		{"left on n3, which serves the route", left, []string{"n2", "n3"}, "settled-twice"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := stockedWorld()
			st.nodes["n2"].stock[key] = stockHash(10, 4) // the count carried by T2
			st.nodes["n3"].stock[key] = stockHash(0, 4)  // the older copy's hash, its part settled on it again
			st.nodes["n3"].parts["o2|T|0"] = &inventory.PartRecord{ID: "o2|T|0", Order: "o2", Kind: inventory.PartStock,
				Counter: key, State: inventory.PartConfirmed, Qty: 4}
			obs := newObserved()
			obs.extra[key] = loadRange{4, 4}
			obs.mu.Lock()
			obs.noteLeftBehind(c.left)
			obs.mu.Unlock()
			var v violations
			checkStock(&v, st, obs, map[string]bool{"c": true}, nil, map[string][]string{"a": {"n1"}, "b": {"n2"}, "c": c.members})
			if got := listed(&v, "settled-twice"); got != (c.want != "") {
				t.Errorf("violations %q, want settled-twice: %v", v.list, c.want != "")
			}
		})
	}
}

// TestSplitRouteConfirmedCountExcusedWhereALossMovedCounters: on a route
// in split, a confirmed count over all nodes above its confirmed parts
// is a violation, unless a data loss may have changed the route's
// counters (lostRoutes): seed 172039's n3 went back to its copy from the
// start after T2 had moved its confirmed count of o2's 4 units to n2, so
// o2's confirmed part was gone and its count was not.
func TestSplitRouteConfirmedCountExcusedWhereALossMovedCounters(t *testing.T) {
	key := inventory.StockKey("c", "s")
	for _, c := range []struct {
		name       string
		lostRoutes map[string]bool
		want       bool // listed (else excused)
	}{
		{"no loss", nil, true},
		{"a loss moved route c's counters", map[string]bool{"c": true}, false},
		{"a loss moved another route's", map[string]bool{"a": true}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := stockedWorld()
			st.nodes["n2"].stock[key] = stockHash(10, 4) // the count T2 carried, its part lost with n3
			obs := newObserved()
			obs.extra[key] = loadRange{4, 4}
			var v violations
			checkStock(&v, st, obs, map[string]bool{"c": true}, c.lostRoutes, map[string][]string{"a": {"n1"}, "b": {"n2"}, "c": {"n1", "n2"}})
			if got := listed(&v, "settled-twice"); got != c.want {
				t.Errorf("violations %q (excused %q), want settled-twice listed: %v", v.list, v.excused, c.want)
			}
			if !c.want && !slices.ContainsFunc(v.excused, func(s string) bool { return strings.HasPrefix(s, "settled-twice: ") }) {
				t.Errorf("excused %q, want the settled-twice among them", v.excused)
			}
		})
	}
}
