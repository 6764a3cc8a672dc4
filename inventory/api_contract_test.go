package inventory

import (
	"errors"
	"strings"
	"testing"
)

// TestLimitOnlyChangeOnADrainedRoute: a LoadStock of 0 units with a limit
// changes only the limit, which every node of the route takes, drained
// ones too (a drained node is usable and keeps its users' quota counters).
// Before, the call looked for nodes to spread stock over first and, with
// every node of the route drained, refused with ErrUnavailable ("no
// usable node"), which says a retry may succeed: it never could until a
// node was enabled again (found by a review).
func TestLimitOnlyChangeOnADrainedRoute(t *testing.T) {
	e := newStagedEnv(t) // route a = {n1}
	if err := e.r.SetRouteEnabled(e.ctx, "n1", "inventory", "a", false); err != nil {
		t.Fatal(err)
	}
	lvl, err := e.inv.LoadStock(e.ctx, "a", "s", 0, 2)
	if err != nil {
		t.Fatalf("LoadStock(qty 0, limit 2) on route a, whose only node n1 is drained: %v", err)
	}
	if lvl.Limit != 2 {
		t.Errorf("limit %d after the change, want 2", lvl.Limit)
	}
	// stock still needs an enabled node
	if _, err := e.inv.LoadStock(e.ctx, "a", "s", 5, -1); !errors.Is(err, ErrUnavailable) {
		t.Errorf("LoadStock(5 units) on a drained route = %v, want ErrUnavailable", err)
	}
}

// TestOrderReadOfTheWrongTypeIsCorrupt: an order key holding neither a
// string nor a hash is ErrCorrupt naming the key, as a part key's is
// (PartRead.Fields). Before, OrderRead.Fields returned the bare WRONGTYPE
// reply, which callers classed as a node failure (found by a review).
func TestOrderReadOfTheWrongTypeIsCorrupt(t *testing.T) {
	e := newStagedEnv(t)
	c := e.clients["n1"]
	if err := c.RPush(e.ctx, orderKey("o-wt"), "x").Err(); err != nil {
		t.Fatal(err)
	}
	_, err := ReadOrder(e.ctx, c, "o-wt").Fields()
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), orderKey("o-wt")) {
		t.Fatalf("OrderRead.Fields of an order key holding a list = %v; want ErrCorrupt naming the key", err)
	}
}
