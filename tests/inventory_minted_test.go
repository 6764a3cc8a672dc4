package tests

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/inventory"
)

// TestInvMintedIDsSurviveHomeOutage: while a node is down, order ids
// minted by NewOrderID name only the healthy nodes, so every order whose
// stock is on the healthy nodes reserves, confirms and cancels; made-up
// ids whose ring home is the dead node are refused with ErrUnavailable.
// After the node comes back (AOF on, so it keeps what it had), every
// minted order is still decided on the node its id names: retries return
// the same receipts, repeated Confirm/Cancel keep the first decision, the
// returned node holds no record of any of them, and no unit is lost or
// taken twice.
func TestInvMintedIDsSurviveHomeOutage(t *testing.T) {
	t.Parallel()
	c := newInvCluster(t, invOpts{aof: true, routes: map[string][]string{"all": {"n1", "n2", "n3"}}})
	const (
		dead   = "n1"
		loaded = 3000
	)
	ctx := invCtx(t, 60*time.Second)
	c.load("all", "k", loaded, 0)
	item := []inventory.Item{invItem("all", "k", 1)}

	// Minted ids spread over every node while all are up; one order
	// minted on the doomed node is reserved before the kill.
	seen := map[string]int{}
	var before string
	for i := 0; i < 300; i++ {
		id, err := c.inv.NewOrderID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		name, ok := inventory.MintedHome(id)
		if !ok || c.home(id) != name {
			t.Fatalf("minted id %q: MintedHome = %q, %v; home %s", id, name, ok, c.home(id))
		}
		seen[name]++
		if name == dead && before == "" {
			before = id
		}
	}
	for _, n := range c.names {
		if seen[n] < 50 {
			t.Fatalf("minted ids by node %v: %s got fewer than 50 of 300", seen, n)
		}
	}
	if _, err := c.inv.Reserve(ctx, before, item, "", time.Minute); err != nil {
		t.Fatalf("Reserve %s before the kill: %v", before, err)
	}

	c.srv[dead].Kill()
	c.waitDown(dead, 5*time.Second)

	type placed struct {
		id       string
		receipts []inventory.Receipt
		fate     string // "reserved", "confirmed", "cancelled"
	}
	var orders []placed
	for i := 0; i < 120; i++ {
		id, err := c.inv.NewOrderID(ctx)
		if err != nil {
			t.Fatalf("NewOrderID while %s is down: %v", dead, err)
		}
		if c.home(id) == dead {
			t.Fatalf("NewOrderID named %s while it is down: %q", dead, id)
		}
		res, err := c.inv.Reserve(ctx, id, item, "", time.Minute)
		if err != nil {
			t.Fatalf("Reserve %s (home %s) while %s is down: %v", id, c.home(id), dead, err)
		}
		p := placed{id: id, receipts: res.Receipts, fate: "reserved"}
		switch i % 3 {
		case 1:
			if _, err := c.inv.Confirm(ctx, id); err != nil {
				t.Fatalf("Confirm %s while %s is down: %v", id, dead, err)
			}
			p.fate = "confirmed"
		case 2:
			if _, err := c.inv.Cancel(ctx, id); err != nil {
				t.Fatalf("Cancel %s while %s is down: %v", id, dead, err)
			}
			p.fate = "cancelled"
		}
		orders = append(orders, p)
	}
	// The contract for ids the caller made up is unchanged: their home is
	// hashed from the id, and an order homed on the dead node is refused.
	own := c.orderIDWith("own", func(id string) bool { return c.home(id) == dead })
	if _, err := c.inv.Reserve(ctx, own, item, "", time.Minute); !errors.Is(err, inventory.ErrUnavailable) {
		t.Fatalf("Reserve %s (made-up id homed on %s) while it is down: %v, want ErrUnavailable", own, dead, err)
	}
	if _, err := c.inv.Confirm(ctx, before); !errors.Is(err, inventory.ErrUnavailable) {
		t.Fatalf("Confirm %s (minted on %s) while it is down: %v, want ErrUnavailable", before, dead, err)
	}

	c.srv[dead].Restart()
	c.waitUsable(dead, 10*time.Second)

	for _, o := range orders {
		res, err := c.inv.Reserve(ctx, o.id, item, "", time.Minute)
		switch o.fate {
		case "cancelled":
			if !errors.Is(err, inventory.ErrCancelled) {
				t.Fatalf("retry of cancelled %s after %s returned: %v, want ErrCancelled", o.id, dead, err)
			}
			if out, err := c.inv.Cancel(ctx, o.id); err != nil || out.Status != inventory.StatusCancelled {
				t.Fatalf("Cancel %s again: %+v, %v", o.id, out, err)
			}
		default:
			if err != nil {
				t.Fatalf("retry of %s %s after %s returned: %v", o.fate, o.id, dead, err)
			}
			if fmt.Sprint(res.Receipts) != fmt.Sprint(o.receipts) {
				t.Fatalf("retry of %s returned %v, first attempt %v", o.id, res.Receipts, o.receipts)
			}
			out, err := c.inv.Confirm(ctx, o.id)
			if err != nil || out.Status != inventory.StatusConfirmed {
				t.Fatalf("Confirm %s (%s) after %s returned: %+v, %v", o.id, o.fate, dead, out, err)
			}
		}
		if n := c.clients[dead].Exists(ctx, "inv:order:"+o.id).Val(); n != 0 {
			t.Fatalf("order %s (home %s) has a record on %s", o.id, c.home(o.id), dead)
		}
	}
	if _, err := c.inv.Confirm(ctx, before); err != nil {
		t.Fatalf("Confirm %s on %s after it came back: %v", before, dead, err)
	}

	// Every order but the cancelled third is confirmed now, plus the one
	// reserved before the kill: exactly that many units left the stock.
	lvl, err := c.inv.GetStock(ctx, "all", "k")
	if err != nil {
		t.Fatal(err)
	}
	want := int64(len(orders)-len(orders)/3) + 1
	if lvl.Confirmed != want || lvl.Reserved != 0 || lvl.Available+lvl.Confirmed != loaded || lvl.Loaded != loaded {
		t.Fatalf("stock after the outage: %+v, want %d confirmed, nothing reserved, %d loaded", lvl, want, loaded)
	}
}

