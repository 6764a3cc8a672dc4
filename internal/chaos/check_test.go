package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/pgsync"
)

// fixture is a small consistent end state: order c0-1 (user u1, 2 units
// of a/lim) confirmed, order c0-2 (1 unit) cancelled, order c0-3 never
// reserved because a Cancel came first.
func fixture(t *testing.T) (*state, []*order, []SKU, *inventory.Homes) {
	t.Helper()
	names := []string{"n1", "n2", "n3"}
	cfg := config.Default()
	cfg.Nodes = map[string]config.Node{}
	for i, n := range names {
		cfg.Nodes[n] = config.Node{Addr: fmt.Sprintf("127.0.0.1:%d", 7001+i), Weight: 1}
	}
	cfg.Servers = map[string]config.Server{cfg.Inventory.Server: {Routes: map[string][]string{"a": names}}}
	homes, err := inventory.NewHomes(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	st := &state{names: names, nodes: map[string]*nodeState{}}
	for _, n := range names {
		st.nodes[n] = newNodeState(n)
		st.nodes[n].redoOffsets = map[string]string{}
		// As LoadStock leaves a node: reserved and confirmed appear with
		// the first reserve.
		st.nodes[n].stock["inv:stock:a:lim"] = map[string]string{"available": "0", "loaded": "0", "limit": "4"}
	}
	n1, n2 := st.nodes["n1"], st.nodes["n2"]
	n1.stock["inv:stock:a:lim"] = map[string]string{"available": "8", "reserved": "0", "confirmed": "2", "loaded": "10", "limit": "4"}
	n1.addPart("c0-1|t1|0", map[string]string{"state": "confirmed", "kind": "s", "order": "c0-1", "token": "t1", "sku": "lim",
		"qty": "2", "item": "0", "counter": "inv:stock:a:lim", "redo": "inv:redo:5", "offset": "1"})
	n1.addPart("c0-2|t2|0", map[string]string{"state": "cancelled", "kind": "s", "order": "c0-2", "token": "t2", "sku": "lim",
		"qty": "1", "item": "0", "counter": "inv:stock:a:lim", "redo": "inv:redo:5", "offset": "2"})
	n1.redo["inv:redo:5"] = []redis.Z{{Score: 1, Member: "c0-1|t1|0"}, {Score: 2, Member: "c0-2|t2|0"}}
	n1.redoOffsets["inv:redo:5"] = "2"
	n1.redoOffsets["inv:redo:5:s"] = "1" // the queue's first offset in 32-offset segments
	n2.addPart("c0-1|t1|q|a|lim", map[string]string{"state": "confirmed", "kind": "q", "order": "c0-1", "token": "t1", "sku": "lim",
		"qty": "2", "item": "-1", "counter": "inv:quota:a:3:lim:u1"})
	n2.quota["inv:quota:a:3:lim:u1"] = "2"
	rparts, _ := json.Marshal([]inventory.OrderPart{
		{ID: "c0-1|t1|0", Node: "n1", Kind: inventory.PartStock, Item: 0, Route: "a", SKU: "lim", Qty: 2, Redo: "inv:redo:5", Offset: 1},
		{ID: "c0-1|t1|q|a|lim", Node: "n2", Kind: inventory.PartQuota, Item: -1, Route: "a", SKU: "lim", Qty: 2},
	})
	home := func(id string) *nodeState { return st.nodes[homes.Home(id)] }
	home("c0-1").addOrder("c0-1", map[string]string{"status": "confirmed", "token": "t1", "user": "u1", "parts": string(rparts)})
	rparts2, _ := json.Marshal([]inventory.OrderPart{{ID: "c0-2|t2|0", Node: "n1", Kind: inventory.PartStock, Item: 0, Route: "a",
		SKU: "lim", Qty: 1, Redo: "inv:redo:5", Offset: 2}})
	home("c0-2").addOrder("c0-2", map[string]string{"status": "cancelled", "token": "t2", "parts": string(rparts2)})
	home("c0-3").addOrder("c0-3", map[string]string{"status": "cancelled", "reason": "tombstone"})

	orders := []*order{
		{ID: "c0-1", User: "u1", Items: []item{{"a", "lim", 2}}, reserveOK: 1, confirmIssued: true, confirmedBy: "Confirm was ok",
			receipts: []receipt{{Item: 0, SKU: "lim", Qty: 2, Node: "n1", Redo: "inv:redo:5", Offset: 1}}},
		{ID: "c0-2", Items: []item{{"a", "lim", 1}}, reserveOK: 1, cancelledBy: "Cancel was ok",
			receipts: []receipt{{Item: 0, SKU: "lim", Qty: 1, Node: "n1", Redo: "inv:redo:5", Offset: 2}}},
		{ID: "c0-3", Items: []item{{"a", "lim", 1}}, cancelledBy: "Cancel before any Reserve was ok", notHeld: "refused"},
	}
	return st, orders, []SKU{{Route: "a", SKU: "lim", Loaded: 10, Limit: 4}}, homes
}

func TestCheckConsistentState(t *testing.T) {
	st, orders, skus, homes := fixture(t)
	rep := newReport(Options{})
	check(rep, st, orders, skus, homes)
	if !rep.OK() {
		t.Fatalf("violations in a consistent state: %+v", rep.Violations)
	}
}

func TestCheckFindsViolations(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(st *state, orders []*order)
		want   []string
	}{
		{"stock created", func(st *state, _ []*order) { st.nodes["n1"].stock["inv:stock:a:lim"]["available"] = "9" },
			[]string{"stock-balance"}},
		{"unreadable counter", func(st *state, _ []*order) { st.nodes["n3"].stock["inv:stock:a:lim"]["reserved"] = "x" },
			[]string{"stock-balance", "stock-negative"}},
		{"negative counter", func(st *state, _ []*order) {
			f := st.nodes["n2"].stock["inv:stock:a:lim"]
			f["available"], f["confirmed"] = "-1", "1"
		}, []string{"stock-negative", "stock-vs-parts"}},
		{"part left pending", func(st *state, _ []*order) {
			n1 := st.nodes["n1"]
			n1.parts["c0-2|t2|0"].State = inventory.PartPending
			n1.stock["inv:stock:a:lim"]["available"], n1.stock["inv:stock:a:lim"]["reserved"] = "7", "1"
			n1.pending = []redis.Z{{Score: 1, Member: "c0-2|t2|0"}}
		}, []string{"pending-after-heal", "seen-not-held"}},
		{"cancelled order confirmed", func(st *state, _ []*order) {
			n1 := st.nodes["n1"]
			n1.parts["c0-2|t2|0"].State = inventory.PartConfirmed
			n1.stock["inv:stock:a:lim"]["available"], n1.stock["inv:stock:a:lim"]["confirmed"] = "7", "3"
		}, []string{"mixed-outcome", "seen-not-held"}},
		{"confirmed order lost", func(st *state, _ []*order) {
			for _, ns := range st.nodes {
				if r := ns.orders["c0-1"]; r != nil {
					r.Status = "cancelled"
				}
			}
		}, []string{"seen-confirmed", "mixed-outcome"}},
		{"never confirmed", func(_ *state, orders []*order) {
			orders[0].confirmIssued, orders[0].confirmedBy = false, ""
		}, []string{"never-confirmed"}},
		{"redo gap", func(st *state, _ []*order) {
			st.nodes["n1"].redo["inv:redo:5"] = []redis.Z{{Score: 2, Member: "c0-2|t2|0"}}
		}, []string{"redo-log"}},
		{"first offset in the segments past the head", func(st *state, _ []*order) { st.nodes["n1"].redoOffsets["inv:redo:5:s"] = "4" },
			[]string{"redo-log"}},
		{"first offset in the segments unreadable", func(st *state, _ []*order) { st.nodes["n1"].redoOffsets["inv:redo:5:s"] = "x" },
			[]string{"redo-log"}},
		// a node's hash gone while its parts hold units: counted nowhere
		// (internal/explore flags it as "no counters")
		{"parts without counters", func(st *state, _ []*order) { delete(st.nodes["n1"].stock, "inv:stock:a:lim") },
			[]string{"stock-vs-parts", "stock-balance"}},
		{"quota over limit", func(st *state, _ []*order) { st.nodes["n2"].quota["inv:quota:a:3:lim:u1"] = "5" },
			[]string{"user-limit", "quota-balance"}},
		{"receipts differ", func(_ *state, orders []*order) { orders[0].receipts[0].Offset = 7 },
			[]string{"seen-reserved"}},
		{"contradiction", func(_ *state, orders []*order) { orders[1].claimConfirmed("Confirm was ok") },
			[]string{"client-contradiction"}},
		{"stranger", func(st *state, _ []*order) {
			st.nodes["n3"].addPart("x-1|t|0", map[string]string{"state": "cancelled", "order": "x-1", "tombstone": "1"})
		}, []string{"unknown-order"}},
		{"unreadable part", func(st *state, _ []*order) {
			n1 := st.nodes["n1"]
			delete(n1.parts, "c0-2|t2|0")
			n1.addPart("c0-2|t2|0", map[string]string{"state": "cancelled", "kind": "s", "order": "c0-2", "token": "t2",
				"qty": "1x", "item": "0", "counter": "inv:stock:a:lim", "redo": "inv:redo:5", "offset": "2"})
		}, []string{"part-record", "redo-log"}},
		{"unreadable order record", func(st *state, _ []*order) {
			for _, ns := range st.nodes {
				if ns.orders["c0-2"] != nil {
					delete(ns.orders, "c0-2")
					ns.addOrder("c0-2", map[string]string{"status": "cancelled", "token": "t2", "parts": `[{"p":`})
				}
			}
		}, []string{"order-record"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, orders, skus, homes := fixture(t)
			tc.mutate(st, orders)
			rep := newReport(Options{})
			check(rep, st, orders, skus, homes)
			for _, k := range tc.want {
				if rep.ViolationCounts[k] == 0 {
					t.Errorf("no %s violation; got %+v", k, rep.Violations)
				}
			}
		})
	}
}

