package tests

import (
	"errors"
	"testing"
	"time"

	"github.com/shardis/shardis/inventory"
)

// One-script reservations (inventory/local.go): an order whose items all
// go first to its home node, and which that node can meet, is reserved by
// one script there; everything else takes the general path with the same
// answers.
func TestInvLocalReservation(t *testing.T) {
	c := newInvCluster(t, invOpts{})
	ctx := invCtx(t, 20*time.Second)
	c.load("r", "s", 300, 0)   // 100 per node
	c.load("r", "lim", 300, 2) // per-user limit 2
	c.load("r", "few", 3, 0)   // 1 per node
	local := func() int64 { return c.inv.Stats().LocalReservations }
	onHome := func(prefix, sku string) string {
		return c.orderIDWith(prefix, func(id string) bool { return c.first("r", id, sku) == c.home(id) })
	}

	id := onHome("loc", "s")
	before := local()
	res, err := c.inv.Reserve(ctx, id, []inventory.Item{invItem("r", "s", 2), invItem("r", "s", 3)}, "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if local() != before+1 {
		t.Fatalf("order %s (items first on its home %s) did not take the one-script path", id, c.home(id))
	}
	for _, r := range res.Receipts {
		if r.Node != c.home(id) || r.Offset == 0 || r.RedoLog == "" {
			t.Fatalf("receipt %+v, want on home %s with a redo offset", r, c.home(id))
		}
	}
	again, err := c.inv.Reserve(ctx, id, []inventory.Item{invItem("r", "s", 2), invItem("r", "s", 3)}, "", time.Minute)
	if err != nil || len(again.Receipts) != len(res.Receipts) || again.Receipts[0] != res.Receipts[0] || local() != before+1 {
		t.Fatalf("retry = %+v, %v; want the same receipts and nothing taken", again, err)
	}
	if _, err := c.inv.Reserve(ctx, id, []inventory.Item{invItem("r", "s", 1)}, "", time.Minute); !errors.Is(err, inventory.ErrOrderMismatch) {
		t.Fatalf("reuse with other items = %v, want ErrOrderMismatch", err)
	}
	if out, err := c.inv.Confirm(ctx, id); err != nil || out.Status != inventory.StatusConfirmed || out.PendingParts != 0 {
		t.Fatalf("Confirm = %+v, %v", out, err)
	}
	if lvl := checkInvariant(t, c.inv, "r", "s", 300); lvl.Confirmed != 5 || lvl.Reserved != 0 {
		t.Fatalf("stock after confirming 5 = %+v", lvl)
	}

	// A tombstone is respected.
	tomb := onHome("tomb", "s")
	if _, err := c.inv.Cancel(ctx, tomb); err != nil {
		t.Fatal(err)
	}
	if _, err := c.inv.Reserve(ctx, tomb, []inventory.Item{invItem("r", "s", 1)}, "", time.Minute); !errors.Is(err, inventory.ErrCancelled) {
		t.Fatalf("Reserve of a tombstoned order = %v, want ErrCancelled", err)
	}

	// Short on the home node: the general path splits it.
	short := onHome("short", "few")
	before = local()
	res, err = c.inv.Reserve(ctx, short, []inventory.Item{invItem("r", "few", 2)}, "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if qty, nodes := invSumReceipts(res.Receipts); qty["few"] != 2 || len(nodes) != 2 || local() != before {
		t.Fatalf("order short on its home: receipts %+v (local %d→%d), want 2 units from 2 nodes by the general path", res.Receipts, before, local())
	}

	// A limited SKU without a user is refused as before.
	anon := onHome("anon", "lim")
	if _, err := c.inv.Reserve(ctx, anon, []inventory.Item{invItem("r", "lim", 1)}, "", time.Minute); !errors.Is(err, inventory.ErrLimitExceeded) {
		t.Fatalf("anonymous order of a limited SKU = %v, want ErrLimitExceeded", err)
	}

	// A user whose quota node is the home node too: one script, and the
	// limit holds.
	set, _ := c.r.Set(invServer, "r")
	var user, first string
	for i := 0; user == ""; i++ {
		u := "user" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		q := set.Nodes()[set.Ring().Home("user:"+u)].Name()
		cand := c.orderIDWith("q"+u, func(id string) bool { return c.first("r", id, "lim") == c.home(id) && c.home(id) == q })
		user, first = u, cand
	}
	before = local()
	if _, err := c.inv.Reserve(ctx, first, []inventory.Item{invItem("r", "lim", 2)}, user, time.Minute); err != nil {
		t.Fatal(err)
	}
	if local() != before+1 {
		t.Fatalf("order %s of user %s (quota and items on its home) did not take the one-script path", first, user)
	}
	more := c.orderIDWith("m"+user, func(id string) bool { return c.first("r", id, "lim") == c.home(id) && c.home(id) == c.home(first) })
	if _, err := c.inv.Reserve(ctx, more, []inventory.Item{invItem("r", "lim", 1)}, user, time.Minute); !errors.Is(err, inventory.ErrLimitExceeded) {
		t.Fatalf("a third unit for user %s (limit 2) = %v, want ErrLimitExceeded", user, err)
	}
	checkNoPending(t, c.clients, []string{more})

	// Stock counts near 2^53 (the most loadScript accepts) stay exact: the
	// one-script path writes the counters' new values, not increments.
	big := onHome("big", "big")
	home := c.home(big)
	const huge = 9007199254739999
	for name, cl := range c.clients {
		avail := int64(0)
		if name == home {
			avail = huge
		}
		if err := cl.HSet(ctx, inventory.StockKey("r", "big"), "available", avail, "reserved", 7, "confirmed", 0, "loaded", avail).Err(); err != nil {
			t.Fatal(err)
		}
	}
	before = local()
	if _, err := c.inv.Reserve(ctx, big, []inventory.Item{invItem("r", "big", 3)}, "", time.Minute); err != nil {
		t.Fatal(err)
	}
	if local() != before+1 {
		t.Fatalf("order %s did not take the one-script path", big)
	}
	got, err := c.clients[home].HMGet(ctx, inventory.StockKey("r", "big"), "available", "reserved").Result()
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != "9007199254739996" || got[1] != "10" {
		t.Fatalf("stock on %s after taking 3 of %d (7 reserved): available %v, reserved %v; want 9007199254739996, 10", home, int64(huge), got[0], got[1])
	}
	// The same for the other paths' take script (reserveScript): an
	// order whose record lives on another node.
	away := c.orderIDWith("away", func(id string) bool { return c.home(id) != home })
	if _, err := c.inv.Reserve(ctx, away, []inventory.Item{invItem("r", "big", 2)}, "", time.Minute); err != nil {
		t.Fatal(err)
	}
	got, err = c.clients[home].HMGet(ctx, inventory.StockKey("r", "big"), "available", "reserved").Result()
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != "9007199254739994" || got[1] != "12" {
		t.Fatalf("stock on %s after taking 2 more by the take script: available %v, reserved %v; want 9007199254739994, 12", home, got[0], got[1])
	}
}
