package inventory_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/rollback"
	"github.com/shardis/shardis/router"
)

func TestSmoke(t *testing.T) {
	srvs := redistest.StartN(t, 3, redistest.Options{})
	cfg := config.Default()
	cfg.Nodes = map[string]config.Node{}
	names := []string{"n1", "n2", "n3"}
	for i, s := range srvs {
		cfg.Nodes[names[i]] = config.Node{Addr: s.Addr(), Weight: 1}
	}
	cfg.Servers = map[string]config.Server{"inventory": {OnNodeDown: "fail", Routes: map[string][]string{"clothes": names}}}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	r, err := router.New(ctx, &cfg, router.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	q := rollback.NewQueue()
	inv, err := inventory.New(r, inventory.Options{Deferrer: q, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	lvl, err := inv.LoadStock(ctx, "clothes", "sku1", 10, 0)
	t.Logf("load: %+v %v", lvl, err)
	res, err := inv.Reserve(ctx, "o1", []inventory.Item{{Route: "clothes", SKU: "sku1", Quantity: 5}}, "u1", 0)
	t.Logf("reserve: %+v %v", res, err)
	res2, err := inv.Reserve(ctx, "o1", []inventory.Item{{Route: "clothes", SKU: "sku1", Quantity: 5}}, "u1", 0)
	t.Logf("reserve again: %+v %v", res2, err)
	_, err = inv.Reserve(ctx, "o2", []inventory.Item{{Route: "clothes", SKU: "sku1", Quantity: 6}}, "u1", 0)
	t.Logf("reserve short: %v is=%v", err, errors.Is(err, inventory.ErrInsufficientStock))
	out, err := inv.Confirm(ctx, "o1")
	t.Logf("confirm: %+v %v", out, err)
	out, err = inv.Cancel(ctx, "o1")
	t.Logf("cancel confirmed: %+v %v", out, err)
	out, err = inv.Cancel(ctx, "o3")
	t.Logf("cancel unknown: %+v %v", out, err)
	_, err = inv.Reserve(ctx, "o3", []inventory.Item{{Route: "clothes", SKU: "sku1", Quantity: 1}}, "u1", 0)
	t.Logf("reserve tombstoned: %v", err)
	_, err = inv.Reserve(ctx, "o4", []inventory.Item{{Route: "clothes", SKU: "sku1", Quantity: 2}}, "u2", time.Second)
	t.Logf("reserve short ttl: %v", err)
	time.Sleep(2500 * time.Millisecond)
	rec := rollback.New(inv, q, rollback.Settings{Logger: log})
	rec.RunOnce(ctx)
	t.Logf("stats %+v", rec.Stats())
	_, err = inv.Confirm(ctx, "o4")
	t.Logf("confirm expired: %v", err)
	lvl, err = inv.GetStock(ctx, "clothes", "sku1")
	t.Logf("stock: %+v %v", lvl, err)
	for _, n := range r.Nodes() {
		e, err := inv.ReadRedoLog(ctx, n.Name(), 0, 0, 100)
		_ = e
		_ = err
	}
	lvl, err = inv.LoadStock(ctx, "clothes", "sku2", 6, 1)
	_, err = inv.Reserve(ctx, "o5", []inventory.Item{{Route: "clothes", SKU: "sku2", Quantity: 2}}, "u9", 0)
	t.Logf("over limit: %v", err)
	_, err = inv.Reserve(ctx, "o6", []inventory.Item{{Route: "clothes", SKU: "sku2", Quantity: 1}}, "u9", 0)
	t.Logf("at limit: %v", err)
	_, err = inv.Reserve(ctx, "o7", []inventory.Item{{Route: "clothes", SKU: "sku2", Quantity: 1}}, "u9", 0)
	t.Logf("again: %v", err)
	lvl, err = inv.GetStock(ctx, "clothes", "sku2")
	t.Logf("stock2: %+v %v", lvl, err)
}
