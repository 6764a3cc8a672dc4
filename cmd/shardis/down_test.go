package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/internal/service"
)

// A node down when the service starts is logged, naming it; with the
// only inventory node down, a call's error says that node is down, not a
// topology mismatch.
func TestOnlyInventoryNodeDownAtStart(t *testing.T) {
	t.Setenv(tokenEnv, "")
	dead := redistest.StartN(t, 1, redistest.Options{})[0]
	deadAddr := dead.Addr()
	dead.Kill()
	cfg := config.Default()
	cfg.Nodes = map[string]config.Node{"n1": {Addr: deadAddr, Weight: 1}}
	cfg.Servers = map[string]config.Server{"inventory": {OnNodeDown: config.OnNodeDownFail,
		Routes: map[string][]string{"clothes": {"n1"}}}}
	cfg.Service.Listen = "127.0.0.1:0"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv, err := service.Start(ctx, &cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatalf("service.Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	waitFor(t, &logs, `msg="node down at start" node=n1 addr=`+deadAddr)

	errOut := fails(t, 1, "shardis: unavailable: ", "stock", "get", "--addr", srv.Addr(), "--route", "clothes", "--sku", "tee")
	if !strings.Contains(errOut, "node is down: n1 is the only inventory node: node n1 ("+deadAddr) || strings.Contains(errOut, "topology epoch mismatch") {
		t.Fatalf("stock get with the only inventory node down: %q; want it named down, not a topology mismatch", errOut)
	}
}
