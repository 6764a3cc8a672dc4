package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/topology"
)

// reserveOnN4 reserves one unit of "s" of route "r" through c's inventory
// for an order homed on n1 whose part is on n4, held for hold, and
// returns the order id. Items go to the order's home node first, so n1 is
// drained for the reserve (its route disabled, then enabled again) and
// the part goes to the next candidate, which the id is chosen for: n4.
func reserveOnN4(t *testing.T, c *invCluster, ctx context.Context, hold time.Duration) string {
	t.Helper()
	set, err := c.r.Set(invServer, "r")
	if err != nil {
		t.Fatal(err)
	}
	var id string
	for i := 0; id == ""; i++ {
		h := fmt.Sprintf("h-%d", i)
		if c.home(h) != "n1" {
			continue
		}
		for _, n := range set.Candidates(h + "s") {
			if n.Name() != "n1" {
				if n.Name() == "n4" {
					id = h
				}
				break
			}
		}
	}
	if err := c.r.SetRouteEnabled(ctx, "n1", invServer, "r", false); err != nil {
		t.Fatal(err)
	}
	res, err := c.inv.Reserve(ctx, id, []inventory.Item{invItem("r", "s", 1)}, "", hold)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Receipts) != 1 || res.Receipts[0].Node != "n4" {
		t.Fatalf("receipts of %s = %+v, want its part on n4", id, res.Receipts)
	}
	if err := c.r.SetRouteEnabled(ctx, "n1", invServer, "r", true); err != nil {
		t.Fatal(err)
	}
	return id
}

// A part pending on a leaving node holds the node's stock from moving
// until the apply settles it. The apply's pass that settles it moves that
// stock too, and counts what waits after the settle: an apply whose Wait
// is over by the end of that pass ends stable. It used to count what
// waited before the settle, end migrating with Waiting 1 and nothing left
// to wait for, and need a rerun (TestTopologyRemoveNode failed so on a
// loaded machine, its Wait passing between the pass that settled its
// part and the next one).
func TestTopologyLeavingPartSettledAndItsStockMovedInOnePass(t *testing.T) {
	t.Parallel()
	c := newInvCluster(t, invOpts{nodes: 4, health: &topoRemoveHealth})
	c.load("r", "s", 400, 0)
	ctx := invCtx(t, 60*time.Second)
	id := reserveOnN4(t, c, ctx, time.Second) // never confirmed: its part is cancelled once due
	n4, err := c.r.Node("n4")
	if err != nil {
		t.Fatal(err)
	}
	// Due 1 s after the hold (partGrace), by n4's clock: the apply's first
	// pass finds it due.
	deadline := time.Now().Add(20 * time.Second)
	for {
		due, err := c.inv.DueParts(ctx, n4, 10)
		if err == nil && len(due) == 1 && due[0].OrderID == id {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the part of %s on n4 not due 20 s after a 1 s hold: %+v, %v", id, due, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	to := withoutNode(t, c.cfg, "n4", map[string][]string{"r": {"n1", "n2", "n3"}})
	// A Wait of 1 ns is over by the end of the first pass.
	rep := applyTopology(t, to, c.cfg, time.Nanosecond, topology.PhaseStable)
	if len(rep.Left) != 1 || rep.Left[0] != "n4" || rep.PartsSettled != 1 || rep.StockMoved != 1 || rep.Waiting != 0 {
		t.Fatalf("report = %+v, want n4 leaving with its part settled and its stock moved, nothing waiting", rep)
	}
	_, inv := c.newInventoryFor(t, to, nil)
	waitReady(t, inv)
	lvl, err := inv.GetStock(ctx, "r", "s")
	if err != nil {
		t.Fatal(err)
	}
	if lvl.Loaded != 400 || lvl.Available != 400 || lvl.Reserved != 0 || lvl.Confirmed != 0 {
		t.Fatalf("s over n1..n3 after removing n4 = %+v, want all 400 available (the order expired)", lvl)
	}
}
