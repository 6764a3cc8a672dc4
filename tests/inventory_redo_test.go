package tests

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardis/shardis/inventory"
)

// invRedoKey identifies one redo queue on one node.
type invRedoKey struct {
	node  string
	queue int
}

// invReadAllRedo reads every queue of every node in one call per queue.
func invReadAllRedo(t *testing.T, c *invCluster, queues int) map[invRedoKey][]inventory.RedoEntry {
	t.Helper()
	ctx := invCtx(t, 10*time.Second)
	out := map[invRedoKey][]inventory.RedoEntry{}
	for _, name := range c.names {
		for q := 0; q < queues; q++ {
			e, err := c.inv.ReadRedoLog(ctx, name, q, 0, 10000)
			if err != nil {
				t.Fatalf("ReadRedoLog(%s, %d): %v", name, q, err)
			}
			if len(e) > 0 {
				out[invRedoKey{name, q}] = e
			}
		}
	}
	return out
}

// invContiguous fails unless entries' offsets are from, from+1, … .
func invContiguous(t *testing.T, k invRedoKey, entries []inventory.RedoEntry, from int64) {
	t.Helper()
	for i, e := range entries {
		if e.Offset != from+int64(i) {
			offs := make([]int64, len(entries))
			for j, e := range entries {
				offs[j] = e.Offset
			}
			t.Fatalf("queue %v: offsets %v, want contiguous from %d", k, offs, from)
		}
	}
}

