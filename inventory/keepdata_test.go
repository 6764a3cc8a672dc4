package inventory_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/router"
)

// An inventory over a router that does not keep its nodes' data would
// serve a node that restarted empty as if nothing was lost: New refuses
// it, naming the node and the option. No node is reached (New checks
// before any I/O), so the addresses need no server.
func TestNewRefusesRouterNotKeepingData(t *testing.T) {
	cfg := config.Default()
	cfg.Nodes = map[string]config.Node{"n1": {Addr: "127.0.0.1:1", Weight: 1}}
	cfg.Servers = map[string]config.Server{"inventory": {OnNodeDown: config.OnNodeDownFail, Routes: map[string][]string{"r": {"n1"}}}}
	cfg.Inventory.Server = "inventory"
	ctx := context.Background()
	for _, keep := range [][]string{nil, {"inventory"}} {
		r, err := router.New(ctx, &cfg, router.Options{Logger: slog.New(slog.DiscardHandler), KeepData: keep})
		if err != nil {
			t.Fatal(err)
		}
		_, err = inventory.New(r, inventory.Options{Logger: slog.New(slog.DiscardHandler)})
		r.Close()
		switch {
		case keep == nil && (err == nil || !strings.Contains(err.Error(), "node n1") || !strings.Contains(err.Error(), "KeepData")):
			t.Errorf("router without KeepData: New answered %v, want a refusal naming n1 and KeepData", err)
		case keep != nil && err != nil && strings.Contains(err.Error(), "KeepData"):
			t.Errorf("router keeping the inventory's data: New refused it: %v", err)
		}
	}
	if _, err := router.New(ctx, &cfg, router.Options{KeepData: []string{"nope"}}); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("KeepData naming an unknown server key: %v, want an error naming it", err)
	}
}
