package rollback_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/rollback"
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

// Example embeds the inventory with its reconciler, wired the way
// `shardis serve` wires them (internal/stack): a router whose node-up
// events wake the reconciler, the inventory over it with the
// deferred-settle queue, and the reconciler. A reservation nobody confirms
// is returned by the reconciler after its TTL.
func Example() {
	yaml := exampleNodes()
	yaml += `servers:
  inventory:
    routes: {clothes: [n1, n2]}
inventory:
  reconcile_interval: 100ms
`
	cfg, err := config.Parse([]byte(yaml), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var wake rollback.Waker
	r, err := router.New(ctx, cfg, router.Options{KeepData: cfg.KeepData(), Logger: log, OnStateChange: wake.OnStateChange})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	queue := rollback.NewQueue()
	inv, err := inventory.New(r, inventory.Options{Deferrer: queue, Logger: log})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer inv.Close() // after the reconciler's Close, before the router's
	rec := rollback.New(inv, queue, rollback.Settings{Interval: cfg.Inventory.ReconcileInterval, Logger: log})
	wake.Set(rec)
	rec.Start()
	defer rec.Close()

	if _, err := inv.LoadStock(ctx, "clothes", "tee", 10, 0); err != nil {
		fmt.Println(err)
		return
	}
	items := []inventory.Item{{Route: "clothes", SKU: "tee", Quantity: 3}}
	if _, err := inv.Reserve(ctx, "o-1", items, "", time.Second); err != nil {
		fmt.Println(err)
		return
	}
	lvl, _ := inv.GetStock(ctx, "clothes", "tee")
	fmt.Printf("reserved: available %d, reserved %d\n", lvl.Available, lvl.Reserved)

	// Nobody confirms o-1: after its TTL (1s) and a reconciler pass, the
	// units are back.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if lvl, _ = inv.GetStock(ctx, "clothes", "tee"); lvl.Reserved == 0 {
			break
		}
	}
	fmt.Printf("expired: available %d, reserved %d\n", lvl.Available, lvl.Reserved)
	_, err = inv.Confirm(ctx, "o-1")
	fmt.Println("confirm after expiry:", err != nil)
	// Output:
	// reserved: available 7, reserved 3
	// expired: available 10, reserved 0
	// confirm after expiry: true
}
