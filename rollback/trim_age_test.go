package rollback_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/rollback"
)

// TestSubMillisecondTrimAgeStillTrims: a TrimAge above 0 and under 1ms is
// used as 1ms, so the reconciler's trim still removes settled,
// unacknowledged redo-log entries older than it. TrimAge is sent to the
// node as whole milliseconds, and filled() used to keep any positive
// TrimAge: one under 1ms went out as 0, which the node reads as "never
// trim an unacknowledged entry", the opposite of what was asked (and what
// inventory.redo_max_age, which config accepts down to 1ns, feeds it).
func TestSubMillisecondTrimAgeStillTrims(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	inv, _ := oneNodeInv(t, ctx)
	if _, err := inv.LoadStock(ctx, "r", "tee", 10, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := inv.Reserve(ctx, "o-1", []inventory.Item{{Route: "r", SKU: "tee", Quantity: 3}}, "", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := inv.Cancel(ctx, "o-1"); err != nil {
		t.Fatal(err)
	}
	before, err := inv.RedoLogLen(ctx, "n1")
	if err != nil || before == 0 {
		t.Fatalf("RedoLogLen before the pass = %d, %v; want > 0", before, err)
	}
	time.Sleep(5 * time.Millisecond) // older than 1ms
	rec := rollback.New(inv, nil, rollback.Settings{TrimEvery: 1, TrimAge: 500 * time.Microsecond, Logger: slog.New(slog.DiscardHandler)})
	defer rec.Close()
	if failed := rec.RunOnce(ctx); failed != 0 {
		t.Fatalf("RunOnce: %d failed steps", failed)
	}
	after, err := inv.RedoLogLen(ctx, "n1")
	if err != nil || after != 0 || rec.Stats().Trimmed != before {
		t.Errorf("TrimAge 500µs: redo log %d entries before the pass, %d after (%v), %d trimmed; want all trimmed",
			before, after, err, rec.Stats().Trimmed)
	}
}
