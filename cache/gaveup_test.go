package cache_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/shardis/shardis/cache"
	"github.com/shardis/shardis/router"
)

// A Get whose context has already ended, of a key whose only copy is on a
// DOWN node, returns its context's error, never router.ErrUnavailable
// (Get's doc and README: "A caller's own cancellation or deadline comes
// back as its context's error"), and with FallbackToLoader calls no
// loader for it. Found by a review: readLeft passed over the DOWN copy
// and answered "no copy on a usable node" wrapping router.ErrUnavailable,
// and FallbackToLoader then called the loader with the dead context.
func TestCanceledGetOfADownCopyIsTheContextsError(t *testing.T) {
	e := newEnv(t, 1)
	plain := e.caches(cache.Options{})[0]
	fb := e.caches(cache.Options{Name: "fb", FallbackToLoader: true})[0]
	key := keyHomedOn(t, e, "k", "n2")
	e.srv[1].Kill()
	waitDown(t, e.rtrs[0], "n2")
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	for name, c := range map[string]*cache.Cache{"plain": plain, "FallbackToLoader": fb} {
		var calls atomic.Int64
		_, err := c.Get(ctx, key, func(context.Context, string) ([]byte, error) { calls.Add(1); return []byte("v"), nil })
		if errors.Is(err, router.ErrUnavailable) || !errors.Is(err, context.Canceled) || calls.Load() != 0 {
			t.Errorf("%s: Get with a canceled context, copy on a DOWN node = %v with %d loader calls; want an error wrapping context.Canceled, never router.ErrUnavailable, and no loader call", name, err, calls.Load())
		}
	}
}

// The uncached load of a FallbackToLoader Get (its key's copies all
// unusable) calls no loader once its caller's context has ended, and
// answers the context's error, not ErrThrottled, whether or not a rate
// limit is set (here every node is down, so no node keeps the loader
// bucket). Found by a review: without a rate limit the loader was called
// with the dead context, and with one the missing bucket node made it
// ErrThrottled (counted and, with Backfill, queued as a throttled miss).
func TestNoLoaderCallForACallerThatGaveUp(t *testing.T) {
	e := newEnv(t, 1)
	unlimited := e.caches(cache.Options{FallbackToLoader: true})[0]
	limited := e.caches(cache.Options{Name: "rl", FallbackToLoader: true, LoaderRate: 100})[0]
	for i, s := range e.srv {
		s.Kill()
		waitDown(t, e.rtrs[0], []string{"n1", "n2", "n3"}[i])
	}
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	for name, c := range map[string]*cache.Cache{"no rate limit": unlimited, "LoaderRate 100": limited} {
		var calls atomic.Int64
		_, err := c.LoadUncached(ctx, "sku", func(context.Context, string) ([]byte, error) { calls.Add(1); return []byte("v"), nil })
		if !errors.Is(err, context.Canceled) || errors.Is(err, cache.ErrThrottled) || calls.Load() != 0 {
			t.Errorf("%s: uncached load with a canceled context = %v with %d loader calls; want an error wrapping context.Canceled, not ErrThrottled, and no loader call", name, err, calls.Load())
		}
		if n := c.Stats().Throttled; n != 0 {
			t.Errorf("%s: %d throttled misses counted for a caller that gave up, want 0", name, n)
		}
	}
}
