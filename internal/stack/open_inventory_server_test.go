package stack_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/internal/stack"
)

// A `shardis serve` configuration whose inventory.server names no server of
// the servers section is a configuration error: the error must name the
// bad input (inventory.server), as inventory.New's own check does, not a
// Go option (router.Options.KeepData) the operator never set.
// TestOpenNamesInventoryServerNotConfigured: a configuration whose
// inventory.server is not among its servers is refused naming that key.
// The router refused it first, naming router.Options.KeepData, an option
// of the Go API no operator sets (found by a review).
func TestOpenNamesInventoryServerNotConfigured(t *testing.T) {
	n1 := redistest.Start(t, redistest.Options{})
	cfg := config.Default()
	cfg.Nodes = map[string]config.Node{"n1": {Addr: n1.Addr(), Weight: 1}}
	cfg.Servers = map[string]config.Server{"cache": {OnNodeDown: config.OnNodeDownFail, Routes: map[string][]string{"r": {"n1"}}}}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	st, err := stack.Open(context.Background(), &cfg, stack.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil {
		st.Close()
		t.Fatal("Open succeeded without the inventory server configured")
	}
	t.Logf("Open: %v", err)
	if !strings.Contains(err.Error(), "inventory.server") || strings.Contains(err.Error(), "KeepData") {
		t.Errorf("Open's error = %q; want it to name inventory.server (the configuration key), not router.Options.KeepData", err)
	}
}
