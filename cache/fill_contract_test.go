package cache_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/cache"
	"github.com/shardis/shardis/router"
)

// cancelOnGate cancels a context as the fill gate's SET NX PX is sent.
type cancelOnGate struct{ cancel context.CancelFunc }

func isGate(cmd redis.Cmder) bool { return cmd.Name() == "set" && len(cmd.Args()) > 3 }

func (h *cancelOnGate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *cancelOnGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if isGate(c) {
				h.cancel()
			}
		}
		return next(ctx, cmds)
	}
}
func (h *cancelOnGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isGate(cmd) {
			h.cancel()
		}
		return next(ctx, cmd)
	}
}

// A caller whose context ends while its miss takes the fill gate gets its
// context's error, not router.ErrUnavailable: the caller's cancellation
// does not count against the node (README), as at the read and the loader
// bucket. The gate's error was wrapped in router.ErrUnavailable ("gate on
// node n3: context canceled").
func TestCancelAtTheFillGateIsTheCallersError(t *testing.T) {
	e := newEnv(t, 1)
	c := e.caches(cache.Options{})[0]
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	for _, name := range []string{"n1", "n2", "n3"} {
		n, _ := e.rtrs[0].Node(name)
		n.Client().AddHook(&cancelOnGate{cancel: cancel})
	}
	_, err := c.Get(ctx, "miss", func(context.Context, string) ([]byte, error) { return []byte("v"), nil })
	if errors.Is(err, router.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Get canceled at the fill gate = %v, want an error wrapping context.Canceled, not router.ErrUnavailable", err)
	}
}

// A fill whose stores all failed (here the caller's context ended after
// the loader returned, so no copy was written) does not keep its value in
// L1: an L1 copy lives no longer than the copies it wrote (package doc),
// and it wrote none. storeFill reported such a fill as stored, and the
// next Get was answered from L1 for up to L1TTL while Redis held nothing.
func TestFillThatStoredNothingIsNotKeptInL1(t *testing.T) {
	e := newEnv(t, 1)
	c := e.caches(cache.Options{L1Size: 100})[0]
	waitSubscribed(t, e, c)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	var calls int
	load := func(context.Context, string) ([]byte, error) {
		calls++
		if calls == 1 {
			cancel() // the caller gives up as the loader returns: the stores fail
		}
		return []byte("v"), nil
	}
	hits := c.Stats().L1Hits
	if v, err := c.Get(ctx, "k", load); err != nil || string(v) != "v" {
		t.Fatalf("first Get = %q, %v; want the loader's value", v, err)
	}
	if v, err := c.Get(e.ctx, "k", load); err != nil || string(v) != "v" {
		t.Fatalf("second Get = %q, %v", v, err)
	}
	if n := c.Stats().L1Hits - hits; n != 0 {
		t.Fatalf("the second Get was answered from L1 (%d L1 hits) though the fill stored no copy", n)
	}
}

// waitSubscribed waits until c's invalidation subscriptions are made on
// every node (PUBSUB NUMSUB) and c keeps what it reads in L1 (each
// subscription's confirmation drops the whole L1, and a value read while
// one arrives is not kept).
func waitSubscribed(t *testing.T, e *env, c *cache.Cache) {
	t.Helper()
	const channel = "shardis:cache:default:cache:r:inv"
	deadline := time.Now().Add(10 * time.Second)
	for _, s := range e.srv {
		for s.Client(t).PubSubNumSub(e.ctx, channel).Val()[channel] == 0 {
			if time.Now().After(deadline) {
				t.Fatal("no subscription after 10s")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	load := func(context.Context, string) ([]byte, error) { return []byte("probe"), nil }
	for hits := c.Stats().L1Hits; c.Stats().L1Hits == hits; {
		if time.Now().After(deadline) {
			t.Fatal("no L1 hit after 10s")
		}
		if _, err := c.Get(e.ctx, "l1-probe", load); err != nil {
			t.Fatal(err)
		}
	}
}
