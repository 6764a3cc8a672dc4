package inventory_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/router"
)

// benchInventory starts three redis-server nodes n1..n3 (no persistence)
// and returns an inventory over them with these routes of the "inventory"
// server: "all" over the three nodes, and "r1", "r2", "r3" on one node
// each, so the items of a 3-item order over r1..r3 live on three nodes.
// Every SKU in skus is loaded on every route with 10⁹ units, so the
// benchmarks never run out of stock.
func benchInventory(b *testing.B, skus ...string) *inventory.Inventory {
	b.Helper()
	srvs := redistest.StartN(b, 3, redistest.Options{})
	cfg := config.Default()
	cfg.Nodes = map[string]config.Node{}
	names := []string{"n1", "n2", "n3"}
	for i, s := range srvs {
		cfg.Nodes[names[i]] = config.Node{Addr: s.Addr(), Weight: 1}
	}
	cfg.Servers = map[string]config.Server{"inventory": {OnNodeDown: config.OnNodeDownFail, Routes: map[string][]string{
		"all": names, "r1": {"n1"}, "r2": {"n2"}, "r3": {"n3"},
	}}}
	log := slog.New(slog.DiscardHandler)
	ctx := context.Background()
	r, err := router.New(ctx, &cfg, router.Options{KeepData: cfg.KeepData(), Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.Close() })
	inv, err := inventory.New(r, inventory.Options{Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(inv.Close) // runs before the router's Close, registered earlier
	for _, route := range []string{"all", "r1", "r2", "r3"} {
		for _, sku := range skus {
			if _, err := inv.LoadStock(ctx, route, sku, inventory.MaxQuantity, 0); err != nil {
				b.Fatal(err)
			}
		}
	}
	return inv
}

// benchReserve reserves one order per iteration, each with a new order id
// (building it is one of the reported allocations), without a user (no
// per-user quota part). Run with -benchmem, or read allocs/op: they are
// the allocations of the whole Reserve call, go-redis included.
func benchReserve(b *testing.B, inv *inventory.Inventory, items []inventory.Item) {
	ctx := context.Background()
	buf := []byte("bench-")
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		id := string(strconv.AppendInt(buf[:6], int64(i), 10))
		i++
		if _, err := inv.Reserve(ctx, id, items, "", 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReserve1Item reserves 1 unit of a SKU whose stock is split over
// three nodes: begin on the order's home node, one reserve script on the
// item's first candidate node, commit.
func BenchmarkReserve1Item(b *testing.B) {
	inv := benchInventory(b, "sku-1")
	benchReserve(b, inv, []inventory.Item{{Route: "all", SKU: "sku-1", Quantity: 1}})
}

// BenchmarkReserveMinted reserves 1 unit of a SKU on one node (route r1)
// under an id minted by NewOrderID given the items, inside the loop: the
// record sits next to the stock, and the order is one script (the minted
// hot-SKU row of the benchmarks, one order at a time).
func BenchmarkReserveMinted(b *testing.B) {
	inv := benchInventory(b, "sku-1")
	items := []inventory.Item{{Route: "r1", SKU: "sku-1", Quantity: 1}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		id, err := inv.NewOrderID(ctx, items...)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := inv.Reserve(ctx, id, items, "", 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReserve3Items reserves one unit each of three SKUs on three
// different nodes (routes r1, r2, r3): begin, three reserve scripts run
// concurrently, commit.
func BenchmarkReserve3Items(b *testing.B) {
	inv := benchInventory(b, "sku-1", "sku-2", "sku-3")
	benchReserve(b, inv, threeItems())
}

// BenchmarkReserve1ItemParallel is BenchmarkReserve1Item from GOMAXPROCS*8
// goroutines at once: the throughput side, where the nodes' CPU, not the
// round trips, is the limit.
func BenchmarkReserve1ItemParallel(b *testing.B) {
	inv := benchInventory(b, "sku-1")
	items := []inventory.Item{{Route: "all", SKU: "sku-1", Quantity: 1}}
	ctx := context.Background()
	var seq atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		buf := []byte("benchp-")
		for pb.Next() {
			id := string(strconv.AppendInt(buf[:7], seq.Add(1), 10))
			if _, err := inv.Reserve(ctx, id, items, "", 0); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkReserve3ItemsParallel is BenchmarkReserve3Items from
// GOMAXPROCS*8 goroutines at once.
func BenchmarkReserve3ItemsParallel(b *testing.B) {
	inv := benchInventory(b, "sku-1", "sku-2", "sku-3")
	items := threeItems()
	ctx := context.Background()
	var seq atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		buf := []byte("benchp-")
		for pb.Next() {
			id := string(strconv.AppendInt(buf[:7], seq.Add(1), 10))
			if _, err := inv.Reserve(ctx, id, items, "", 0); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkReserveMintedParallel reserves 1 unit of a SKU whose stock
// lives on one node (route r1), with order ids minted by NewOrderID for
// the items, so every record sits next to the stock and each order is one
// script (shared with the others waiting on the node): the hot-SKU minted
// row of `make bench`, in the caller's process, from GOMAXPROCS*8
// goroutines.
func BenchmarkReserveMintedParallel(b *testing.B) {
	inv := benchInventory(b, "sku-1")
	items := []inventory.Item{{Route: "r1", SKU: "sku-1", Quantity: 1}}
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id, err := inv.NewOrderID(ctx, items...)
			if err == nil {
				_, err = inv.Reserve(ctx, id, items, "", 0)
			}
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkReserveSoldOutParallel sends 1-item orders with distinct ids
// for a SKU of route r1 whose one unit is sold (reserved and confirmed in
// the setup), from GOMAXPROCS*8 goroutines: the sold-out row of `make
// bench` in the caller's process. Every order must be refused with
// ErrInsufficientStock.
func BenchmarkReserveSoldOutParallel(b *testing.B) {
	inv := benchInventory(b)
	ctx := context.Background()
	items := []inventory.Item{{Route: "r1", SKU: "sold", Quantity: 1}}
	if _, err := inv.LoadStock(ctx, "r1", "sold", 1, 0); err != nil {
		b.Fatal(err)
	}
	if _, err := inv.Reserve(ctx, "last-unit", items, "", 0); err != nil {
		b.Fatal(err)
	}
	if _, err := inv.Confirm(ctx, "last-unit"); err != nil {
		b.Fatal(err)
	}
	var seq atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		buf := []byte("benchs-")
		for pb.Next() {
			id := string(strconv.AppendInt(buf[:7], seq.Add(1), 10))
			if _, err := inv.Reserve(ctx, id, items, "", 0); !errors.Is(err, inventory.ErrInsufficientStock) {
				b.Errorf("order %s: got %v, want ErrInsufficientStock", id, err)
				return
			}
		}
	})
}

// BenchmarkConfirmParallel confirms 1-item orders of a SKU whose stock
// lives on one node (route r1), reserved with ids minted for the items
// before the timer starts (one script each: record and part on the stock's
// node), from GOMAXPROCS*8 goroutines: each Confirm decides the record
// and settles the part in the same script (inline.go), which appends its
// settled-log entry (settledlog.go). With the entry's XADD cut out of
// lua/part_codec.lua, three paired runs of 20000 confirms read 65.6–69.2
// µs/op against 66.4–70.2 µs/op with it, when the part was settled by a
// second script (2026-12-04, this 2-core machine); settled with the
// decision, three paired runs read 45.0–46.5 µs/op against 60.8–66.6
// µs/op (33 allocations against 46; 2026-12-05, idle).
func BenchmarkConfirmParallel(b *testing.B) {
	inv := benchInventory(b, "sku-1")
	items := []inventory.Item{{Route: "r1", SKU: "sku-1", Quantity: 1}}
	ctx := context.Background()
	ids := make([]string, b.N)
	for i := range ids {
		id, err := inv.NewOrderID(ctx, items...)
		if err == nil {
			_, err = inv.Reserve(ctx, id, items, "", time.Hour)
		}
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = id
	}
	confirmAll(b, inv, ids)
}

// BenchmarkConfirm3ItemsParallel confirms 3-item orders with one item on
// each of r1, r2 and r3 (one node each), reserved by the one-round path
// before the timer starts (a stage on the order's home, takes on the two
// other nodes, so each order has a part record on two nodes other than
// its home), from GOMAXPROCS*8 goroutines: each Confirm decides the
// record on the home (settling the home's part inline) and settles the
// other two parts in one round (round.go), a settle script on each of
// their nodes at once. Three paired runs of 10000 confirms read
// 118.6–126.3 µs/op with the settles sent by sendRound against
// 124.3–127.1 µs/op with a goroutine per node (2026-12-05, idle); two more,
// after its calls moved to arrays on the stack, 119.4 and 121.5 against
// 122.7 and 127.0 µs/op, 103–104 allocations against 107–108.
func BenchmarkConfirm3ItemsParallel(b *testing.B) {
	inv := benchInventory(b, "sku-1", "sku-2", "sku-3")
	items := threeItems()
	ctx := context.Background()
	ids := make([]string, b.N)
	buf := []byte("confirm3-")
	for i := range ids {
		ids[i] = string(strconv.AppendInt(buf[:9], int64(i), 10))
		if _, err := inv.Reserve(ctx, ids[i], items, "", time.Hour); err != nil {
			b.Fatal(err)
		}
	}
	confirmAll(b, inv, ids)
}

// confirmAll confirms the orders ids, each once, from GOMAXPROCS*8
// goroutines, the timer reset first: the Confirm benchmarks' loop.
func confirmAll(b *testing.B, inv *inventory.Inventory, ids []string) {
	ctx := context.Background()
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := ids[next.Add(1)-1]
			if _, err := inv.Confirm(ctx, id); err != nil {
				b.Errorf("Confirm %s: %v", id, err)
				return
			}
		}
	})
}

// threeItems is an order of one unit each of sku-1, sku-2 and sku-3 on
// routes r1, r2 and r3 (one node each, benchInventory): the 3-item
// benchmarks' order.
func threeItems() []inventory.Item {
	return []inventory.Item{
		{Route: "r1", SKU: "sku-1", Quantity: 1},
		{Route: "r2", SKU: "sku-2", Quantity: 1},
		{Route: "r3", SKU: "sku-3", Quantity: 1},
	}
}
