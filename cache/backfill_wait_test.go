package cache_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/cache"
	"github.com/shardis/shardis/router"
)

// A queued key whose copy's node is down stays queued, however many times
// it is delivered meanwhile, and is filled once the node is back: only
// its loader's failures count toward the five deliveries after which a
// key is dropped (README: "a key whose loader still fails at its fifth
// delivery is dropped"). Found by a review: every failed fill counted,
// router.ErrUnavailable included, so with FillLease 100ms the key was
// dropped within a second without one loader call, and never filled.
func TestBackfillKeepsAKeyWhoseNodeIsDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	const stream = "shardis:cache:default:cache:r:backfill"
	set, _ := e.rtrs[0].Set("cache", "r")
	sn := set.Candidates(stream)[0]
	victim := "n1"
	if sn.Name() == "n1" {
		victim = "n2"
	}
	key := keyHomedOn(t, e, "q", victim)
	if err := sn.Client().XAdd(e.ctx, &redis.XAddArgs{Stream: stream, Values: []any{"key", key}}).Err(); err != nil {
		t.Fatal(err)
	}
	idx := map[string]int{"n1": 0, "n2": 1, "n3": 2}[victim]
	e.srv[idx].Kill()
	waitDown(t, e.rtrs[0], victim)
	c := e.caches(cache.Options{Backfill: true, FillLease: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})[0]
	var calls atomic.Int64
	load := func(context.Context, string) ([]byte, error) { calls.Add(1); return []byte("v"), nil }
	// Deliveries come every FillLease or so: wait for the sixth (the
	// fifth's failure did not drop the entry), or for the entry to go.
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Backfill(ctx, "w1", load) }()
	var p []redis.XPendingExt
	for start := time.Now(); time.Since(start) < 15*time.Second; time.Sleep(20 * time.Millisecond) {
		p, _ = sn.Client().XPendingExt(e.ctx, &redis.XPendingExtArgs{Stream: stream, Group: "shardis-fill", Start: "-", End: "+", Count: 10}).Result()
		if len(p) == 1 && p[0].RetryCount >= 6 || len(p) == 0 && time.Since(start) > 2*time.Second {
			break // the sixth delivery, or gone (dropped)
		}
	}
	cancel()
	<-done
	if len(p) != 1 || p[0].RetryCount < 6 || calls.Load() != 0 {
		t.Fatalf("with %q's copy on DOWN %s: pending %+v, %d loader calls; want the entry still pending after more than 5 deliveries, and no loader call", key, victim, p, calls.Load())
	}

	e.srv[idx].Restart()
	waitUsable(t, e, victim, true)
	ctx2, cancel2 := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel2()
	go func() { _ = c.Backfill(ctx2, "w1", load) }()
	for calls.Load() == 0 && ctx2.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	if v, err := c.Get(e.ctx, key, func(context.Context, string) ([]byte, error) { return []byte("not backfilled"), nil }); err != nil || string(v) != "v" {
		t.Fatalf("once %s is back, Get of the queued key %q = %q, %v (%d backfill loader calls); want the value Backfill filled", victim, key, v, err, calls.Load())
	}
}

// A queued key whose loader keeps failing is dropped at its fifth
// delivery, after five loader calls, also when the loader's error wraps
// router.ErrUnavailable (a loader reading through the router from a node
// that is down): it is the loader's own failure, not the fill waiting for
// the key's node. Guards the change above, which leaves an entry pending
// on router.ErrUnavailable: without telling the loader's errors apart,
// this key would be retried for good.
func TestBackfillDropsAKeyWhoseLoaderFailsFiveTimes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	const stream = "shardis:cache:default:cache:r:backfill"
	set, _ := e.rtrs[0].Set("cache", "r")
	sn := set.Candidates(stream)[0]
	if err := sn.Client().XAdd(e.ctx, &redis.XAddArgs{Stream: stream, Values: []any{"key", "sku"}}).Err(); err != nil {
		t.Fatal(err)
	}
	c := e.caches(cache.Options{Backfill: true, FillLease: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})[0]
	var calls atomic.Int64
	load := func(context.Context, string) ([]byte, error) {
		calls.Add(1)
		return nil, fmt.Errorf("loading from the database's node: %w", router.ErrUnavailable)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Backfill(ctx, "w1", load) }()
	var p []redis.XPendingExt
	for start := time.Now(); time.Since(start) < 15*time.Second; time.Sleep(20 * time.Millisecond) {
		p, _ = sn.Client().XPendingExt(e.ctx, &redis.XPendingExtArgs{Stream: stream, Group: "shardis-fill", Start: "-", End: "+", Count: 10}).Result()
		if calls.Load() > 0 && len(p) == 0 {
			break
		}
	}
	cancel()
	<-done
	if len(p) != 0 || calls.Load() != 5 {
		t.Fatalf("a queued key whose loader always fails: pending %+v after %d loader calls; want it dropped after 5", p, calls.Load())
	}
}
