package tests

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/inventory"
)

// checkInvariant is the bank-style invariant every inventory test ends
// with: stock is neither created nor destroyed. For the SKU, on every node
// of the route, available + reserved + confirmed == the node's Loaded and
// no counter is negative; over all nodes Loaded == loaded (what the test
// loaded) and available + reserved + confirmed == loaded. Every node must
// be reachable. It returns the stock level for further checks.
func checkInvariant(t testing.TB, inv *inventory.Inventory, route, sku string, loaded int64) inventory.StockLevel {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lvl, err := inv.GetStock(ctx, route, sku)
	if err != nil {
		t.Fatalf("invariant %s/%s: GetStock: %v", route, sku, err)
	}
	bad := false
	for _, ns := range lvl.Nodes {
		if !ns.Reachable {
			t.Errorf("invariant %s/%s: node %s unreachable: %v", route, sku, ns.Node, ns.Err)
			bad = true
			continue
		}
		if ns.Available < 0 || ns.Reserved < 0 || ns.Confirmed < 0 || ns.Loaded < 0 {
			t.Errorf("invariant %s/%s: node %s has a negative counter: %+v", route, sku, ns.Node, ns)
			bad = true
		}
		if got := ns.Available + ns.Reserved + ns.Confirmed; got != ns.Loaded {
			t.Errorf("invariant %s/%s: node %s: available %d + reserved %d + confirmed %d = %d, want loaded %d",
				route, sku, ns.Node, ns.Available, ns.Reserved, ns.Confirmed, got, ns.Loaded)
			bad = true
		}
	}
	if lvl.Loaded != loaded {
		t.Errorf("invariant %s/%s: loaded over all nodes = %d, want %d", route, sku, lvl.Loaded, loaded)
		bad = true
	}
	if got := lvl.Available + lvl.Reserved + lvl.Confirmed; got != loaded {
		t.Errorf("invariant %s/%s: available %d + reserved %d + confirmed %d = %d, want %d",
			route, sku, lvl.Available, lvl.Reserved, lvl.Confirmed, got, loaded)
		bad = true
	}
	if bad {
		t.FailNow()
	}
	return lvl
}

// invPart is one part record read straight from a node.
type invPart struct {
	node, id, order, token, state, kind string
	qty                                 int64
	inIndex                             bool // listed in inv:pending
}

func (p invPart) String() string {
	return fmt.Sprintf("%s/%s(state=%s kind=%s qty=%d indexed=%v)", p.node, p.id, p.state, p.kind, p.qty, p.inIndex)
}

// invParts reads every part record and every inv:pending entry of the
// given orders (nil: all orders) from every node, with direct clients.
// Its reads of a node are not one snapshot, so it reads in the order that
// cannot lose a part moving meanwhile: the index first (a part that
// leaves it later still counts as listed), then the order records' inline
// parts, then the part keys. The script that decides an order writes its
// inline parts out as keys of their own, and its record, no longer
// reserved, lists none (inventory.InlineParts): read the other way round,
// a part written out between the two reads was in neither (a clean-clone
// make test on a loaded machine saw a wait for no listed part end with
// one part not yet set aside).
func invParts(ctx context.Context, clients map[string]*redis.Client, orders []string) ([]invPart, error) {
	want := map[string]bool{}
	for _, o := range orders {
		want[o] = true
	}
	match := func(partID string) bool {
		o, _, _ := strings.Cut(partID, "|")
		return orders == nil || want[o]
	}
	var out []invPart
	names := make([]string, 0, len(clients))
	for name := range clients {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		c := clients[name]
		indexed := map[string]bool{}
		ids, err := c.ZRange(ctx, "inv:pending", 0, -1).Result()
		if err != nil {
			return nil, fmt.Errorf("node %s: ZRANGE inv:pending: %w", name, err)
		}
		for _, id := range ids {
			indexed[id] = true
		}
		inline, err := invInlineParts(ctx, c, name)
		if err != nil {
			return nil, err
		}
		var keys []string
		iter := c.Scan(ctx, 0, "inv:part:*", 1000).Iterator()
		for iter.Next(ctx) {
			if match(strings.TrimPrefix(iter.Val(), "inv:part:")) {
				keys = append(keys, iter.Val())
			}
		}
		if err := iter.Err(); err != nil {
			return nil, fmt.Errorf("node %s: SCAN: %w", name, err)
		}
		pipe := c.Pipeline()
		reads := make([]*inventory.PartRead, len(keys))
		for i, k := range keys {
			reads[i] = inventory.ReadPart(ctx, pipe, strings.TrimPrefix(k, "inv:part:"))
		}
		if len(keys) > 0 {
			_, _ = pipe.Exec(ctx) // each read's own error is checked below (a part's two layouts)
		}
		seen := map[string]bool{}
		for i, k := range keys {
			id := strings.TrimPrefix(k, "inv:part:")
			v, err := reads[i].Fields()
			if err != nil {
				return nil, fmt.Errorf("node %s: reading parts: %w", name, err)
			}
			member := inventory.PendingMember(id, v)
			p := invPart{node: name, id: id, inIndex: indexed[member]}
			delete(indexed, member) // what is left names no part: checked below
			p.order, _, _ = strings.Cut(id, "|")
			p.state, p.kind, p.token = v["state"], v["kind"], v["token"]
			if s, ok := v["qty"]; ok {
				fmt.Sscan(s, &p.qty)
			}
			if p.token == "" { // tombstones keep no token: take it from the id
				if _, rest, ok := strings.Cut(id, "|"); ok {
					p.token, _, _ = strings.Cut(rest, "|")
				}
			}
			seen[id] = true
			out = append(out, p)
		}
		for _, ip := range inline {
			if seen[ip.ID] || !match(ip.ID) {
				continue // a part with a key of its own is that record
			}
			member := inventory.PendingMember(ip.ID, map[string]string{"kind": string(ip.Kind), "redo": ip.Redo,
				"offset": strconv.FormatInt(ip.Offset, 10)})
			out = append(out, invPart{node: name, id: ip.ID, order: ip.Order, token: ip.Token, state: string(ip.State),
				kind: string(ip.Kind), qty: ip.Qty, inIndex: indexed[member]})
			delete(indexed, member)
			seen[ip.ID] = true
		}
		for id := range indexed {
			if !seen[id] && match(id) {
				o, _, _ := strings.Cut(id, "|")
				out = append(out, invPart{node: name, id: id, order: o, state: "(no record)", inIndex: true})
			}
		}
	}
	return out, nil
}