// Excused violations print one count line per kind, their details only
// when Verbose; they are not notes and the run passes.
func TestReportSummarisesExcused(t *testing.T) {
	r := newReport(Options{Seed: 7})
	r.excuse = newExposure()
	r.excuse.orders["o-9"], r.excuse.nodes["n2"] = true, true
	for i := range 5 {
		r.violate("order-status", "order o-9 attempt %d: lost", i)
		r.violate("data-loss", "node n2: part p%d missing", i)
	}
	var b strings.Builder
	r.Print(&b)
	out := b.String()
	for _, want := range []string{"  data-loss: 5\n", "  order-status: 5\n", "-v lists examples", "PASS"} {
		if !strings.Contains(out, want) {
			t.Fatalf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "part p0 missing") || strings.Contains(out, "notes:") {
		t.Fatalf("report lists excused details without Verbose:\n%s", out)
	}
	r.Verbose = true
	b.Reset()
	r.Print(&b)
	if out := b.String(); !strings.Contains(out, "    part p0 missing") && !strings.Contains(out, "    node n2: part p0 missing") {
		t.Fatalf("verbose report lacks the examples:\n%s", out)
	}
}

// A run whose checks did not run to the end (a node that could not be
// read after healing) prints that, never PASS, whether or not a violation
// was found before; before, it printed "PASS: no violation".
func TestReportUnchecked(t *testing.T) {
	for _, violations := range []int{0, 1} {
		r := newReport(Options{Seed: 7})
		for range violations {
			r.violate("rollback-undetected", "node n1: applied writes")
		}
		if _, err := r.unchecked(errors.New("chaos: reading node n2: i/o timeout")); err == nil {
			t.Fatal("unchecked dropped the error")
		}
		var b strings.Builder
		r.Print(&b)
		out := b.String()
		if strings.Contains(out, "PASS") || !strings.Contains(out, "NOT CHECKED") || !strings.Contains(out, "reading node n2") {
			t.Errorf("%d violations: the report does not say the checks did not run:\n%s", violations, out)
		}
		if violations > 0 && !strings.Contains(out, "FAIL: 1 violations") {
			t.Errorf("the violation found before is not listed:\n%s", out)
		}
	}
}

// A redo log a sync acknowledged and trimmed starts past the
// acknowledged offset's prefix: consistent when it starts at most one past
// the ack (of the node's incarnation) and no trimmed part is pending.
func TestCheckTrimmedRedoLog(t *testing.T) {
	trim := func(st *state, acked map[string]string) {
		n1 := st.nodes["n1"]
		n1.redo["inv:redo:5"] = []redis.Z{{Score: 2, Member: "c0-2|t2|0"}}
		n1.redoAcked = acked
	}
	for _, tc := range []struct {
		name   string
		mutate func(st *state)
		ok     bool
	}{
		{"trimmed to the ack", func(st *state) { trim(st, map[string]string{"inv:redo:5": "1"}) }, true},
		{"every entry trimmed", func(st *state) {
			trim(st, map[string]string{"inv:redo:5": "2"})
			st.nodes["n1"].redo["inv:redo:5"] = nil
		}, true},
		{"trimmed past the ack", func(st *state) { trim(st, map[string]string{"inv:redo:5": "0"}) }, false},
		{"acks of another incarnation", func(st *state) {
			trim(st, map[string]string{"inv:redo:5": "1", "inc": "before"})
			st.nodes["n1"].incarnation = "now"
		}, false},
		{"a pending part trimmed", func(st *state) {
			trim(st, map[string]string{"inv:redo:5": "1"})
			st.nodes["n1"].parts["c0-1|t1|0"].State = inventory.PartPending
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, _, _, _ := fixture(t)
			tc.mutate(st)
			rep := newReport(Options{})
			checkRedo(rep, st)
			if got := rep.ViolationCounts["redo-log"] == 0; got != tc.ok {
				t.Errorf("redo-log consistent = %v, want %v: %+v", got, tc.ok, rep.Violations)
			}
		})
	}
}

// The database's confirmed rows are held against each node's confirmed
// counter, both ways.
func TestCheckSyncedStock(t *testing.T) {
	for _, tc := range []struct {
		name string
		sums map[string]map[string]*syncSums
		ok   bool
	}{
		{"equal", map[string]map[string]*syncSums{"n1": {"inv:stock:a:lim": {confirmed: 2}}}, true},
		{"a sale missing", map[string]map[string]*syncSums{"n1": {"inv:stock:a:lim": {confirmed: 1}}}, false},
		{"none landed", nil, false},
		{"a sale on a node without the counter", map[string]map[string]*syncSums{
			"n1": {"inv:stock:a:lim": {confirmed: 2}}, "n2": {"inv:stock:a:big": {confirmed: 1}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, _, _, _ := fixture(t)
			rep := newReport(Options{})
			checkSyncedStock(rep, st, tc.sums)
			if got := rep.ViolationCounts["sync-confirmed"] == 0; got != tc.ok {
				t.Errorf("sync-confirmed consistent = %v, want %v: %+v", got, tc.ok, rep.Violations)
			}
		})
	}
}

// On a node accepted after a rollback, only more confirmed units in the
// database than on the node are excused (the database keeps the sales the
// node lost); fewer (acknowledged sales that never landed) stay a
// violation. Before, both were excused.
func TestCheckSyncedStockOnALostNode(t *testing.T) {
	for _, tc := range []struct {
		name    string
		db      int64 // confirmed rows of n1's a/lim; the node holds 2
		excused bool
	}{
		{"the database keeps sales the node lost", 3, true},
		{"sales the node holds never landed", 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, _, _, _ := fixture(t)
			rep := newReport(Options{})
			rep.excuse = newExposure()
			rep.excuse.nodes["n1"] = true
			checkSyncedStock(rep, st, map[string]map[string]*syncSums{"n1": {"inv:stock:a:lim": {confirmed: tc.db}}})
			if got := rep.ViolationCounts["sync-confirmed"] == 0 && rep.Excused["sync-confirmed"] == 1; got != tc.excused {
				t.Errorf("excused = %v, want %v: violations %+v, excused %v", got, tc.excused, rep.Violations, rep.Excused)
			}
		})
	}
}

// A sync status that could not be read, or that lists no node, fails
// sync-caught-up: before, a failed read left no status to flag and the
// check passed.
func TestCheckCaughtUp(t *testing.T) {
	caught := []pgsync.NodeStatus{{Node: "n1"}, {Node: "n2"}}
	for _, tc := range []struct {
		name string
		sts  []pgsync.NodeStatus
		err  error
		ok   bool
	}{
		{"every node caught up", caught, nil, true},
		{"a node lags", []pgsync.NodeStatus{{Node: "n1"}, {Node: "n2", Lag: 3}}, nil, false},
		{"the read timed out", nil, context.DeadlineExceeded, false},
		{"no node listed", nil, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := newReport(Options{})
			all := checkCaughtUp(rep, tc.sts, tc.err)
			if got := rep.ViolationCounts["sync-caught-up"] == 0; got != tc.ok || all != tc.ok {
				t.Errorf("caught up = %v (reported %v), want %v: %+v", got, all, tc.ok, rep.Violations)
			}
		})
	}
}

