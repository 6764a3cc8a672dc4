package rollback_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/internal/syncbuf"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/rollback"
)

// TestSubMillisecondLeaseStillPasses: a Lease under 1ms is used as 1ms,
// so background passes still take their node's lease and give back an
// expired reservation. The lease is sent to the node as whole
// milliseconds (SET NX PX Lease.Milliseconds()), and filled() used to keep
// any positive Lease: one under 1ms went out as PX 0, which Redis refuses,
// so every background pass failed to take the lease and nothing expired
// was ever given back by the background reconciler.
func TestSubMillisecondLeaseStillPasses(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	inv, _ := oneNodeInv(t, ctx)
	if _, err := inv.LoadStock(ctx, "r", "tee", 10, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := inv.Reserve(ctx, "o-1", []inventory.Item{{Route: "r", SKU: "tee", Quantity: 3}}, "", time.Second); err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	rec := rollback.New(inv, nil, rollback.Settings{Interval: 50 * time.Millisecond, Lease: 500 * time.Microsecond,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	rec.Start()
	defer rec.Close()
	var lvl inventory.StockLevel
	for deadline := time.Now().Add(6 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if lvl, _ = inv.GetStock(ctx, "r", "tee"); lvl.Reserved == 0 {
			if strings.Contains(logs.String(), "taking the node lease") {
				t.Errorf("a background pass failed to take the lease: %s", logs.String())
			}
			return
		}
	}
	first, _, _ := strings.Cut(logs.String(), "\n")
	t.Errorf("6s after a 1s reservation expired, reserved %d; stats %+v; log: %s", lvl.Reserved, rec.Stats(), first)
}
