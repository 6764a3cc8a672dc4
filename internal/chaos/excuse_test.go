package chaos

import (
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/inventory"
)

// An order left to expire is decided when the reconciler reaches its
// nodes: a stall of the node holding its parts puts the expiry off past
// the TTL, into a window that a later rollback of its home node loses
// (seed 134 of a 2-minute run: parts on n2, stopped past the lease, the
// record on n3, rolled back right after). The order is exposed to that
// window; an order on other nodes, or one whose stall ended long before
// the window, is not.
func TestExposedFollowsExpiryPutOffByOutages(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 22, 0, 0, 0, time.UTC)
	at := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	win := decideWindow{ttl: 3 * time.Second, slack: 2 * time.Second}
	timeline := []Fault{
		{At: at(103.5), Kind: FaultLongPause, Target: "n2", Hold: at(11.7)}, // until 115.2
		{At: at(110.7), Kind: FaultPause, Target: "n1", Hold: at(2.2)},
		{At: at(100), Kind: FaultDrain, Target: "c@n2", Hold: at(30)}, // stops nothing
		{At: at(115.8), Kind: FaultRollback, Target: "n3", Hold: at(1.9)},
	}
	outs := outages(t0, timeline)
	lost := []lossWindow{{node: "n3", from: t0.Add(at(115.8)), to: t0.Add(at(117.7))}}

	mk := func(id string, last float64, receipts ...string) *order {
		o := &order{ID: id}
		o.first, o.last = t0.Add(at(last-0.1)), t0.Add(at(last))
		for _, n := range receipts {
			o.receipts = append(o.receipts, receipt{Node: n})
		}
		return o
	}
	st := &state{nodes: map[string]*nodeState{
		"n1": {name: "n1", parts: map[string]*inventory.PartRecord{}, orders: map[string]*inventory.OrderRecord{}},
		"n2": {name: "n2", parts: map[string]*inventory.PartRecord{}, orders: map[string]*inventory.OrderRecord{}},
		"n3": {name: "n3", parts: map[string]*inventory.PartRecord{}, orders: map[string]*inventory.OrderRecord{
			"late": {}, "other": {}, "early": {},
		}},
	}}
	orders := []*order{
		mk("late", 102.2, "n2"),  // parts on n2: expiry waits for n2, lands in n3's lost window
		mk("other", 102.2, "n1"), // parts on n1: decided by 112.9 + 2 s
		mk("early", 60, "n2"),    // decided long before n2 stopped
	}
	// every order's record home is n3
	cfg := config.Default()
	cfg.Nodes = map[string]config.Node{"n3": {Addr: "127.0.0.1:1", Weight: 1}}
	cfg.Servers = map[string]config.Server{"inventory": {Routes: map[string][]string{"a": {"n3"}}}}
	h, err := inventory.NewHomes(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	homes := []placement{{homes: h}}
	e := exposed(lost, outs, orders, st, homes, win)
	if !e.orders["late"] {
		t.Errorf("the order whose expiry n2's stall put off into n3's lost window is not exposed")
	}
	if e.orders["other"] || e.orders["early"] {
		t.Errorf("exposed %v, want only the order whose expiry was put off", e.orders)
	}
	// Without the outages the same order is not exposed: the TTL alone ends
	// before the window.
	if e := exposed(lost, nil, orders, st, homes, win); e.orders["late"] {
		t.Errorf("without outages the order is exposed; the TTL ends at 107.2 s, the window starts at 115.8 s")
	}
	if got, want := decidedBy(t0.Add(at(102.2)), win, outs, map[string]bool{"n2": true}), t0.Add(at(117.2)); !got.Equal(want) {
		t.Errorf("decidedBy = %v, want %v (n2's outage end + 2 s)", got.Sub(t0), want.Sub(t0))
	}
}

// The slack of a run with the chaos defaults: the slowest reconnect probe
// with its jitter (0.88 s) and the probe timeout (0.2 s), a client timeout
// (1 s), two reconciler passes (0.6 s) and 2 s for a backlog: 4.68 s.
func TestDecideWindowOfChaosDefaults(t *testing.T) {
	w := decideWindowOf(Options{ReservationTTL: 3 * time.Second, ClientTimeout: time.Second, ReconcileInterval: 300 * time.Millisecond},
		config.Health{Timeout: 200 * time.Millisecond, Backoff: []time.Duration{200 * time.Millisecond, 800 * time.Millisecond}})
	if w.ttl != 3*time.Second || w.slack != 4680*time.Millisecond {
		t.Fatalf("decideWindowOf = %+v, want ttl 3s, slack 4.68s", w)
	}
}