// invInlineParts reads the inline parts of every order record on node
// name (inventory.InlineParts), with direct client c.
func invInlineParts(ctx context.Context, c *redis.Client, name string) ([]inventory.PartRecord, error) {
	var ids []string
	iter := c.Scan(ctx, 0, inventory.OrderKey("*"), 1000).Iterator()
	for iter.Next(ctx) {
		if _, id := inventory.ParseKey(iter.Val()); id != "" {
			ids = append(ids, id)
		}
	}
	if err := iter.Err(); err != nil {
		return nil, fmt.Errorf("node %s: SCAN: %w", name, err)
	}
	// one pipeline for every record (one round trip, not two per order:
	// a poll of a few hundred orders stays short on a loaded machine)
	reads := make([]*inventory.OrderRead, len(ids))
	pipe := c.Pipeline()
	for i, id := range ids {
		reads[i] = inventory.ReadOrder(ctx, pipe, id)
	}
	if len(ids) > 0 {
		_, _ = pipe.Exec(ctx) // each read's own error is checked below (a record's two layouts)
	}
	var out []inventory.PartRecord
	for i, id := range ids {
		f, err := reads[i].Fields()
		if err != nil {
			return nil, fmt.Errorf("node %s: reading orders: %w", name, err)
		}
		in, err := inventory.InlineParts(name, id, f)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", name, err)
		}
		out = append(out, in...)
	}
	return out, nil
}

// invPendingOf returns the parts of orders (nil: all) that are still
// pending or still listed in a node's inv:pending index.
func invPendingOf(ctx context.Context, clients map[string]*redis.Client, orders []string) ([]invPart, error) {
	parts, err := invParts(ctx, clients, orders)
	if err != nil {
		return nil, err
	}
	var out []invPart
	for _, p := range parts {
		if p.state == "pending" || p.inIndex {
			out = append(out, p)
		}
	}
	return out, nil
}

// checkNoPending fails the test if any part of orders (nil: any order) is
// still pending, or still listed in inv:pending, on any node. It reads the
// nodes directly, not through the router.
func checkNoPending(t testing.TB, clients map[string]*redis.Client, orders []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	left, err := invPendingOf(ctx, clients, orders)
	if err != nil {
		t.Fatalf("checkNoPending: %v", err)
	}
	if len(left) > 0 {
		if len(left) > 10 {
			left = left[:10]
		}
		t.Fatalf("parts left pending after reconciliation (first %d): %v", len(left), left)
	}
}

// invWaitNoPending polls until no part of orders is pending (see
// checkNoPending) or timeout passes, then checks once more.
func invWaitNoPending(t testing.TB, clients map[string]*redis.Client, orders []string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		left, err := invPendingOf(ctx, clients, orders)
		cancel()
		if err == nil && len(left) == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	checkNoPending(t, clients, orders)
}

// invCheckDecisions checks that every order's parts follow its decision,
// never mixed: if the order record on its home node is confirmed, every
// part of the committed attempt (its token) is confirmed; otherwise
// (cancelled, failed, reserving, missing) every part is cancelled. Parts
// of other attempts of the order are always cancelled. Call it after
// reconciliation. It returns each order's status ("missing" if none).
func invCheckDecisions(t testing.TB, c *invCluster, orders []string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	parts, err := invParts(ctx, c.clients, orders)
	if err != nil {
		t.Fatalf("invCheckDecisions: %v", err)
	}
	byOrder := map[string][]invPart{}
	for _, p := range parts {
		byOrder[p.order] = append(byOrder[p.order], p)
	}
	// the records, one pipeline per home node
	pipes := map[string]redis.Pipeliner{}
	reads := make([]*inventory.OrderRead, len(orders))
	for i, o := range orders {
		h := c.home(o)
		if pipes[h] == nil {
			pipes[h] = c.clients[h].Pipeline()
		}
		reads[i] = inventory.ReadOrder(ctx, pipes[h], o)
	}
	for _, pipe := range pipes {
		_, _ = pipe.Exec(ctx) // each read's own error is checked below (a record's two layouts)
	}
	out := map[string]string{}
	for i, o := range orders {
		f, err := reads[i].Fields()
		if err != nil {
			t.Fatalf("order %s on %s: %v", o, c.home(o), err)
		}
		status, token := f["status"], f["token"]
		if status == "" {
			status = "missing"
		}
		out[o] = status
		for _, p := range byOrder[o] {
			want := "cancelled"
			switch {
			case status == "confirmed" && p.token == token:
				want = "confirmed"
			case status == "reserved" && p.token == token:
				want = "pending" // not decided yet: only valid before its deadline
			}
			if p.state != want {
				t.Errorf("order %s is %s (token %s) but part %v is %s, want %s (mixed outcome)",
					o, status, token, p, p.state, want)
			}
		}
	}
	return out
}
