package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/internal/service"
	"github.com/shardis/shardis/node"
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

// recordingRedisLogger records what go-redis logs through it.
type recordingRedisLogger struct{ lines syncBuffer }

func (l *recordingRedisLogger) Printf(_ context.Context, format string, v ...any) {
	fmt.Fprintf(&l.lines, format+"\n", v...)
}

// go-redis's own lines (pool.go's "failed to dial" while a node is down)
// go through the command's slog logger, not go-redis's default logger
// (stderr, bypassing slog): run installs it for every command.
func TestGoRedisLogsGoThroughSlog(t *testing.T) {
	dead := redistest.StartN(t, 1, redistest.Options{})[0]
	deadAddr := dead.Addr()
	dead.Kill()
	path := filepath.Join(t.TempDir(), "c.yaml")
	yml := fmt.Sprintf("nodes:\n  n1: {addr: %s}\nservers:\n  inventory: {routes: {clothes: [n1]}}\n", deadAddr)
	if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	rec := &recordingRedisLogger{}
	redis.SetLogger(rec) // what a process that routed nothing has: not slog
	t.Cleanup(func() { node.RouteRedisLogs(slog.New(slog.DiscardHandler)) })
	code, out, errOut := cli(t, "topology", "show", "--config", path)
	// n1 cannot be read: the report names it, and exits 1.
	if code != 1 || !strings.Contains(out, "n1") {
		t.Fatalf("topology show: exit %d\n%s\n%s", code, out, errOut)
	}
	if got := rec.lines.String(); got != "" {
		t.Fatalf("go-redis logged outside slog while shardis ran:\n%s", got)
	}
}