// Each order's confirmed rows are held against what its clients saw.
func TestCheckOrderRows(t *testing.T) {
	lim := func(q int64) map[string]int64 { return map[string]int64{"inv:stock:a:lim": q} }
	for _, tc := range []struct {
		name string
		rows map[string]map[string]int64
		want string // the violation kind, "" for none
	}{
		{"as seen", map[string]map[string]int64{"c0-1": lim(2)}, ""},
		{"a confirmed order short", map[string]map[string]int64{"c0-1": lim(1)}, "sync-seen-confirmed"},
		{"a confirmed order missing", nil, "sync-seen-confirmed"},
		{"a cancelled order confirmed", map[string]map[string]int64{"c0-1": lim(2), "c0-2": lim(1)}, "sync-seen-cancelled"},
		{"an order nobody confirmed", map[string]map[string]int64{"c0-1": lim(2), "c0-9": lim(1)}, "sync-never-confirmed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, orders, _, _ := fixture(t)
			orders = append(orders, &order{ID: "c0-9", Items: []item{{"a", "lim", 1}}})
			rep := newReport(Options{})
			checkOrderRows(rep, orders, tc.rows)
			if tc.want == "" && !rep.OK() || tc.want != "" && rep.ViolationCounts[tc.want] == 0 {
				t.Errorf("violations %+v, want %q", rep.Violations, tc.want)
			}
		})
	}
}

