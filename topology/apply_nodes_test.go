package topology_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/router"
)

// Helpers of the tests that apply over real nodes (redistest servers)
// through the inventory's driver.

// routeConfig is a validated configuration of one route r over the
// given servers, named n1, n2, ...
func routeConfig(t *testing.T, srvs []*redistest.Server) *config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.Nodes = map[string]config.Node{}
	var names []string
	for i, s := range srvs {
		name := fmt.Sprintf("n%d", i+1)
		names = append(names, name)
		cfg.Nodes[name] = config.Node{Addr: s.Addr(), Weight: 1}
	}
	cfg.Servers = map[string]config.Server{"inventory": {OnNodeDown: config.OnNodeDownFail, Routes: map[string][]string{"r": names}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return &cfg
}

// initNodes opens one instance over cfg so the nodes get epoch 1, and
// closes it.
func initNodes(t *testing.T, ctx context.Context, cfg *config.Config) {
	t.Helper()
	r, err := router.New(ctx, cfg, router.Options{KeepData: cfg.KeepData(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	inv, err := inventory.New(r, inventory.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer inv.Close()
	if _, err := inv.LoadStock(ctx, "r", "tee", 10, 0); err != nil {
		t.Fatal(err)
	}
}

// stackLine is the panicking frame of topology/apply.go in the stack.
func stackLine() string {
	for _, l := range strings.Split(string(debug.Stack()), "\n") {
		if strings.Contains(l, "topology/apply.go") {
			return strings.TrimSpace(l)
		}
	}
	return ""
}