// TestInvRedoLog checks the redo log under concurrent reserves: gap-free
// offsets 1..N per (node, queue), exact resumption from any offset, and
// bounded growth through AckRedoLog + TrimRedoLog.
func TestInvRedoLog(t *testing.T) {
	c := newInvCluster(t, invOpts{})
	ctx := invCtx(t, 60*time.Second)
	queues := c.cfg.Inventory.RedoQueues
	const loaded = 600
	var skus []string
	for i := 0; i < 6; i++ {
		skus = append(skus, fmt.Sprintf("rd-%d", i))
		c.load("r", skus[i], loaded, 0)
	}
	c.load("r", "rd-short", 3, 0)

	var (
		mu       sync.Mutex
		receipts = map[string][]inventory.Receipt{}
		failed   []string
		orders   []string
		wg       sync.WaitGroup
	)
	// A cancelled order first: its parts, settled, head some queues. (A
	// refused order may leave none: one whose short item its first reads
	// see takes nothing, inventory/soldout.go.)
	var firstItems []inventory.Item
	for _, sku := range skus {
		firstItems = append(firstItems, invItem("r", sku, 1))
	}
	if _, err := c.inv.Reserve(ctx, "rd-first", firstItems, "", time.Minute); err != nil {
		t.Fatalf("Reserve rd-first: %v", err)
	}
	if _, err := c.inv.Cancel(ctx, "rd-first"); err != nil {
		t.Fatalf("Cancel rd-first: %v", err)
	}
	orders = append(orders, "rd-first")
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				id := fmt.Sprintf("rd-w%d-%d", w, i)
				n := w*10 + i
				items := []inventory.Item{invItem("r", skus[n%6], int64(1+n%5))}
				if n%3 == 0 {
					items = append(items, invItem("r", skus[(n+1)%6], 250)) // more than a node's 200: split
				}
				if n%7 == 0 { // short: parts taken, then cancelled
					items = append(items, invItem("r", "rd-short", 4))
				}
				res, err := c.inv.Reserve(ctx, id, items, "", time.Minute)
				mu.Lock()
				orders = append(orders, id)
				switch {
				case err == nil:
					receipts[id] = res.Receipts
				case errors.Is(err, inventory.ErrInsufficientStock):
					failed = append(failed, id)
				default:
					t.Errorf("Reserve %s: %v", id, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() || len(failed) == 0 {
		t.Fatalf("setup: %d failed orders, want some (the rd-short ones)", len(failed))
	}

	logs := invReadAllRedo(t, c, queues)
	total := 0
	byPos := map[string]inventory.RedoEntry{} // node|queue|offset
	for k, entries := range logs {
		invContiguous(t, k, entries, 1)
		total += len(entries)
		for _, e := range entries {
			byPos[k.node+"|"+strconv.Itoa(k.queue)+"|"+strconv.FormatInt(e.Offset, 10)] = e
		}

		// Pages of 7 resume exactly where the last page ended.
		var paged []inventory.RedoEntry
		after := int64(0)
		for {
			page, err := c.inv.ReadRedoLog(ctx, k.node, k.queue, after, 7)
			if err != nil {
				t.Fatalf("ReadRedoLog page after %d: %v", after, err)
			}
			paged = append(paged, page...)
			if len(page) < 7 {
				break
			}
			after = page[len(page)-1].Offset
		}
		if !reflect.DeepEqual(paged, entries) {
			t.Fatalf("queue %v: pages of 7 differ from one full read:\n%v\n%v", k, paged, entries)
		}
		// Resuming from any offset returns exactly the rest.
		mid := int64(len(entries) / 2)
		rest, err := c.inv.ReadRedoLog(ctx, k.node, k.queue, mid, 10000)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(rest, entries[mid:]) {
			t.Fatalf("queue %v: read after %d = %v, want %v", k, mid, rest, entries[mid:])
		}
	}

	// Every stock part, kept or rolled back, is in the log exactly once.
	parts, err := invParts(ctx, c.clients, orders)
	if err != nil {
		t.Fatal(err)
	}
	stockParts := 0
	for _, p := range parts {
		if p.kind == "s" {
			stockParts++
		}
	}
	if total != stockParts {
		t.Fatalf("redo log holds %d entries, the nodes hold %d stock parts", total, stockParts)
	}
	for id, rs := range receipts {
		for _, r := range rs {
			q, err := strconv.Atoi(strings.TrimPrefix(r.RedoLog, "inv:redo:"))
			if err != nil || inventory.RedoLogKey(q) != r.RedoLog {
				t.Fatalf("receipt %+v: redo log key %q", r, r.RedoLog)
			}
			e, ok := byPos[r.Node+"|"+strconv.Itoa(q)+"|"+strconv.FormatInt(r.Offset, 10)]
			if !ok || !strings.HasPrefix(e.PartID, id+"|") || e.OrderID != id || e.SKU != r.SKU ||
				e.Quantity != r.Quantity || e.State != "pending" {
				t.Fatalf("receipt %+v of %s: redo entry %+v (found %v)", r, id, e, ok)
			}
		}
	}

	// Acknowledging half of each queue while orders are pending trims
	// only the settled prefix (the cancelled order's parts, and those of
	// failed orders rolled back) up to the acknowledgement: trimming stops
	// at the first pending entry.
	for k, entries := range logs {
		half := int64(len(entries)+1) / 2
		if got, err := c.inv.AckRedoLog(ctx, k.node, k.queue, half); err != nil || got != half {
			t.Fatalf("AckRedoLog(%v, %d) = %d, %v", k, half, got, err)
		}
		if got, err := c.inv.AckRedoLog(ctx, k.node, k.queue, 0); err != nil || got != half {
			t.Fatalf("AckRedoLog(%v, 0) lowered the acknowledgement: %d, %v; want %d", k, got, err, half)
		}
	}
	trimmed := 0
	for _, name := range c.names {
		n, err := c.inv.TrimRedoLog(ctx, name, 24*time.Hour, 1000)
		if err != nil {
			t.Fatalf("TrimRedoLog(%s): %v", name, err)
		}
		trimmed += n
	}
	after := invReadAllRedo(t, c, queues)
	wantTrimmed := 0
	for k, entries := range logs {
		keep := int(int64(len(entries)+1) / 2) // entries at or below the ack
		for i, e := range entries[:keep] {
			if e.State == "pending" {
				keep = i
				break
			}
		}
		wantTrimmed += keep
		if want := entries[keep:]; !reflect.DeepEqual(after[k], want) && len(want)+len(after[k]) > 0 {
			t.Fatalf("queue %v after a half ack with pending parts: %d entries, want the last %d", k, len(after[k]), len(want))
		}
	}
	if trimmed != wantTrimmed || trimmed == 0 {
		t.Fatalf("TrimRedoLog removed %d, want %d (> 0: the cancelled order's parts)", trimmed, wantTrimmed)
	}

	// Settle every order: confirm half, cancel half. Then acknowledge
	// the last offset: the trim empties every queue.
	i := 0
	for id := range receipts {
		var err error
		if i%2 == 0 {
			_, err = c.inv.Confirm(ctx, id)
		} else {
			_, err = c.inv.Cancel(ctx, id)
		}
		if err != nil {
			t.Fatalf("settling %s: %v", id, err)
		}
		i++
	}
	lastOff := map[invRedoKey]int64{}
	for k, entries := range invReadAllRedo(t, c, queues) {
		for _, e := range entries {
			if e.State != "confirmed" && e.State != "cancelled" {
				t.Fatalf("queue %v: entry %+v not settled", k, e)
			}
		}
		invContiguous(t, k, entries, entries[0].Offset)
		last := entries[len(entries)-1].Offset
		if last != logs[k][len(logs[k])-1].Offset {
			t.Fatalf("queue %v: last offset %d, was %d", k, last, logs[k][len(logs[k])-1].Offset)
		}
		lastOff[k] = last
		if _, err := c.inv.AckRedoLog(ctx, k.node, k.queue, last); err != nil {
			t.Fatal(err)
		}
	}
	for k, entries := range logs {
		lastOff[k] = entries[len(entries)-1].Offset // also queues emptied above
	}
	for _, name := range c.names {
		if _, err := c.inv.TrimRedoLog(ctx, name, 24*time.Hour, 1000); err != nil {
			t.Fatal(err)
		}
		n, err := c.inv.RedoLogLen(ctx, name)
		if err != nil || n != 0 {
			t.Fatalf("RedoLogLen(%s) = %d, %v; want 0 after ack + trim", name, n, err)
		}
	}

	// New entries continue the offsets; trimming keeps entries after the
	// acknowledgement, and pending ones whatever their age.
	res, err := c.inv.Reserve(ctx, "rd-new", []inventory.Item{invItem("r", skus[0], 1), invItem("r", skus[3], 1)}, "", time.Minute)
	if err != nil {
		t.Fatalf("Reserve rd-new: %v", err)
	}
	for _, r := range res.Receipts {
		q, _ := strconv.Atoi(strings.TrimPrefix(r.RedoLog, "inv:redo:"))
		k := invRedoKey{r.Node, q}
		if r.Offset != lastOff[k]+1 {
			t.Fatalf("new receipt %+v: offset %d, want %d (previous last + 1)", r, r.Offset, lastOff[k]+1)
		}
	}
	for _, name := range c.names {
		if _, err := c.inv.TrimRedoLog(ctx, name, time.Millisecond, 1000); err != nil {
			t.Fatal(err)
		}
	}
	after = invReadAllRedo(t, c, queues)
	n := 0
	for k, entries := range after {
		invContiguous(t, k, entries, lastOff[k]+1)
		n += len(entries)
	}
	if n != len(res.Receipts) {
		t.Fatalf("after trimming with rd-new pending: %d entries, want its %d", n, len(res.Receipts))
	}
	if _, err := c.inv.Cancel(ctx, "rd-new"); err != nil {
		t.Fatal(err)
	}
	// Not acknowledged but settled and older than maxAge: trimmed.
	time.Sleep(5 * time.Millisecond)
	for _, name := range c.names {
		if _, err := c.inv.TrimRedoLog(ctx, name, time.Millisecond, 1000); err != nil {
			t.Fatal(err)
		}
		if n, err := c.inv.RedoLogLen(ctx, name); err != nil || n != 0 {
			t.Fatalf("RedoLogLen(%s) after an age trim = %d, %v; want 0", name, n, err)
		}
	}

	if _, err := c.inv.ReadRedoLog(ctx, "n1", queues, 0, 10); !errors.Is(err, inventory.ErrInvalid) {
		t.Fatalf("ReadRedoLog of queue %d: err = %v, want ErrInvalid", queues, err)
	}
	for _, sku := range skus {
		if lvl := checkInvariant(t, c.inv, "r", sku, loaded); lvl.Reserved != 0 {
			t.Fatalf("%s: %+v, want nothing reserved", sku, lvl)
		}
	}
	checkInvariant(t, c.inv, "r", "rd-short", 3)
	checkNoPending(t, c.clients, append(orders, "rd-new"))
	invCheckDecisions(t, c, append(orders, "rd-new"))
}

// TestInvCorrupt writes a non-integer into one node's stock hash by hand:
// Reserve and GetStock report ErrCorrupt naming the node, and nothing
// changes on the other nodes.
func TestInvCorrupt(t *testing.T) {
	c := newInvCluster(t, invOpts{})
	ctx := invCtx(t, 30*time.Second)
	const loaded = 30
	c.load("r", "cor", loaded, 0)
	c.load("r", "fine", loaded, 0)
	const bad = "n2"
	key := "inv:stock:r:cor"
	orig, err := c.clients[bad].HGet(ctx, key, "available").Result()
	if err != nil {
		t.Fatal(err)
	}
	snapshot := func() map[string]string {
		out := map[string]string{}
		for _, name := range c.names {
			if name == bad {
				continue
			}
			cl := c.clients[name]
			h, _ := cl.HGetAll(ctx, key).Result()
			z, _ := cl.ZCard(ctx, "inv:pending").Result()
			o, _ := cl.HGetAll(ctx, "inv:redo:offsets").Result()
			out[name] = fmt.Sprint(h, z, o)
		}
		return out
	}
	before := snapshot()
	if err := c.clients[bad].HSet(ctx, key, "available", "abc").Err(); err != nil {
		t.Fatal(err)
	}

	// The corrupt node is the first one the order takes from.
	o1 := c.orderIDWith("cor-a", func(id string) bool { return c.first("r", id, "cor") == bad })
	_, err = c.inv.Reserve(ctx, o1, []inventory.Item{invItem("r", "cor", 1)}, "", time.Minute)
	if !errors.Is(err, inventory.ErrCorrupt) || !strings.Contains(err.Error(), bad) {
		t.Fatalf("Reserve on the corrupt node: err = %v, want ErrCorrupt naming %s", err, bad)
	}
	if after := snapshot(); !reflect.DeepEqual(after, before) {
		t.Fatalf("other nodes changed:\nbefore %v\nafter  %v", before, after)
	}
	if v, _ := c.clients[bad].HGet(ctx, key, "available").Result(); v != "abc" {
		t.Fatalf("corrupt value was overwritten: %q", v)
	}
	_, err = c.inv.GetStock(ctx, "r", "cor")
	if !errors.Is(err, inventory.ErrCorrupt) || !strings.Contains(err.Error(), bad) {
		t.Fatalf("GetStock: err = %v, want ErrCorrupt naming %s", err, bad)
	}

	// An order that reaches the corrupt node in a later round: what it
	// took on the healthy nodes is returned.
	o2 := c.orderIDWith("cor-b", func(id string) bool { return c.first("r", id, "cor") != bad })
	_, err = c.inv.Reserve(ctx, o2, []inventory.Item{invItem("r", "cor", loaded)}, "", time.Minute)
	if !errors.Is(err, inventory.ErrCorrupt) || !strings.Contains(err.Error(), bad) {
		t.Fatalf("Reserve spanning the corrupt node: err = %v, want ErrCorrupt naming %s", err, bad)
	}
	for _, name := range c.names {
		if name == bad {
			continue
		}
		h, _ := c.clients[name].HGetAll(ctx, key).Result()
		if h["reserved"] != "0" && h["reserved"] != "" {
			t.Fatalf("node %s: %v, want nothing reserved after the rollback", name, h)
		}
	}
	// Other SKUs on the same node are fine; the node is not marked down.
	if _, err := c.inv.Reserve(ctx, "cor-fine", []inventory.Item{invItem("r", "fine", loaded)}, "", time.Minute); err != nil {
		t.Fatalf("Reserve of another SKU: %v", err)
	}
	if !c.node(bad).Usable() {
		t.Fatalf("node %s unusable after corrupt-value errors", bad)
	}
	checkInvariant(t, c.inv, "r", "fine", loaded)

	// Repaired by hand, the SKU is whole again.
	if err := c.clients[bad].HSet(ctx, key, "available", orig).Err(); err != nil {
		t.Fatal(err)
	}
	if lvl := checkInvariant(t, c.inv, "r", "cor", loaded); lvl.Available != loaded {
		t.Fatalf("after repair: %+v", lvl)
	}
	if _, err := c.inv.Cancel(ctx, "cor-fine"); err != nil {
		t.Fatal(err)
	}
	orders := []string{o1, o2, "cor-fine"}
	checkNoPending(t, c.clients, orders)
	invCheckDecisions(t, c, orders)
	checkInvariant(t, c.inv, "r", "fine", loaded)
}