// A record's user is held against the one its client sent, and a user's
// confirmed units are counted for the client's user: a record that lost
// its user (and so its quota parts) or names another one lets the
// client's user past the limit unseen.
func TestCheckOrderUser(t *testing.T) {
	recOf := func(st *state) *inventory.OrderRecord {
		for _, ns := range st.nodes {
			if r := ns.orders["c0-1"]; r != nil {
				return r
			}
		}
		t.Fatal("no record of c0-1")
		return nil
	}
	for _, tc := range []struct {
		name   string
		mutate func(st *state)
		want   []string
	}{
		{"another user", func(st *state) { recOf(st).User = "u2" }, []string{"order-user"}},
		{"a refusal's fence names no user", func(st *state) {
			r := recOf(st)
			r.Status, r.Reason, r.User = inventory.OrderFailed, inventory.ReasonRefused, ""
		}, nil}, // other violations (the parts), but not order-user
		{"no user, no quota taken", func(st *state) {
			r := recOf(st)
			r.User, r.Parts = "", r.Parts[:1] // the stock part only
			delete(st.nodes["n2"].parts, "c0-1|t1|q|a|lim")
			delete(st.nodes["n2"].quota, "inv:quota:a:3:lim:u1")
		}, []string{"order-user", "quota-balance"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, orders, skus, homes := fixture(t)
			tc.mutate(st)
			rep := newReport(Options{})
			check(rep, st, orders, skus, homes)
			for _, k := range tc.want {
				if rep.ViolationCounts[k] == 0 {
					t.Errorf("no %s violation; got %+v", k, rep.Violations)
				}
			}
			if tc.want == nil && rep.ViolationCounts["order-user"] > 0 {
				t.Errorf("order-user violation: %+v", rep.Violations)
			}
		})
	}
}
