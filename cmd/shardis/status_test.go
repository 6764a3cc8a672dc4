package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/internal/service"
)

// startWith starts a service over nodes with the given inventory routes.
func startWith(t *testing.T, nodes []*redistest.Server, routes map[string][]string) string {
	t.Helper()
	cfg := config.Default()
	cfg.Nodes = map[string]config.Node{}
	for i, s := range nodes {
		cfg.Nodes[fmt.Sprintf("n%d", i+1)] = config.Node{Addr: s.Addr(), Weight: 1}
	}
	cfg.Servers = map[string]config.Server{"inventory": {OnNodeDown: config.OnNodeDownFail, Routes: routes}}
	cfg.Service.Listen = "127.0.0.1:0"
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv, err := service.Start(ctx, &cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatalf("service.Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return srv.Addr()
}

// `shardis status` of an instance whose configuration adds a node for a
// new route says what is pending; the instance at the applied topology
// says nothing more than its nodes.
func TestStatusShowsPendingTopology(t *testing.T) {
	t.Setenv(tokenEnv, "")
	nodes := redistest.StartN(t, 3, redistest.Options{})
	applied := startWith(t, nodes, map[string][]string{"clothes": {"n1", "n2"}})
	deployed := startWith(t, nodes, map[string][]string{"clothes": {"n1", "n2"}, "x": {"n3"}})
	want := "SERVICE: ready; pending topology change: config epoch differs: +n3 (route x)"
	if out := ok(t, deployed, "status"); !strings.Contains(out, want) {
		t.Fatalf("status of the deployed instance:\n%s\nwant a line %q", out, want)
	}
	if out := ok(t, applied, "status"); strings.Contains(out, "SERVICE:") {
		t.Fatalf("status of the instance at the applied topology:\n%s\nwant no SERVICE line", out)
	}
}
