package bench

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
)

// benchNodes starts three real nodes and a router over them in the
// bench's configuration, both stopped when the test ends, and returns
// the router's nodes and a context that ends with the test.
func benchNodes(t *testing.T) ([]*node.Node, context.Context) {
	t.Helper()
	srvs := redistest.StartN(t, 3, redistest.Options{})
	cfg := BenchConfig([]string{srvs[0].Addr(), srvs[1].Addr(), srvs[2].Addr()})
	r, err := router.New(context.Background(), cfg, router.Options{KeepData: cfg.KeepData(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return r.Nodes(), ctx
}

// floorNodes returns a floor batcher on each of three real nodes, after
// each node passed the script's check (and its keys were removed again).
func floorNodes(t *testing.T) []*floorBatcher {
	t.Helper()
	nodes, ctx := benchNodes(t)
	var out []*floorBatcher
	for _, n := range nodes {
		f := newFloorBatcher(ctx, n)
		if err := f.check(ctx); err != nil {
			t.Fatal(err)
		}
		// only the check's keys go: FLUSHALL would take the node's
		// shardis stamp too, and the router's probe would mark the node
		// down (data lost) in the middle of a slow test
		keys, err := n.Client().Keys(ctx, "floor:*").Result()
		if err == nil && len(keys) > 0 {
			err = n.Client().Del(ctx, keys...).Err()
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, f)
	}
	return out
}

// TestFloorHot runs 100 concurrent one-node orders against 60 units:
// exactly 60 are taken, each once, with redo offsets 1..60 and a pending
// entry each, and 40 are short; a taken order id is refused when stock is
// back.
func TestFloorHot(t *testing.T) {
	f := floorNodes(t)[0]
	ctx := context.Background()
	if err := f.load(ctx, floorHotSKU, 60); err != nil {
		t.Fatal(err)
	}
	fs := []*floorBatcher{f}
	take := func(i int) error {
		return floorOrder(fs, 0, "o"+strconv.Itoa(i), []floorItem{{0, floorHotSKU}})
	}
	errs := takeHot60(t, f, take)
	c := f.n.Client()
	if n, err := c.ZCard(ctx, floorPending).Result(); err != nil || n != 60 {
		t.Fatalf("pending index holds %d (%v), want 60", n, err)
	}
	retakeRefused(t, f, errs, take)
}

// takeHot60 runs take(0..99) at once against f's 60 units of the hot SKU
// and asserts that exactly 60 were taken and 40 short, the counter ends
// at 0 available and 60 reserved, and the redo queue holds 60 entries at
// offsets 1..60. It returns each order's error.
func takeHot60(t *testing.T, f *floorBatcher, take func(i int) error) []error {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, 100)
	for i := range errs {
		wg.Go(func() { errs[i] = take(i) })
	}
	wg.Wait()
	var ok, short int
	for i, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, errFloorShort):
			short++
		default:
			t.Errorf("order %d: %v", i, err)
		}
	}
	if ok != 60 || short != 40 {
		t.Fatalf("%d taken, %d short; want 60 and 40", ok, short)
	}
	c := f.n.Client()
	st, err := c.HMGet(ctx, floorStock(floorHotSKU), "available", "reserved").Result()
	if err != nil || st[0] != "0" || st[1] != "60" {
		t.Fatalf("stock %v (%v), want available 0, reserved 60", st, err)
	}
	redo, err := c.ZRangeWithScores(ctx, floorRedo(floorHotSKU), 0, -1).Result()
	if err != nil || len(redo) != 60 {
		t.Fatalf("redo queue holds %d entries (%v), want 60", len(redo), err)
	}
	for i, z := range redo {
		if z.Score != float64(i+1) {
			t.Fatalf("redo entry %d has offset %v, want %d", i, z.Score, i+1)
		}
	}
	return errs
}

// retakeRefused gives f's hot SKU a unit again and asserts that an order
// taken in errs (a nil error) is refused for its record when taken again.
func retakeRefused(t *testing.T, f *floorBatcher, errs []error, take func(i int) error) {
	t.Helper()
	if err := f.load(context.Background(), floorHotSKU, 1); err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if err == nil {
			if err := take(i); err == nil || errors.Is(err, errFloorShort) {
				t.Fatalf("order o%d again: %v, want a refusal for its record", i, err)
			}
			return
		}
	}
}

