package inventory

import (
	"testing"

	"github.com/shardis/shardis/config"
)

// TestGetStockLimitOfFirstNode: StockLevel.Limit's doc: "the
// per-user limit (0 = none), as the first reachable node holding the SKU
// reports it". When the first node of the route holds the SKU with no
// limit (a removal reached it) and a later one still holds an older
// limit (the removal missed it, ConvergeLimits not run yet), Limit must
// be the first node's 0.
func TestGetStockLimitOfFirstNode(t *testing.T) {
	e := newStagedEnvConfig(t, Options{}, func(c *config.Config) {
		c.Servers["inventory"].Routes["a"] = []string{"n1", "n2"}
	})
	if _, err := e.inv.LoadStock(e.ctx, "a", "x", 10, 5); err != nil {
		t.Fatal(err)
	}
	lvl, err := e.inv.GetStock(e.ctx, "a", "x")
	if err != nil {
		t.Fatal(err)
	}
	first := lvl.Nodes[0].Node
	// the limit removal reached the first node only
	if err := e.clients[first].HSet(e.ctx, StockKey("a", "x"), "limit", 0).Err(); err != nil {
		t.Fatal(err)
	}
	lvl, err = e.inv.GetStock(e.ctx, "a", "x")
	if err != nil {
		t.Fatal(err)
	}
	if !lvl.Nodes[0].Reachable || lvl.Nodes[0].Loaded == 0 || lvl.Nodes[0].Limit != 0 {
		t.Fatalf("first node %+v: want reachable, holding the SKU, limit 0", lvl.Nodes[0])
	}
	if lvl.Limit != lvl.Nodes[0].Limit {
		t.Errorf("StockLevel.Limit = %d; the first reachable node holding the SKU (%s) reports %d (nodes: %+v)",
			lvl.Limit, first, lvl.Nodes[0].Limit, lvl.Nodes)
	}
}
