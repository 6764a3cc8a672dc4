package explore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/inventory"
)

// TestSettleAllFollowsPutOffParts: the healer waits for a part the
// reconciler rightly puts off past its own deadline. Order ox is reserved
// until about 1.5 s from now, but its parts' pending-index entries say
// their deadlines passed 3 s ago, as when the order's stage landed long
// after its parts' takes (seed 28438 of the stall profile, whose staged
// record was parked for a phase). The reconciler's first pass finds the
// order still reserved by the same attempt and puts the parts off to its
// deadline (ResolveExpired); settleAll must then wait for that deadline
// and settle them, not give up at healBound past the deadlines it read
// before the pass (which left the parts pending and failed the quiet
// check).
func TestSettleAllFollowsPutOffParts(t *testing.T) {
	w, ctx := testWorld(t, false, time.Minute)
	if err := w.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	inv, err := inventory.New(w.healR, inventory.Options{Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	defer inv.Close()
	if _, err := inv.LoadStock(ctx, "a", "s", stockPerSKU, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := inv.Reserve(ctx, "ox", []inventory.Item{{Route: "a", SKU: "s", Quantity: 1}}, "", 1500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	past := float64(time.Now().Add(-3 * time.Second).UnixMilli())
	moved := 0
	for _, name := range allNodes {
		zs, err := w.direct[name].ZRangeWithScores(ctx, inventory.PendingKey, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, z := range zs {
			if err := w.direct[name].ZAddXX(ctx, inventory.PendingKey, redis.Z{Score: past, Member: z.Member}).Err(); err != nil {
				t.Fatal(err)
			}
			moved++
		}
	}
	if moved == 0 {
		t.Fatal("the reserved order has no part in any pending index")
	}
	waited := w.settleAll(ctx, nil, inv)
	if _, _, n, err := w.pendingSpan(ctx); err != nil || n != 0 {
		t.Fatalf("after settleAll (waited %s) %d parts are pending (%v), want none", waited, n, err)
	}
	if waited < time.Second {
		t.Errorf("settleAll waited %s: the order's deadline was about 1.5 s away", waited)
	}
}

// testWorld starts a world for t (with the clock skew library when skew),
// closed when t ends, and a context that ends after limit; it skips t
// with -short.
func testWorld(t *testing.T, skew bool, limit time.Duration) (*World, context.Context) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts four redis-server nodes")
	}
	w, err := newWorld(skew)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	t.Cleanup(cancel)
	return w, ctx
}
