package pgsync_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/shardis/shardis/internal/stack"
	"github.com/shardis/shardis/internal/syncbuf"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/pgsync"
)

// logBuf collects JSON log lines of a syncer for a test to read.
type logBuf struct{ syncbuf.Buffer }

func (b *logBuf) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(b, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// lines returns the logged records whose message contains msg.
func (b *logBuf) lines(msg string) []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(b.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(l), &rec) == nil && strings.Contains(fmt.Sprint(rec["msg"]), msg) {
			out = append(out, rec)
		}
	}
	return out
}

// openSyncer opens and starts an in-process sync with set, logging to
// log, closed when the test ends.
func (e *env) openSyncer(log *slog.Logger, set pgsync.Settings) *stack.Sync {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := stack.OpenSync(ctx, e.cfg, stack.SyncOptions{Logger: log, Migrate: true, Settings: set})
	if err != nil {
		e.t.Fatal(err)
	}
	st.Syncer.Start()
	e.t.Cleanup(st.Close)
	return st
}

// reserveN reserves n one-unit orders prefix-0… of route/sku for ttl.
func (e *env) reserveN(prefix, route, sku string, n int, ttl time.Duration) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range n {
		id := fmt.Sprintf("%s-%d", prefix, i)
		if _, err := e.inv.Reserve(ctx, id, []inventory.Item{{Route: route, SKU: sku, Quantity: 1}}, "", ttl); err != nil {
			e.t.Fatalf("Reserve %s: %v", id, err)
		}
	}
}