// TestFloorOrder3 runs 40 concurrent 3-item orders, placed in two rounds
// (floorOrder) and in one (floorOrderOneRound): each takes one unit on
// every node, the record (final, with its retention, once a one-round
// order's decision landed) on its hashed home and a fence on the two
// others. Then 20 one-item orders on node 0 with hashed
// homes: those homed elsewhere leave a record there (no unit taken) and a
// fence on node 0.
func TestFloorOrder3(t *testing.T) {
	for _, place := range []struct {
		name  string
		order func([]*floorBatcher, int, string, []floorItem) error
	}{{"two rounds", floorOrder}, {"one round", floorOrderOneRound}} {
		t.Run(place.name, func(t *testing.T) { testFloorOrder3(t, place.order) })
	}
}

func testFloorOrder3(t *testing.T, floorOrder func([]*floorBatcher, int, string, []floorItem) error) {
	fs := floorNodes(t)
	ctx := context.Background()
	skus := []string{"1001", "2001", "3001"}
	for i, f := range fs {
		if err := f.load(ctx, skus[i], 1000); err != nil {
			t.Fatal(err)
		}
	}
	const orders = 40
	var wg sync.WaitGroup
	errs := make([]error, orders)
	homes := make([]int, len(fs))
	for i := range errs {
		id := "x" + strconv.Itoa(i)
		home := int(xxhash.Sum64String(id) % uint64(len(fs)))
		homes[home]++
		items := []floorItem{{0, skus[0]}, {1, skus[1]}, {2, skus[2]}}
		wg.Go(func() { errs[i] = floorOrder(fs, home, id, items) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i, f := range fs {
		c := f.n.Client()
		if st, err := c.HMGet(ctx, floorStock(skus[i]), "available", "reserved").Result(); err != nil || st[0] != "960" || st[1] != "40" {
			t.Fatalf("node %d stock %v (%v), want 960 available, 40 reserved", i, st, err)
		}
		fences, _ := c.Keys(ctx, "floor:part:*").Result()
		records, _ := c.Keys(ctx, "floor:order:*").Result()
		if len(records) != homes[i] || len(fences) != orders-homes[i] {
			t.Fatalf("node %d: %d records, %d fences; want %d and %d", i, len(records), len(fences), homes[i], orders-homes[i])
		}
		for _, k := range records {
			v, err := c.Get(ctx, k).Result()
			for deadline := time.Now().Add(5 * time.Second); err == nil && strings.HasPrefix(v, "staged|") && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond) // a one-round order's decision is not waited for
				v, err = c.Get(ctx, k).Result()
			}
			if err != nil || !strings.HasPrefix(v, "reserved|") {
				t.Fatalf("node %d: record %s holds %q (%v), want reserved", i, k, v, err)
			}
			if ttl, err := c.TTL(ctx, k).Result(); err != nil || ttl <= 0 {
				t.Fatalf("node %d: record %s has TTL %v (%v), want its retention", i, k, ttl, err)
			}
		}
	}
	remote := 0
	for i := range 20 {
		id := "h" + strconv.Itoa(i)
		home := floorHome(id, len(fs))
		if home != 0 {
			remote++
		}
		if err := floorOrder(fs, home, id, []floorItem{{0, skus[0]}}); err != nil {
			t.Fatal(err)
		}
	}
	c0 := fs[0].n.Client()
	if st, err := c0.HMGet(ctx, floorStock(skus[0]), "available", "reserved").Result(); err != nil || st[0] != "940" || st[1] != "60" {
		t.Fatalf("node 0 stock %v (%v), want 940 available, 60 reserved", st, err)
	}
	if fences, _ := c0.Keys(ctx, "floor:part:h*").Result(); len(fences) != remote {
		t.Fatalf("node 0 holds %d fences of one-item orders, want %d", len(fences), remote)
	}
	if remote == 0 || remote == 20 {
		t.Fatalf("%d of 20 one-item orders homed off node 0: the test needs both kinds", remote)
	}
}

// TestFloorUnwaitedFailure: a decision nobody waits for that finds no
// record fails the node's later entries, so a run counts it.
func TestFloorUnwaitedFailure(t *testing.T) {
	f := floorNodes(t)[0]
	ctx := context.Background()
	if err := f.load(ctx, floorHotSKU, 10); err != nil {
		t.Fatal(err)
	}
	d := &floorReq{mode: "d", key: "floor:order:gone", member: "gone", value: "reserved", unwaited: true}
	if err := f.submit(d); err != nil {
		t.Fatal(err)
	}
	<-d.done
	err := floorOrder([]*floorBatcher{f}, 0, "next", []floorItem{{0, floorHotSKU}})
	if err == nil || !strings.Contains(err.Error(), `key "floor:order:gone" does not exist`) {
		t.Fatalf("order after a failed unwaited decision: %v, want that failure", err)
	}
}

// TestFloorRedo holds floorRedo to the seed's queue of a numeric SKU
// (sku % 50) and queue 0 for any other, without allocating.
func TestFloorRedo(t *testing.T) {
	for i := range 5000 {
		if got, want := floorRedo(strconv.Itoa(i)), "floor:redo:"+strconv.Itoa(i%50); got != want {
			t.Fatalf("floorRedo(%d) = %q, want %q", i, got, want)
		}
	}
	for _, sku := range []string{floorHotSKU, "", "12a", "-3"} {
		if got := floorRedo(sku); got != "floor:redo:0" {
			t.Errorf("floorRedo(%q) = %q, want floor:redo:0", sku, got)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = floorRedo(floorHotSKU) }); n != 0 {
		t.Errorf("floorRedo allocates %.0f times per call", n)
	}
}

// TestFloorResetForgetsEarlierFailures: a failed unwaited decision fails
// the node's later entries until the batcher is reset (as every floor
// row's setup does), and one submitted before the reset, whatever it
// lands, fails none after it: a row's decision landing after the next
// row's FLUSHALL failed every later floor row on its node.
func TestFloorResetForgetsEarlierFailures(t *testing.T) {
	f := floorNodes(t)[0]
	ctx := context.Background()
	if err := f.load(ctx, floorHotSKU, 10); err != nil {
		t.Fatal(err)
	}
	order := func(id string) error {
		return floorOrder([]*floorBatcher{f}, 0, id, []floorItem{{0, floorHotSKU}})
	}
	late := func() *floorReq {
		d := &floorReq{mode: "d", key: "floor:order:gone", member: "gone", value: "reserved", unwaited: true}
		if err := f.submit(d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	<-late().done
	if err := order("a"); err == nil {
		t.Fatal("an order after a failed unwaited decision succeeded, want that failure")
	}
	f.reset()
	if err := order("b"); err != nil {
		t.Fatalf("an order after the reset: %v", err)
	}
	d := late() // submitted before the next reset, failing after it
	f.reset()
	<-d.done
	if d.err == nil {
		t.Fatal("the late decision did not fail")
	}
	if err := order("c"); err != nil {
		t.Fatalf("an order after a reset, an earlier decision failing late: %v", err)
	}
}

// TestFloorEntryKeys: the floor sends what it writes and nothing else. On
// the home of an order whose item is on another node, its record ("r")
// and a one-round order's decision ("d") reach the node with their key
// alone beside the call's head (they sent the stock hash and redo queue
// of an empty SKU too, which the script never used); the take on the
// stock's node sends its stock hash and redo queue.
func TestFloorEntryKeys(t *testing.T) {
	fs := floorNodes(t)
	ctx := context.Background()
	if err := fs[0].load(ctx, floorHotSKU, 10); err != nil {
		t.Fatal(err)
	}
	for _, f := range fs[:2] {
		c := f.n.Client()
		if err := c.ConfigSet(ctx, "slowlog-log-slower-than", "0").Err(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.ConfigSet(context.Background(), "slowlog-log-slower-than", "10000").Err() })
		if err := c.Do(ctx, "SLOWLOG", "RESET").Err(); err != nil {
			t.Fatal(err)
		}
	}
	items := []floorItem{{0, floorHotSKU}}
	if err := floorOrder(fs, 1, "two", items); err != nil {
		t.Fatal(err)
	}
	if err := floorOrderOneRound(fs, 1, "one", items); err != nil {
		t.Fatal(err)
	}
	home := fs[1].n.Client()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		v, err := home.Get(ctx, "floor:order:one").Result()
		if err == nil && strings.HasPrefix(v, "reserved|") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the one-round order's decision did not land: %q (%v)", v, err)
		}
	}
	// numkeys of every floor script call a node ran, in order
	calls := func(f *floorBatcher) []string {
		logs, err := f.n.Client().SlowLogGet(ctx, 1000).Result()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range logs {
			// the floor's: its head's first key; not the router's probe scripts
			if len(l.Args) > 3 && (strings.EqualFold(l.Args[0], "evalsha") || strings.EqualFold(l.Args[0], "eval")) && l.Args[3] == floorPending {
				out = append(out, l.Args[2])
			}
		}
		return out
	}
	// each call carried one entry: 2 head keys, then the entry's
	if got := calls(fs[1]); strings.Join(got, " ") != "3 3 3" {
		t.Errorf("home's calls (the record, the staged record, the decision) carried %q keys, want 3 each", got)
	}
	if got := calls(fs[0]); strings.Join(got, " ") != "5 5" {
		t.Errorf("the stock node's calls (two fences) carried %q keys, want 5 each", got)
	}
}
