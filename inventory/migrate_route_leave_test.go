package inventory

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/shardis/shardis/topology"
)

// TestApplyMovesTheStockOfANodeThatLeavesARoute removes n3 from route r
// while n3 stays in the inventory server (it still serves route s), with
// an order holding units on every node of r in flight: the old topology's
// instance reserved all 300 units of r/z, the apply runs, and the new
// topology's instance cancels the order. Every unit of r/z must then be
// reservable on r's nodes again: n3 is no longer a node of r, so units
// left on its r/z hash (its share of the load, and the units the cancel
// gave back there) can be taken and given back by nobody.
func TestApplyMovesTheStockOfANodeThatLeavesARoute(t *testing.T) {
	t.Parallel()
	srvs, addrs := startNamed(t, 3)
	old := leaveConfig(t, addrs, map[string][]string{"r": {"n1", "n2", "n3"}, "s": {"n3"}})
	next := leaveConfig(t, addrs, map[string][]string{"r": {"n1", "n2"}, "s": {"n3"}})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	p1 := openInv(t, old, Options{})
	if _, err := p1.LoadStock(ctx, "r", "z", 300, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := p1.LoadStock(ctx, "r", "idle", 300, 0); err != nil {
		t.Fatal(err)
	}
	res, err := p1.Reserve(ctx, "held", []Item{{Route: "r", SKU: "z", Quantity: 300}}, "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	onN3 := int64(0)
	for _, rc := range res.Receipts {
		if rc.Node == "n3" {
			onN3 += rc.Quantity
		}
	}
	t.Logf("order held reserved 300 of r/z, %d of them on n3", onN3)

	apply := func() topology.Report {
		t.Helper()
		rep, err := ApplyTopology(ctx, ApplyOptions{To: next, From: old, Wait: 2 * time.Second, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatalf("apply: %v (report %+v)", err, rep)
		}
		return rep
	}
	rep := apply()
	t.Logf("apply: phase %s, joined %v, left %v, stock moved %d, waiting %d", rep.Phase, rep.Joined, rep.Left, rep.StockMoved, rep.Waiting)

	p2 := openInv(t, next, Options{})
	if out, err := p2.Cancel(ctx, "held"); err != nil || out.Status != StatusCancelled {
		t.Fatalf("Cancel of the held order = %+v, %v", out, err)
	}
	// the operator runs the apply again until it is stable (a no-op once it is)
	for i := 0; rep.Phase != topology.PhaseStable; i++ {
		if i == 10 {
			t.Fatalf("apply still %s after %d reruns: %+v", rep.Phase, i, rep)
		}
		rep = apply()
	}

	for _, sku := range []string{"z", "idle"} {
		lvl, err := p2.GetStock(ctx, "r", sku)
		if err != nil {
			t.Fatal(err)
		}
		n3, err := srvs[2].Client(t).HMGet(ctx, stockKey("r", sku), "available", "reserved").Result()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("r/%s on r's nodes: available %d reserved %d loaded %d; left on n3: available %v reserved %v",
			sku, lvl.Available, lvl.Reserved, lvl.Loaded, n3[0], n3[1])
		if lvl.Available != 300 {
			t.Errorf("r/%s: %d of 300 units available on route r's nodes after the apply, nothing sold: the rest is stranded on n3", sku, lvl.Available)
		}
		if _, err := p2.Reserve(ctx, "all-"+sku, []Item{{Route: "r", SKU: sku, Quantity: 300}}, "", time.Minute); err != nil {
			t.Errorf("Reserve of all 300 units of r/%s after the apply: %v", sku, err)
		}
	}
}

// TestApplyMovesTheStockOfTwoLeavingNodes removes n3 and n4 from the
// server in one apply (route r over n1..n4 becomes n1, n2). Each leaving
// node's r/z hash is transferred to the SKU's home in the new route, the
// same node for both: each transfer must land, so the route keeps every
// unit loaded.
func TestApplyMovesTheStockOfTwoLeavingNodes(t *testing.T) {
	srvs, addrs := startNamed(t, 4)
	old := leaveConfig(t, addrs, map[string][]string{"r": {"n1", "n2", "n3", "n4"}})
	next := leaveConfig(t, addrs, map[string][]string{"r": {"n1", "n2"}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	p1 := openInv(t, old, Options{})
	if _, err := p1.LoadStock(ctx, "r", "z", 400, 0); err != nil {
		t.Fatal(err)
	}
	rep, err := ApplyTopology(ctx, ApplyOptions{To: next, From: old, Wait: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil || rep.Phase != topology.PhaseStable {
		t.Fatalf("apply: %+v, %v", rep, err)
	}
	t.Logf("apply: phase %s, left %v, stock moved %d", rep.Phase, rep.Left, rep.StockMoved)
	p2 := openInv(t, next, Options{})
	lvl, err := p2.GetStock(ctx, "r", "z")
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, s := range srvs[2:] {
		v, err := s.Client(t).HMGet(ctx, stockKey("r", "z"), "available", "loaded").Result()
		if err != nil {
			t.Fatal(err)
		}
		left = append(left, fmt.Sprintf("available %v loaded %v", v[0], v[1]))
	}
	t.Logf("r/z on n1+n2: available %d loaded %d; on n3, n4: %v", lvl.Available, lvl.Loaded, left)
	if lvl.Available != 400 || lvl.Loaded != 400 {
		t.Errorf("r/z after removing n3 and n4: available %d, loaded %d on the route, want 400 and 400 (nothing sold)", lvl.Available, lvl.Loaded)
	}
	if _, err := p2.Reserve(ctx, "all", []Item{{Route: "r", SKU: "z", Quantity: 400}}, "", time.Minute); err != nil {
		t.Errorf("Reserve of all 400 units after the apply: %v", err)
	}
}
