package rollback_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/rollback"
)

// Parts whose record cannot be read, or is gone while the pending index
// lists them, are set aside like any part that cannot be settled: never
// dropped with their units reserved, never holding up the node's other
// parts, never lost from every index by a retry.

// quietReconciler is a reconciler over inv whose automatic retries of
// stuck parts come after retry (at most retry).
func quietReconciler(t *testing.T, inv *inventory.Inventory, retry time.Duration) *rollback.Reconciler {
	t.Helper()
	rec := rollback.New(inv, nil, rollback.Settings{StuckRetry: retry, StuckRetryMax: retry, Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(rec.Close)
	return rec
}

// reserveDue reserves 3 units of r/tee for order o-1 on inv's one node,
// due a second later, and waits until it is due.
func reserveDue(t *testing.T, ctx context.Context, inv *inventory.Inventory) {
	t.Helper()
	if _, err := inv.LoadStock(ctx, "r", "tee", 10, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := inv.Reserve(ctx, "o-1", []inventory.Item{{Route: "r", SKU: "tee", Quantity: 3}}, "", time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond) // the deadline, and the parts' grace past it
}

// One pending part whose record cannot be read (a list; a packed record
// whose token length does not parse) is set aside, and the node's other
// due parts are settled: the due listing failed as a whole on it, every
// pass, and no expired reservation of the node came back.
func TestUnreadablePartDoesNotHoldUpItsNode(t *testing.T) {
	t.Parallel()
	for name, corrupt := range map[string]func(context.Context, *redis.Client, string) error{
		"list": func(ctx context.Context, c *redis.Client, k string) error { return c.RPush(ctx, k, "x").Err() },
		"packed": func(ctx context.Context, c *redis.Client, k string) error {
			return c.Set(ctx, k, "p\x1fs\x1f3\x1f\x1f\x1f\x1f\x1f\x1f\x1fzz", 0).Err()
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			inv, srv := oneNodeInv(t, ctx)
			c := srv.Client(t)
			bad := "o-9|t9|0"
			if err := c.ZAdd(ctx, inventory.PendingKey, redis.Z{Score: 1, Member: bad}).Err(); err != nil {
				t.Fatal(err)
			}
			if err := corrupt(ctx, c, "inv:part:"+bad); err != nil {
				t.Fatal(err)
			}
			reserveDue(t, ctx, inv)
			rec := quietReconciler(t, inv, time.Hour)
			for range 2 {
				rec.RunOnce(ctx)
			}
			lvl, err := inv.GetStock(ctx, "r", "tee")
			if err != nil {
				t.Fatal(err)
			}
			stuck, err := inv.StuckParts(ctx, "n1", 10)
			if err != nil {
				t.Fatal(err)
			}
			if lvl.Reserved != 0 || len(stuck) != 1 || stuck[0].PartID != bad {
				t.Fatalf("after 2 passes: %d units reserved (want 0: o-1 expired), stuck %+v (want %s); stats %+v",
					lvl.Reserved, stuck, bad, rec.Stats())
			}
			if st := rec.Stats(); st.SetAside != 1 || st.Cancelled != 1 {
				t.Errorf("stats %+v, want 1 set aside and 1 cancelled", st)
			}
		})
	}
}

// The part of a one-node order is held inline in its order record; with
// that record gone (deleted) or unreadable (a list), the part is set
// aside, its units still reserved and listed: it was dropped from the
// pending index and counted nowhere, its units reserved for good.
func TestInlinePartWithoutItsOrderRecordIsSetAside(t *testing.T) {
	t.Parallel()
	for name, corrupt := range map[string]func(context.Context, *redis.Client, string) error{
		"deleted": func(ctx context.Context, c *redis.Client, k string) error { return c.Del(ctx, k).Err() },
		"list": func(ctx context.Context, c *redis.Client, k string) error {
			if err := c.Del(ctx, k).Err(); err != nil {
				return err
			}
			return c.RPush(ctx, k, "x").Err()
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			inv, srv := oneNodeInv(t, ctx)
			c := srv.Client(t)
			reserveDue(t, ctx, inv)
			if err := corrupt(ctx, c, "inv:order:o-1"); err != nil {
				t.Fatal(err)
			}
			rec := quietReconciler(t, inv, time.Hour)
			for range 2 {
				rec.RunOnce(ctx)
			}
			stuck, err := inv.StuckParts(ctx, "n1", 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(stuck) != 1 || !strings.HasPrefix(stuck[0].PartID, "o-1|") || !strings.Contains(stuck[0].Reason, "gone") {
				t.Fatalf("stuck %+v, want o-1's part set aside, its record gone; stats %+v", stuck, rec.Stats())
			}
			if n := c.ZCard(ctx, inventory.PendingKey).Val(); n != 0 {
				t.Errorf("%d parts left pending, want the part moved to the stuck index", n)
			}
		})
	}
}

// An automatic retry of a set-aside part whose record cannot be read
// leaves it set aside, its reason kept and its next retry later: the
// retry removed it from the stuck index before reading its record, which
// then failed, and the part was in no index at all.
func TestStuckRetryKeepsAnUnreadablePartSetAside(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	inv, srv := oneNodeInv(t, ctx)
	c := srv.Client(t)
	bad := "o-9|t9|0"
	now := time.Now().UnixMilli()
	_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, "inv:stuck", redis.Z{Score: float64(now - 10_000), Member: bad})
		p.HSet(ctx, "inv:stuck:why", bad, "why")
		p.ZAdd(ctx, "inv:stuck:retry", redis.Z{Score: 1, Member: bad})
		p.RPush(ctx, "inv:part:"+bad, "x")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := quietReconciler(t, inv, time.Minute)
	for range 3 {
		rec.RunOnce(ctx)
	}
	stuck, err := inv.StuckParts(ctx, "n1", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(stuck) != 1 || stuck[0].PartID != bad || stuck[0].Reason != "why" || stuck[0].Problem == "" {
		t.Fatalf("stuck %+v, want %s still set aside with its reason and a problem reading it", stuck, bad)
	}
	at, err := c.ZScore(ctx, "inv:stuck:retry", bad).Result()
	if err != nil {
		t.Fatalf("no retry time left for the part: %v", err)
	}
	// set aside 10 s ago: retried 10 s from now (at most the minute)
	if wait := time.Duration(int64(at)-time.Now().UnixMilli()) * time.Millisecond; wait < 8*time.Second || wait > time.Minute {
		t.Errorf("next retry in %v, want about 10s", wait)
	}
	if n := c.ZCard(ctx, inventory.PendingKey).Val(); n != 0 {
		t.Errorf("%d parts pending, want none", n)
	}
}

// A part settled while set aside (a deferred settle after its data was
// repaired) leaves the stuck index in the same script: a stuck part
// whose record is gone is then one that never settled, kept set aside
// (the retry above) rather than taken for garbage.
func TestSettledStuckPartLeavesTheStuckIndex(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	inv, srv := oneNodeInv(t, ctx)
	c := srv.Client(t)
	reserveDue(t, ctx, inv)
	key := "inv:stock:r:tee"
	orig := c.HGet(ctx, key, "reserved").Val()
	c.HSet(ctx, key, "reserved", "x") // corrupt: the expiry sets the part aside
	rec := quietReconciler(t, inv, time.Hour)
	rec.RunOnce(ctx)
	stuck, err := inv.StuckParts(ctx, "n1", 10)
	if err != nil || len(stuck) != 1 {
		t.Fatalf("stuck %+v, %v; want o-1's part set aside", stuck, err)
	}
	c.HSet(ctx, key, "reserved", orig) // repaired
	if _, err := inv.SettleNow(ctx, inventory.Settle{Node: "n1", Action: inventory.Cancel, OrderID: "o-1", PartIDs: []string{stuck[0].PartID}}); err != nil {
		t.Fatal(err)
	}
	if left, err := inv.StuckParts(ctx, "n1", 10); err != nil || len(left) != 0 {
		t.Fatalf("after its settle: stuck %+v, %v; want none", left, err)
	}
	for _, k := range []string{"inv:stuck:why", "inv:stuck:retry"} {
		if n := c.Exists(ctx, k).Val(); n != 0 {
			t.Errorf("%s left after the settle", k)
		}
	}
	if lvl, err := inv.GetStock(ctx, "r", "tee"); err != nil || lvl.Reserved != 0 || lvl.Available != 10 {
		t.Errorf("stock %+v, %v; want the 3 units back", lvl, err)
	}
}
