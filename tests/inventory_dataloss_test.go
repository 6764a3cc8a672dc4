package tests

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/inventory"
)

// Confirm of an order whose part vanished from its node (the node lost
// data) is not a success: it wraps ErrDataLoss and names the part, every
// time it is asked (issue 9, item 2).
func TestInvConfirmMissingPartIsDataLoss(t *testing.T) {
	t.Parallel()
	c := newInvCluster(t, invOpts{})
	ctx := invCtx(t, 20*time.Second)
	c.load("r", "dl", 30, 0)
	// with a user whose quota node is not the order's home: not the local
	// path, so its part has a record of its own (a stock part the local
	// path takes is inline, held by its order's record: inventory/inline.go;
	// the check below fails if this order ever took that path)
	res, err := c.inv.Reserve(ctx, "dl-1", []inventory.Item{invItem("r", "dl", 2)}, "u-dl", 0)
	if err != nil {
		t.Fatal(err)
	}
	victim := res.Receipts[0].Node
	// the part vanishes after the order's commit: before it, a reader may
	// not tell a lost part from one still on its way (ErrInProgress while
	// the attempt's lease runs, inventory/staged.go)
	c.awaitCommitted(ctx, "dl-1")
	keys, err := c.clients[victim].Keys(ctx, "inv:part:dl-1|*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("part keys of dl-1 on %s: %v %v", victim, keys, err)
	}
	if err := c.clients[victim].Del(ctx, keys...).Err(); err != nil { // what a restore from an older snapshot does
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		out, err := c.inv.Confirm(ctx, "dl-1")
		if !errors.Is(err, inventory.ErrDataLoss) || !strings.Contains(err.Error(), victim+"/dl-1|") {
			t.Fatalf("Confirm %d of an order whose part is gone: %+v, %v; want ErrDataLoss naming %s's part", i+1, out, err, victim)
		}
	}
}
