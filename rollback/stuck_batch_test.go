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

// TestLargeBatchStillRetriesStuck: a Batch above 10000 is used as 10000,
// so a part set aside is still retried by itself with backoff and its
// units come back once its data is repaired. Settings.Batch used to have
// no upper bound, and each node pass hands it to RetryDueStuck as its
// limit, which refuses anything above 10000: with Batch 20000 that step
// failed on every pass and stuck parts stayed reserved for good.
func TestLargeBatchStillRetriesStuck(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	inv, srv := oneNodeInv(t, ctx)
	c := srv.Client(t)
	if _, err := inv.LoadStock(ctx, "r", "tee", 10, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := inv.Reserve(ctx, "o-1", []inventory.Item{{Route: "r", SKU: "tee", Quantity: 3}}, "", time.Second); err != nil {
		t.Fatal(err)
	}
	key := "inv:stock:r:tee"
	orig := c.HGet(ctx, key, "reserved").Val()
	c.HSet(ctx, key, "reserved", "x") // corrupt: the expiry sets the part aside

	var logs syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rec := rollback.New(inv, nil, rollback.Settings{Batch: 20000, StuckRetry: time.Millisecond, StuckRetryMax: time.Millisecond, Logger: log})
	defer rec.Close()
	for deadline := time.Now().Add(15 * time.Second); rec.Stats().SetAside == 0; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the part was not set aside: %+v", rec.Stats())
		}
		rec.RunOnce(ctx)
	}
	c.HSet(ctx, key, "reserved", orig) // repaired
	failed := 0
	for range 5 {
		time.Sleep(50 * time.Millisecond)
		failed += rec.RunOnce(ctx)
	}
	stuck, err := inv.StuckParts(ctx, "n1", 100)
	if err != nil {
		t.Fatal(err)
	}
	lvl, err := inv.GetStock(ctx, "r", "tee")
	if err != nil {
		t.Fatal(err)
	}
	if len(stuck) != 0 || lvl.Reserved != 0 || rec.Stats().Retried == 0 || failed != 0 {
		line := ""
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "stuck") {
				line = l
				break
			}
		}
		t.Errorf("Batch 20000: after repair and 5 passes (%d failed steps, stats %+v) %d part(s) still stuck, reserved %d; log: %s",
			failed, rec.Stats(), len(stuck), lvl.Reserved, line)
	}
}
