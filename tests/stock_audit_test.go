package tests

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/internal/syncbuf"
	"github.com/shardis/shardis/rollback"
)

// The reconciler audits a node's stock counters once per server process:
// at its first pass, and again after the node restarts. A counter changed
// by half a script (here by hand, as a torn AOF replays a settle's
// confirmed HINCRBY: SECURITY.md, Persistence) while the node runs is
// found at the restart, logged as an error naming the hash, and counted
// in Unbalanced (shardis_unbalanced_stock_counters).
func TestReconcilerAuditsStockAfterARestart(t *testing.T) {
	t.Parallel()
	c := newInvCluster(t, invOpts{nodes: 1, aof: true})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.inv.LoadStock(ctx, "r", "s1", 10, 0); err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	rec := c.reconciler(nil, nil, rollback.Settings{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	rec.RunOnce(ctx)
	if got := rec.Unbalanced(); got["n1"] != 0 || len(got) != 1 {
		t.Fatalf("Unbalanced after the first pass = %v; want n1: 0", got)
	}

	if err := c.clients["n1"].HIncrBy(ctx, "inv:stock:r:s1", "confirmed", 1).Err(); err != nil {
		t.Fatal(err)
	}
	rec.RunOnce(ctx)
	if got := rec.Unbalanced()["n1"]; got != 0 {
		t.Fatalf("Unbalanced on the same server process = %d; want 0 (audited once per process)", got)
	}

	c.srv["n1"].Restart()
	for rec.Unbalanced()["n1"] != 1 {
		if ctx.Err() != nil {
			t.Fatalf("the restarted node's stock was not audited: Unbalanced %v; log:\n%s", rec.Unbalanced(), logs.String())
		}
		rec.RunOnce(ctx)
		time.Sleep(50 * time.Millisecond)
	}
	for _, want := range []string{"STOCK COUNTERS DO NOT ADD UP", "inv:stock:r:s1 on n1: available 10 + reserved 0 + confirmed 1 = 11, loaded 10"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the reconciler's log lacks %q:\n%s", want, logs.String())
		}
	}
}