// TestInvMintedIDWithItems: given the order's items, NewOrderID names the
// usable node in the most of their routes, so an order on a one-node
// route is reserved by one script on that node (its record next to its
// part); with that node down the id names another node; an unknown
// route is refused naming the item.
func TestInvMintedIDWithItems(t *testing.T) {
	t.Parallel()
	c := newInvCluster(t, invOpts{routes: map[string][]string{"all": {"n1", "n2", "n3"}, "solo": {"n3"}}})
	ctx := invCtx(t, 30*time.Second)
	c.load("solo", "hot", 1000, 0)
	c.load("all", "k", 1000, 0)
	hot := []inventory.Item{invItem("solo", "hot", 1)}
	local := c.inv.Stats().LocalReservations
	for i := 0; i < 30; i++ {
		id, err := c.inv.NewOrderID(ctx, hot...)
		if err != nil {
			t.Fatal(err)
		}
		if c.home(id) != "n3" {
			t.Fatalf("NewOrderID(solo item) = %q, home %s; want n3, the route's only node", id, c.home(id))
		}
		res, err := c.inv.Reserve(ctx, id, hot, "", time.Minute)
		if err != nil || len(res.Receipts) != 1 || res.Receipts[0].Node != "n3" {
			t.Fatalf("Reserve %s = %+v, %v", id, res, err)
		}
		if n := c.clients["n3"].Exists(ctx, "inv:order:"+id).Val(); n != 1 {
			t.Fatalf("order %s has no record on n3", id)
		}
	}
	if got := c.inv.Stats().LocalReservations - local; got != 30 {
		t.Fatalf("%d of 30 orders minted next to their stock were reserved by one script, want 30", got)
	}
	// Items over every node spread like ids minted without items.
	seen := map[string]int{}
	for i := 0; i < 150; i++ {
		id, err := c.inv.NewOrderID(ctx, invItem("all", "k", 1), invItem("solo", "hot", 1))
		if err != nil {
			t.Fatal(err)
		}
		seen[c.home(id)]++
	}
	if seen["n3"] != 150 {
		t.Fatalf("ids for an order of all+solo by node: %v, want every one on n3 (the only node in both routes)", seen)
	}
	if _, err := c.inv.NewOrderID(ctx, invItem("all", "k", 1), invItem("nope", "k", 1)); !errors.Is(err, inventory.ErrInvalid) || !strings.Contains(err.Error(), "items[1]") {
		t.Fatalf("NewOrderID with an unknown route = %v, want ErrInvalid naming items[1]", err)
	}

	c.srv["n3"].Kill()
	c.waitDown("n3", 5*time.Second)
	id, err := c.inv.NewOrderID(ctx, hot...)
	if err != nil || c.home(id) == "n3" {
		t.Fatalf("NewOrderID(solo item) with n3 down = %q (home %s), %v; want an id on a usable node", id, c.home(id), err)
	}
	if _, err := c.inv.Reserve(ctx, id, hot, "", time.Minute); !errors.Is(err, inventory.ErrUnavailable) {
		t.Fatalf("Reserve of an item whose only node is down = %v, want ErrUnavailable", err)
	}
}
