package rollback_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/router"
)

// oneNodeInv is an inventory over one fresh node n1 (route r).
func oneNodeInv(t *testing.T, ctx context.Context) (*inventory.Inventory, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	cfg := config.Default()
	cfg.Nodes = map[string]config.Node{"n1": {Addr: srv.Addr(), Weight: 1}}
	cfg.Servers = map[string]config.Server{"inventory": {OnNodeDown: config.OnNodeDownFail, Routes: map[string][]string{"r": {"n1"}}}}
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
	return inv, srv
}
