package tests

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/inventory"
)

// TestInvReserveConcurrent200: 200 concurrent single-unit reserves of
// distinct orders on 100 units over 3 nodes: exactly 100 win.
func TestInvReserveConcurrent200(t *testing.T) {
	c := newInvCluster(t, invOpts{})
	const loaded = 100
	c.load("r", "hot", loaded, 0)
	ctx := invCtx(t, 60*time.Second)

	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		won    []string
		short  int
		orders []string
	)
	start := make(chan struct{})
	for i := 0; i < 200; i++ {
		id := fmt.Sprintf("c200-%d", i)
		orders = append(orders, id)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res, err := c.inv.Reserve(ctx, id, []inventory.Item{invItem("r", "hot", 1)}, "", time.Minute)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				if q, _ := invSumReceipts(res.Receipts); q["hot"] != 1 || len(res.Receipts) != 1 {
					t.Errorf("order %s: receipts %+v, want one receipt of 1 unit", id, res.Receipts)
				}
				won = append(won, id)
			case errors.Is(err, inventory.ErrInsufficientStock):
				if !strings.Contains(err.Error(), "hot") {
					t.Errorf("order %s: error %q does not name the SKU", id, err)
				}
				short++
			default:
				t.Errorf("order %s: unexpected error: %v", id, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(won) != 100 || short != 100 {
		t.Fatalf("succeeded %d, insufficient %d; want 100 and 100", len(won), short)
	}
	lvl := checkInvariant(t, c.inv, "r", "hot", loaded)
	if lvl.Reserved != 100 || lvl.Available != 0 || lvl.Confirmed != 0 {
		t.Fatalf("after the rush: %+v, want reserved 100, available 0", lvl)
	}
	for _, ns := range lvl.Nodes {
		if ns.Reserved != ns.Loaded {
			t.Errorf("node %s: reserved %d of loaded %d, want every unit reserved", ns.Node, ns.Reserved, ns.Loaded)
		}
	}
	// Losers took nothing: no part of theirs is pending anywhere.
	var lost []string
	wonSet := map[string]bool{}
	for _, id := range won {
		wonSet[id] = true
	}
	for _, id := range orders {
		if !wonSet[id] {
			lost = append(lost, id)
		}
	}
	checkNoPending(t, c.clients, lost)

	// Half confirmed, half cancelled.
	for i, id := range won {
		var err error
		if i%2 == 0 {
			_, err = c.inv.Confirm(ctx, id)
		} else {
			_, err = c.inv.Cancel(ctx, id)
		}
		if err != nil {
			t.Fatalf("settling %s: %v", id, err)
		}
	}
	lvl = checkInvariant(t, c.inv, "r", "hot", loaded)
	if lvl.Confirmed != 50 || lvl.Available != 50 || lvl.Reserved != 0 {
		t.Fatalf("after settling: %+v, want confirmed 50, available 50", lvl)
	}
	checkNoPending(t, c.clients, orders)
	invCheckDecisions(t, c, orders)
}

// TestInvReserveSameOrderRetried: one order id reserved 20 times at once
// takes stock once, and every call gets the same receipts.
func TestInvReserveSameOrderRetried(t *testing.T) {
	c := newInvCluster(t, invOpts{})
	const loaded = 30
	c.load("r", "retry", loaded, 0)
	ctx := invCtx(t, 30*time.Second)
	items := []inventory.Item{invItem("r", "retry", 15)} // more than a node's share of 10

	results := make([]inventory.Reservation, 20)
	errs := make([]error, 20)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = c.inv.Reserve(ctx, "retry-1", items, "u1", time.Minute)
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	for i := range results {
		if !reflect.DeepEqual(results[i], results[0]) {
			t.Fatalf("call %d returned %+v, call 0 returned %+v: receipts differ", i, results[i], results[0])
		}
	}
	if q, nodes := invSumReceipts(results[0].Receipts); q["retry"] != 15 || len(nodes) < 2 {
		t.Fatalf("receipts %+v: want 15 units over >= 2 nodes", results[0].Receipts)
	}
	lvl := checkInvariant(t, c.inv, "r", "retry", loaded)
	if lvl.Reserved != 15 || lvl.Available != 15 {
		t.Fatalf("stock %+v: want reserved 15 (taken once), available 15", lvl)
	}
	// One attempt only: every part of the order carries the same token.
	parts, err := invParts(ctx, c.clients, []string{"retry-1"})
	if err != nil {
		t.Fatal(err)
	}
	// Stock parts match the receipts; the user's quota part (counted even
	// without a limit) is one more.
	stock := slices.DeleteFunc(slices.Clone(parts), func(p invPart) bool { return p.kind != "s" })
	if len(stock) != len(results[0].Receipts) || len(parts) != len(stock)+1 {
		t.Fatalf("parts on the nodes: %v; want exactly the %d receipts and one quota part", parts, len(results[0].Receipts))
	}
	for _, p := range parts {
		if p.token != parts[0].token || p.state != "pending" {
			t.Fatalf("parts %v: want one attempt, all pending", parts)
		}
	}
	// A retry after the fact still returns the same reservation.
	again, err := c.inv.Reserve(ctx, "retry-1", items, "u1", time.Minute)
	if err != nil || !reflect.DeepEqual(again, results[0]) {
		t.Fatalf("later retry: %+v, %v; want %+v", again, err, results[0])
	}
	if _, err := c.inv.Confirm(ctx, "retry-1"); err != nil {
		t.Fatalf("Confirm: %v", err)
	}
	lvl = checkInvariant(t, c.inv, "r", "retry", loaded)
	if lvl.Confirmed != 15 || lvl.Reserved != 0 {
		t.Fatalf("after Confirm: %+v, want confirmed 15", lvl)
	}
	checkNoPending(t, c.clients, []string{"retry-1"})
	invCheckDecisions(t, c, []string{"retry-1"})
}

// TestInvReserveMultiItemShort: an order whose last item is short fails
// with ErrInsufficientStock naming that SKU, and the items taken before
// are back at once, without a reconciler.
func TestInvReserveMultiItemShort(t *testing.T) {
	c := newInvCluster(t, invOpts{})
	ctx := invCtx(t, 30*time.Second)
	c.load("r", "mi-a", 30, 0)
	c.load("r", "mi-b", 30, 0)
	c.load("r", "mi-short", 5, 0) // 2+2+1 over the nodes
	items := []inventory.Item{invItem("r", "mi-a", 2), invItem("r", "mi-b", 12), invItem("r", "mi-short", 6)}

	_, err := c.inv.Reserve(ctx, "multi-1", items, "", time.Minute)
	if !errors.Is(err, inventory.ErrInsufficientStock) {
		t.Fatalf("Reserve: err = %v, want ErrInsufficientStock", err)
	}
	if !strings.Contains(err.Error(), "mi-short") {
		t.Fatalf("Reserve error %q does not name SKU mi-short", err)
	}
	for _, s := range []struct {
		sku    string
		loaded int64
	}{{"mi-a", 30}, {"mi-b", 30}, {"mi-short", 5}} {
		lvl := checkInvariant(t, c.inv, "r", s.sku, s.loaded)
		if lvl.Available != s.loaded || lvl.Reserved != 0 {
			t.Errorf("%s right after the failed Reserve: %+v, want all %d available", s.sku, lvl, s.loaded)
		}
	}
	checkNoPending(t, c.clients, []string{"multi-1"})
	if _, err := c.inv.Confirm(ctx, "multi-1"); !errors.Is(err, inventory.ErrNotFound) {
		t.Fatalf("Confirm of the failed order: err = %v, want ErrNotFound", err)
	}
	invCheckDecisions(t, c, []string{"multi-1"})

	// The same shape with enough stock succeeds and takes every item.
	items[2].Quantity = 5
	res, err := c.inv.Reserve(ctx, "multi-2", items, "", time.Minute)
	if err != nil {
		t.Fatalf("Reserve multi-2: %v", err)
	}
	if q, _ := invSumReceipts(res.Receipts); q["mi-a"] != 2 || q["mi-b"] != 12 || q["mi-short"] != 5 {
		t.Fatalf("multi-2 receipts %+v", res.Receipts)
	}
	if _, err := c.inv.Cancel(ctx, "multi-2"); err != nil {
		t.Fatalf("Cancel multi-2: %v", err)
	}
	checkInvariant(t, c.inv, "r", "mi-a", 30)
	checkInvariant(t, c.inv, "r", "mi-b", 30)
	if lvl := checkInvariant(t, c.inv, "r", "mi-short", 5); lvl.Available != 5 {
		t.Fatalf("mi-short after cancel: %+v", lvl)
	}
	checkNoPending(t, c.clients, []string{"multi-1", "multi-2"})
}

// TestInvReserveSplitAcrossNodes: an item larger than any node's share is
// split over nodes; more than the total fails cleanly.
func TestInvReserveSplitAcrossNodes(t *testing.T) {
	c := newInvCluster(t, invOpts{})
	ctx := invCtx(t, 30*time.Second)
	const loaded = 90 // 30 per node
	c.load("r", "big", loaded, 0)

	res, err := c.inv.Reserve(ctx, "split-1", []inventory.Item{invItem("r", "big", 50)}, "", time.Minute)
	if err != nil {
		t.Fatalf("Reserve 50: %v", err)
	}
	q, nodes := invSumReceipts(res.Receipts)
	if q["big"] != 50 || len(nodes) < 2 {
		t.Fatalf("receipts %+v: want 50 units from >= 2 nodes", res.Receipts)
	}
	for _, r := range res.Receipts {
		if r.Quantity <= 0 || r.Quantity > 30 || r.ItemIndex != 0 {
			t.Errorf("receipt %+v: quantity outside a node's share of 30", r)
		}
	}
	lvl := checkInvariant(t, c.inv, "r", "big", loaded)
	if lvl.Reserved != 50 || lvl.Available != 40 {
		t.Fatalf("after reserving 50: %+v", lvl)
	}

	_, err = c.inv.Reserve(ctx, "split-2", []inventory.Item{invItem("r", "big", 41)}, "", time.Minute)
	if !errors.Is(err, inventory.ErrInsufficientStock) || !strings.Contains(err.Error(), "big") {
		t.Fatalf("Reserve 41 of 40: err = %v, want ErrInsufficientStock naming big", err)
	}
	lvl = checkInvariant(t, c.inv, "r", "big", loaded)
	if lvl.Reserved != 50 || lvl.Available != 40 {
		t.Fatalf("after the failed Reserve: %+v, want reserved 50, available 40 (restored)", lvl)
	}
	checkNoPending(t, c.clients, []string{"split-2"})

	_, err = c.inv.Reserve(ctx, "split-3", []inventory.Item{invItem("r", "big", 91)}, "", time.Minute)
	if !errors.Is(err, inventory.ErrInsufficientStock) {
		t.Fatalf("Reserve 91 of 90 loaded: err = %v, want ErrInsufficientStock", err)
	}
	// Exactly the rest still fits.
	res3, err := c.inv.Reserve(ctx, "split-4", []inventory.Item{invItem("r", "big", 40)}, "", time.Minute)
	if err != nil {
		t.Fatalf("Reserve the remaining 40: %v", err)
	}
	if q, _ := invSumReceipts(res3.Receipts); q["big"] != 40 {
		t.Fatalf("split-4 receipts %+v", res3.Receipts)
	}
	if lvl = checkInvariant(t, c.inv, "r", "big", loaded); lvl.Available != 0 {
		t.Fatalf("after draining: %+v", lvl)
	}
	for _, id := range []string{"split-1", "split-4"} {
		if _, err := c.inv.Cancel(ctx, id); err != nil {
			t.Fatalf("Cancel %s: %v", id, err)
		}
	}
	if lvl = checkInvariant(t, c.inv, "r", "big", loaded); lvl.Available != loaded {
		t.Fatalf("after cancelling everything: %+v", lvl)
	}
	all := []string{"split-1", "split-2", "split-3", "split-4"}
	checkNoPending(t, c.clients, all)
	invCheckDecisions(t, c, all)
}

// TestInvLimitPerUser: with a per-user limit of 1, 20 concurrent orders of
// one user over a SKU split across 3 nodes: exactly one wins.
func TestInvLimitPerUser(t *testing.T) {
	c := newInvCluster(t, invOpts{})
	ctx := invCtx(t, 30*time.Second)
	const loaded = 30
	c.load("r", "lim", loaded, 1)

	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		won    []string
		orders []string
		limit  int
	)
	start := make(chan struct{})
	for i := 0; i < 20; i++ {
		id := fmt.Sprintf("lim-%d", i)
		orders = append(orders, id)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := c.inv.Reserve(ctx, id, []inventory.Item{invItem("r", "lim", 1)}, "u1", time.Minute)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won = append(won, id)
			case errors.Is(err, inventory.ErrLimitExceeded):
				limit++
			default:
				t.Errorf("order %s: unexpected error %v", id, err)
			}
		}()
	}
	// Another user is not affected.
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-start
		if _, err := c.inv.Reserve(ctx, "lim-other", []inventory.Item{invItem("r", "lim", 1)}, "u2", time.Minute); err != nil {
			t.Errorf("other user: %v", err)
		}
	}()
	close(start)
	wg.Wait()
	if len(won) != 1 || limit != 19 {
		t.Fatalf("won %v, limit exceeded %d; want exactly 1 winner and 19 ErrLimitExceeded", won, limit)
	}
	lvl := checkInvariant(t, c.inv, "r", "lim", loaded)
	if lvl.Reserved != 2 || lvl.Limit != 1 {
		t.Fatalf("stock %+v: want reserved 2 (u1 and u2), limit 1", lvl)
	}
	if got := invQuota(t, c, "r", "lim", "u1"); got != 1 {
		t.Fatalf("u1 quota held = %d, want 1", got)
	}
	checkNoPending(t, c.clients, invWithout(orders, won[0]))

	// Over the limit in one order.
	if _, err := c.inv.Reserve(ctx, "lim-two", []inventory.Item{invItem("r", "lim", 2)}, "u3", time.Minute); !errors.Is(err, inventory.ErrLimitExceeded) {
		t.Fatalf("2 units with limit 1: err = %v, want ErrLimitExceeded", err)
	}

	if _, err := c.inv.Cancel(ctx, won[0]); err != nil {
		t.Fatalf("Cancel %s: %v", won[0], err)
	}
	if got := invQuota(t, c, "r", "lim", "u1"); got != 0 {
		t.Fatalf("u1 quota after cancel = %d, want 0", got)
	}
	if _, err := c.inv.Reserve(ctx, "lim-again", []inventory.Item{invItem("r", "lim", 1)}, "u1", time.Minute); err != nil {
		t.Fatalf("u1 after cancelling: %v, want success", err)
	}
	if _, err := c.inv.Confirm(ctx, "lim-again"); err != nil {
		t.Fatalf("Confirm lim-again: %v", err)
	}
	// Confirmed units still count against the limit.
	if _, err := c.inv.Reserve(ctx, "lim-more", []inventory.Item{invItem("r", "lim", 1)}, "u1", time.Minute); !errors.Is(err, inventory.ErrLimitExceeded) {
		t.Fatalf("u1 after a confirmed unit: err = %v, want ErrLimitExceeded", err)
	}
	lvl = checkInvariant(t, c.inv, "r", "lim", loaded)
	if lvl.Reserved != 1 || lvl.Confirmed != 1 {
		t.Fatalf("final stock %+v, want reserved 1 (u2), confirmed 1 (u1)", lvl)
	}
	all := append(orders, "lim-two", "lim-again", "lim-more")
	checkNoPending(t, c.clients, all)
	invCheckDecisions(t, c, all)
}

// invQuota returns the units user holds of route/sku summed over the
// nodes (read directly; the counter lives on the user's quota node).
func invQuota(t testing.TB, c *invCluster, route, sku, user string) int64 {
	t.Helper()
	ctx := invCtx(t, 5*time.Second)
	var sum int64
	for name, cl := range c.clients {
		v, err := cl.Get(ctx, "inv:quota:"+route+":"+strconv.Itoa(len(sku))+":"+sku+":"+user).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("node %s: quota: %v", name, err)
		}
		if v < 0 {
			t.Fatalf("node %s: quota of %s is negative: %d", name, user, v)
		}
		sum += v
	}
	return sum
}

// invWithout returns ids without drop.
func invWithout(ids []string, drop string) []string {
	var out []string
	for _, id := range ids {
		if id != drop {
			out = append(out, id)
		}
	}
	return out
}
