package rollback_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redisproc"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/rollback"
)

// Example embeds the inventory with its reconciler: Open wires the router,
// the inventory, the deferred-settle queue and the reconciler, as
// `shardis serve` does. A reservation nobody confirms is returned by the
// reconciler after its TTL.
func Example() {
	var yaml = "nodes:\n"
	for _, name := range []string{"n1", "n2"} {
		p, err := redisproc.Start(redisproc.Options{KillWithParent: true})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return
		}
		defer p.Close()
		yaml += fmt.Sprintf("  %s: {addr: %q}\n", name, p.Addr())
	}
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
	st, err := rollback.Open(ctx, cfg, rollback.OpenOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()

	inv := st.Inventory
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
