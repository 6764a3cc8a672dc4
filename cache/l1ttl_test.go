package cache_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/cache"
)

// An L1 copy never outlives the copy in Redis it came from ("Every value
// lives TTL ± Jitter·TTL"). These look at the two ways into L1: a read,
// and the fill of the instance that ran the loader.

// pttlHook counts GET+PTTL pipelines whose GET answered a value while
// PTTL answered <= 0 (the key in its last millisecond, or gone between
// the two).
type pttlHook struct{ zero atomic.Int64 }

func (h *pttlHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *pttlHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *pttlHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if len(cmds) == 2 {
			g, ok1 := cmds[0].(*redis.StringCmd)
			p, ok2 := cmds[1].(*redis.DurationCmd)
			if ok1 && ok2 && g.Err() == nil && p.Err() == nil && p.Val() <= 0 {
				h.zero.Add(1)
			}
		}
		return err
	}
}

// A value read as it expires (GET answers it, PTTL says 0 or -2) stays out
// of L1. It used to be taken as of unknown TTL and kept for a whole
// L1TTL, so an instance reading keys in a loop through their expiry (its
// L1 entries end when the keys do, so its next read lands in that last
// millisecond) served the old value for L1TTL after Redis dropped it.
func TestL1ReadAtExpiryIsNotKept(t *testing.T) {
	e := newEnv(t, 2)
	cs := e.caches(cache.Options{TTL: 500 * time.Millisecond, Jitter: 0.01, L1Size: 100})
	time.Sleep(300 * time.Millisecond) // subscriptions made
	h := &pttlHook{}
	for _, name := range []string{"n1", "n2", "n3"} {
		n, _ := e.rtrs[1].Node(name)
		n.Client().AddHook(h)
	}
	var version atomic.Int64
	load := func(context.Context, string) ([]byte, error) { return []byte(fmt.Sprint(version.Load())), nil }
	for trial := 0; trial < 3; trial++ {
		// 30 keys, filled together by instance 0 at t0: each lives 495..505ms in Redis.
		var keys []string
		for i := 0; i < 30; i++ {
			keys = append(keys, fmt.Sprintf("row%d-%d", trial, i))
		}
		version.Store(0)
		for _, key := range keys {
			if _, err := cs[0].Get(e.ctx, key, load); err != nil {
				t.Fatal(err)
			}
		}
		t0 := time.Now()
		version.Store(1) // the rows change with no Invalidate: the TTL bounds this
		// Instance 1 reads the keys in a loop through their expiry.
		for time.Since(t0) < 700*time.Millisecond {
			for _, key := range keys {
				if _, err := cs[1].Get(e.ctx, key, load); err != nil {
					t.Fatal(err)
				}
			}
		}
		time.Sleep(time.Until(t0.Add(900 * time.Millisecond)))
		// 900ms after the fill every Redis copy (<= 505ms) is long gone.
		for _, key := range keys {
			v, err := cs[1].Get(e.ctx, key, load)
			if err != nil {
				t.Fatal(err)
			}
			if string(v) != "1" {
				t.Fatalf("trial %d: instance 1 reads %s = %q at t0+%v, TTL 500ms ± 1%%; want the reloaded \"1\" (Redis holds the key: %v; reads answered a value with PTTL <= 0: %d)",
					trial, key, v, time.Since(t0).Round(time.Millisecond), redisHas(t, e, key), h.zero.Load())
			}
		}
	}
	t.Logf("reads that met a key in its last millisecond: %d", h.zero.Load())
}

// The instance that filled a key keeps it in L1 no longer than the
// shortest-lived copy it wrote. It used to keep it for a whole L1TTL: with
// L1TTL above TTL, it served the loaded value long after every Redis copy
// expired and the other instances had loaded the new one.
func TestFilledL1EndsWithItsRedisCopy(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	cs := e.caches(cache.Options{TTL: 500 * time.Millisecond, Jitter: 0.01, L1Size: 100, L1TTL: time.Minute})
	time.Sleep(300 * time.Millisecond) // subscriptions made
	var version atomic.Int64
	load := func(context.Context, string) ([]byte, error) { return []byte(fmt.Sprint(version.Load())), nil }
	if _, err := cs[0].Get(e.ctx, "row", load); err != nil { // filled by instance 0 at t0
		t.Fatal(err)
	}
	t0 := time.Now()
	version.Store(1) // the row changes, no Invalidate: the TTL bounds this
	time.Sleep(time.Until(t0.Add(1500 * time.Millisecond)))
	v1, err1 := cs[1].Get(e.ctx, "row", load)
	v0, err0 := cs[0].Get(e.ctx, "row", load)
	if err0 != nil || string(v0) != "1" {
		t.Fatalf("at t0+1.5s (TTL 500ms ± 1%%): the filling instance reads %q, %v; the other one %q, %v; want \"1\" from both",
			v0, err0, v1, err1)
	}
}

// A "not found" marker lives at most NegativeTTL in Redis (Jitter only
// shortens it). It used to be jittered like a value, up to
// (1+Jitter)·NegativeTTL.
func TestNegativeMarkerLivesAtMostNegativeTTL(t *testing.T) {
	e := newEnv(t, 1)
	c := e.caches(cache.Options{TTL: time.Minute, Jitter: 0.5, NegativeTTL: 10 * time.Second})[0]
	absent := func(context.Context, string) ([]byte, error) { return nil, cache.ErrNotFound }
	var shortest, longest time.Duration = time.Hour, 0
	for i := 0; i < 20; i++ {
		key := fmt.Sprintf("gone%d", i)
		if _, err := c.Get(e.ctx, key, absent); err == nil {
			t.Fatal("want ErrNotFound")
		}
		for _, s := range e.srv {
			cl := s.Client(t)
			keys, _ := cl.Keys(e.ctx, "shardis:cache:*:k:"+key).Result()
			for _, k := range keys {
				left := cl.PTTL(e.ctx, k).Val()
				longest, shortest = max(longest, left), min(shortest, left)
			}
		}
	}
	if longest > 10*time.Second {
		t.Fatalf("a \"not found\" marker lives up to %v in Redis, NegativeTTL 10s", longest)
	}
	if shortest >= 9*time.Second { // 20 draws of 5s..10s: all above 9s is a 1e-14 chance
		t.Fatalf("20 markers' TTLs all in %v..%v: want them jittered below NegativeTTL (Jitter 0.5)", shortest, longest)
	}
}
