package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/router"
)

// exampleNodes returns the YAML of two redis-server nodes, n1 and n2, at
// the addresses in $EXAMPLE_REDIS_ADDRS ("host:port,host:port"; default
// 127.0.0.1:6379 and 127.0.0.1:6380): start two empty redis-server
// processes and point it at them. This package's TestMain
// (testmain_test.go) starts two throwaway ones and sets it.
func exampleNodes() string {
	addrs := []string{"127.0.0.1:6379", "127.0.0.1:6380"}
	if env := os.Getenv("EXAMPLE_REDIS_ADDRS"); env != "" {
		addrs = strings.Split(env, ",")
	}
	return fmt.Sprintf("nodes:\n  n1: {addr: %q}\n  n2: {addr: %q}\n", addrs[0], addrs[1])
}

// Example reserves, confirms and cancels against two throwaway nodes with
// inventory.New over a router (rollback's example wires the reconciler
// too). Reserve is all or nothing and idempotent per order id.
func Example() {
	yaml := exampleNodes()
	yaml += "servers:\n  inventory:\n    routes: {clothes: [n1, n2]}\n"
	cfg, err := config.Parse([]byte(yaml), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	r, err := router.New(ctx, cfg, router.Options{KeepData: cfg.KeepData(), Logger: log})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	inv, err := inventory.New(r, inventory.Options{Logger: log})
	if err != nil {
		fmt.Println(err)
		return
	}

	_, _ = inv.LoadStock(ctx, "clothes", "tee", 10, 2) // 10 units, at most 2 per user
	items := []inventory.Item{{Route: "clothes", SKU: "tee", Quantity: 2}}
	res, err := inv.Reserve(ctx, "o-1", items, "alice", 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	again, _ := inv.Reserve(ctx, "o-1", items, "alice", 0) // a retry takes nothing more
	fmt.Println("receipts:", len(res.Receipts) > 0, "retry same:", len(again.Receipts) == len(res.Receipts))

	_, err = inv.Reserve(ctx, "o-2", items, "alice", 0)
	fmt.Println("alice again:", errors.Is(err, inventory.ErrLimitExceeded))

	out, _ := inv.Confirm(ctx, "o-1")
	fmt.Println("o-1:", out.Status)
	out, _ = inv.Cancel(ctx, "o-3") // never reserved: a tombstone
	_, err = inv.Reserve(ctx, "o-3", items, "bob", 0)
	fmt.Println("o-3:", out.Reason, errors.Is(err, inventory.ErrCancelled))

	lvl, _ := inv.GetStock(ctx, "clothes", "tee")
	fmt.Printf("available %d, reserved %d, confirmed %d\n", lvl.Available, lvl.Reserved, lvl.Confirmed)
	// Output:
	// receipts: true retry same: true
	// alice again: true
	// o-1: confirmed
	// o-3: tombstone true
	// available 8, reserved 0, confirmed 2
}
