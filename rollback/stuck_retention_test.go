package rollback_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/rollback"
	"github.com/shardis/shardis/router"
)

// TestStuckRetryKeepsTheOrderRecord: a part set aside is retried within
// the inventory's retention however long its Settings' backoff
// (StuckRetryMax is capped at a quarter of inventory.retention), so each
// retry's expire op relies on its order's record again and keeps it
// alive: once the data is repaired the part of a confirmed order is
// confirmed. Before, StuckRetryMax was not bounded by the retention: with
// a backoff doubling past it the record of the confirmed order expired
// between two retries and, after the repair, the part was cancelled (its
// units sold again).
func TestStuckRetryKeepsTheOrderRecord(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const retention = 3 * time.Second
	srv := redistest.Start(t, redistest.Options{})
	cfg := config.Default()
	cfg.Nodes = map[string]config.Node{"n1": {Addr: srv.Addr(), Weight: 1}}
	cfg.Servers = map[string]config.Server{"inventory": {OnNodeDown: config.OnNodeDownFail, Routes: map[string][]string{"r": {"n1"}}}}
	cfg.Inventory.Retention = retention
	cfg.Inventory.ReservationTTL = time.Second
	cfg.Inventory.MaxReservationTTL = 2 * time.Second
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	r, err := router.New(ctx, &cfg, router.Options{KeepData: cfg.KeepData(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	inv, err := inventory.New(r, inventory.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(inv.Close)
	if inv.Retention() != retention {
		t.Fatalf("Retention() = %v, want %v", inv.Retention(), retention)
	}
	c := srv.Client(t)
	if _, err := inv.LoadStock(ctx, "r", "tee", 2, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := inv.Reserve(ctx, "o-1", []inventory.Item{{Route: "r", SKU: "tee", Quantity: 2}}, "", time.Second); err != nil {
		t.Fatal(err)
	}
	key := "inv:stock:r:tee"
	c.HSet(ctx, key, "reserved", "two") // corrupt: the settle is refused, the part set aside
	if out, err := inv.Confirm(ctx, "o-1"); err != nil || out.Status != inventory.StatusConfirmed {
		t.Fatalf("Confirm = %+v, %v; want confirmed", out, err)
	}
	// a backoff that doubles past the retention unless capped
	rec := rollback.New(inv, nil, rollback.Settings{StuckRetry: 200 * time.Millisecond, StuckRetryMax: time.Hour,
		Logger: slog.New(slog.DiscardHandler)})
	defer rec.Close()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		rec.RunOnce(ctx)
	}
	if rec.Stats().SetAside == 0 {
		t.Fatalf("the part was never set aside: %+v", rec.Stats())
	}
	if c.Exists(ctx, "inv:order:o-1").Val() == 0 {
		t.Errorf("the record of confirmed order o-1 expired while its part was set aside and retried")
	}
	c.HSet(ctx, key, "reserved", "2") // repaired
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		rec.RunOnce(ctx)
		if lvl, err := inv.GetStock(ctx, "r", "tee"); err == nil && lvl.Confirmed == 2 {
			return
		}
	}
	lvl, err := inv.GetStock(ctx, "r", "tee")
	t.Fatalf("after the repair: %+v, %v; want the 2 units of confirmed o-1 confirmed", lvl, err)
}
