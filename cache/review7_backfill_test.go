package cache_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardis/shardis/cache"
	"github.com/shardis/shardis/node"
)

// A miss throttled while the backfill stream's first node was down is
// queued on the next node of the stream key's walk. Once the first node
// is back, the workers read it again, and must still fill that entry:
// before, they read the first usable node only and the entry stayed
// queued on the other for good.
func TestBackfillFillsMissesQueuedWhileTheStreamsNodeWasDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	const stream = "shardis:cache:default:cache:r:backfill" // Options.Name "default", server "cache", route "r"
	first, err := e.rtrs[0].Pick("cache", "r", stream)
	if err != nil {
		t.Fatal(err)
	}
	var srvAddr string
	for name, nc := range e.cfg.Nodes {
		if name == first.Name() {
			srvAddr = nc.Addr
		}
	}
	p := newCutProxy(t, srvAddr)
	rB := e.routerVia(t, first.Name(), p.ln.Addr().String())
	c, err := cache.New(rB, "cache", "r", cache.Options{LoaderRate: 1, LoaderBurst: 1, Backfill: true,
		FillLease: 300 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	nB, err := rB.Node(first.Name())
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, nB, node.StateUp)

	p.Cut()
	waitState(t, nB, node.StateDown)
	load := func(ctx context.Context, key string) ([]byte, error) { return []byte("filled " + key), nil }
	// Keys whose copy is on a usable node: the first spends the bucket's
	// token, the second is throttled and queued.
	var keys []string
	for i := 0; len(keys) < 2; i++ {
		k := "q" + strconv.Itoa(i)
		if n, err := e.rtrs[0].Pick("cache", "r", k); err == nil && n.Name() != first.Name() {
			keys = append(keys, k)
		}
	}
	_, _ = c.Get(e.ctx, keys[0], load)
	var queued bool
	var last error
	for i := 0; i < 20 && !queued; i++ {
		_, last = c.Get(e.ctx, keys[1], load)
		queued = errors.Is(last, cache.ErrThrottled)
	}
	if !queued {
		t.Fatalf("%s was never throttled: %v", keys[1], last)
	}
	key := keys[1]
	// It is queued on another node than the stream's first.
	var elsewhere int64
	for name, nc := range e.cfg.Nodes {
		if name == first.Name() {
			continue
		}
		for _, s := range e.srv {
			if s.Addr() == nc.Addr {
				k, _ := s.Client(t).XLen(e.ctx, stream).Result()
				elsewhere += k
			}
		}
	}
	if elsewhere == 0 {
		t.Fatal("the throttled miss was not queued on another node")
	}

	p.Mend()
	waitState(t, nB, node.StateUp)
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- c.Backfill(ctx, "w1", load) }()
	defer func() {
		cancel()
		<-done
	}()
	// Wait for the backfill's fill without reading the key meanwhile: a
	// throttled miss now would queue it again, on the first node.
	fills := c.Stats().Fills
	deadline := time.Now().Add(10 * time.Second)
	for c.Stats().Fills == fills {
		if time.Now().After(deadline) {
			t.Fatalf("%s, queued on another node while %s was down, not backfilled within 10s after it came back",
				key, first.Name())
		}
		time.Sleep(20 * time.Millisecond)
	}
	mustNot := func(context.Context, string) ([]byte, error) { return nil, errors.New("must come from the backfill") }
	v, err := c.Get(e.ctx, key, mustNot)
	for errors.Is(err, cache.ErrThrottled) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // the fill counts before it stores
		v, err = c.Get(e.ctx, key, mustNot)
	}
	if err != nil || string(v) != "filled "+key {
		t.Fatalf("%s after the backfill's fill: %q, %v; want %q from the cache", key, v, err, "filled "+key)
	}
}

// waitState waits up to 10 s for n to be in state want.
func waitState(t *testing.T, n *node.Node, want node.State) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for n.State() != want {
		if time.Now().After(deadline) {
			t.Fatalf("node %s is %v, want %v within 10s", n.Name(), n.State(), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A queued key whose loader always fails was claimed again every
// FillLease for good: its entry never left the group's pending list and
// took a loader call (of the shared rate) each time. After a few tries it
// is dropped; the worker goes on with the others.
func TestBackfillDropsAKeyWhoseLoaderKeepsFailing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	c := e.caches(cache.Options{LoaderRate: 1, LoaderBurst: 1, Backfill: true, FillLease: 100 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})[0]
	ok := func(ctx context.Context, key string) ([]byte, error) { return []byte("v"), nil }
	if _, err := c.Get(e.ctx, "p0", ok); err != nil { // the bucket's one token
		t.Fatal(err)
	}
	if _, err := c.Get(e.ctx, "p1", ok); !errors.Is(err, cache.ErrThrottled) {
		t.Fatalf("second miss within the limit's second = %v, want ErrThrottled", err)
	}
	var calls atomic.Int64
	failing := func(ctx context.Context, key string) ([]byte, error) {
		calls.Add(1)
		return nil, errors.New("the database refuses " + key)
	}
	c2 := e.caches(cache.Options{LoaderRate: 20, LoaderBurst: 20, Backfill: true, FillLease: 100 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})[0]
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- c2.Backfill(ctx, "w1", failing) }()
	defer func() {
		cancel()
		<-done
	}()
	const stream = "shardis:cache:default:cache:r:backfill"
	sn, err := e.rtrs[0].Pick("cache", "r", stream)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		p, err := sn.Client().XPending(e.ctx, stream, "shardis-fill").Result()
		if err == nil && p.Count == 0 && calls.Load() > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the failing key is still pending after 10s (%+v, %v) with %d loader calls", p, err, calls.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // five FillLeases more: no more calls
	if n := calls.Load(); n > 5 {
		t.Fatalf("the failing loader was called %d times, want at most 5", n)
	}
}