// An order whose record promises a part at an incarnation its node no
// longer has (accepted after a rollback) is exposed whenever its calls
// were: a reader that finds the part absent commits the order with it
// lost (seed 272: staged 4 s after n2's first accept, committed by a
// topology change's migration after n2's second, long after the order's
// last call). An order
// promised at the node's present incarnation, or on a node that lost
// nothing, is not.
func TestExposedByAPromiseAtAReplacedIncarnation(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 17, 57, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	win := decideWindow{ttl: 3 * time.Second, slack: 2 * time.Second}
	lost := []lossWindow{{node: "n2", from: at(95), to: at(98)}}
	rec := func(user string, parts ...inventory.OrderPart) *inventory.OrderRecord {
		return &inventory.OrderRecord{Status: inventory.OrderReserved, User: user, Parts: parts}
	}
	promised := func(node, inc string) inventory.OrderPart {
		return inventory.OrderPart{ID: "x", Node: node, Kind: inventory.PartStock, Route: "r", SKU: "s", Qty: 1, Incarnation: inc}
	}
	st := &state{nodes: map[string]*nodeState{
		"n1": {name: "n1", incarnation: "i1", parts: map[string]*inventory.PartRecord{}, orders: map[string]*inventory.OrderRecord{
			"replaced":  rec("u1", promised("n2", "old")),
			"current":   rec("u2", promised("n2", "new")),
			"elsewhere": rec("u3", promised("n3", "old")),
		}},
		"n2": {name: "n2", incarnation: "new", parts: map[string]*inventory.PartRecord{}, orders: map[string]*inventory.OrderRecord{}},
		"n3": {name: "n3", incarnation: "i3", parts: map[string]*inventory.PartRecord{}, orders: map[string]*inventory.OrderRecord{}},
	}}
	var orders []*order
	for _, id := range []string{"replaced", "current", "elsewhere"} {
		o := &order{ID: id}
		o.first, o.last = at(59), at(61) // decided, by the TTL, long before n2's window
		orders = append(orders, o)
	}
	e := exposed(lost, nil, orders, st, nil, win)
	if !e.orders["replaced"] || !e.sold["r:s:u1"] {
		t.Errorf("the order promised at n2's replaced incarnation is not exposed (orders %v, sold %v)", e.orders, e.sold)
	}
	if e.orders["current"] || e.orders["elsewhere"] || e.sold["r:s:u2"] || e.sold["r:s:u3"] {
		t.Errorf("exposed %v (sold %v), want only the order promised at n2's replaced incarnation", e.orders, e.sold)
	}
}

// A rollback excuses a per-user limit or quota violation only for a quota
// whose counter lived on the node that lost writes while an order of that
// user and SKU ran (or, comparing confirmed stock units with the quota,
// for an exposed order's user and SKU): before, a rollback of n1 excused
// u1's counter over its limit on n2, which n1's loss cannot explain.
func TestExcusedQuotaLivedOnTheLostNode(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	win := decideWindow{ttl: 3 * time.Second, slack: 2 * time.Second}
	overLimit := func(st *state) { st.nodes["n2"].quota["inv:quota:a:3:lim:u1"] = "5" }
	stockLost := func(st *state) { // n1 lost c0-1's confirm of its stock part
		n1 := st.nodes["n1"]
		n1.parts["c0-1|t1|0"].State = inventory.PartCancelled
		n1.stock["inv:stock:a:lim"]["available"], n1.stock["inv:stock:a:lim"]["confirmed"] = "10", "0"
	}
	for _, tc := range []struct {
		name     string
		node     string  // rolled back
		ordered  float64 // c0-1's calls, seconds after t0; the window is 50-53 s
		mutate   func(st *state)
		kind     string
		excused  bool
		excused2 string // a kind that must be excused too, if any
	}{
		{"quota on another node", "n1", 51, overLimit, "user-limit", false, ""},
		{"quota on the lost node", "n2", 51, overLimit, "user-limit", true, ""},
		{"quota on the lost node, orders long before", "n2", 20, overLimit, "user-limit", false, ""},
		{"an exposed order's stock part lost", "n1", 51, stockLost, "quota-balance", true, "mixed-outcome"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, orders, skus, homes := fixture(t)
			for _, o := range orders {
				o.first, o.last = at(tc.ordered-0.5), at(tc.ordered)
			}
			tc.mutate(st)
			lost := []lossWindow{{node: tc.node, from: at(50), to: at(53)}}
			rep := newReport(Options{})
			rep.excuse = exposed(lost, nil, orders, st, []placement{{homes: homes}}, win)
			check(rep, st, orders, skus, homes)
			if got := rep.ViolationCounts[tc.kind] == 0 && rep.Excused[tc.kind] > 0; got != tc.excused {
				t.Errorf("%s excused = %v, want %v: violations %+v, excused %v", tc.kind, got, tc.excused, rep.Violations, rep.ExcusedExamples)
			}
			if tc.excused2 != "" && rep.ViolationCounts[tc.excused2] > 0 {
				t.Errorf("%s not excused: %+v", tc.excused2, rep.Violations)
			}
		})
	}
}
