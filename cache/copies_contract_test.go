package cache_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/shardis/shardis/cache"
	"github.com/shardis/shardis/router"
)

// A copy key holding a value of another type (WRONGTYPE: something else
// wrote into the cache's namespace) is a corrupt copy on a usable node:
// Get treats it as a miss, and the fill overwrites it. It was reported as
// an error wrapping router.ErrUnavailable, which made FallbackToLoader
// call the loader on every Get, uncached, though the node could serve.
func TestWrongTypeCopyIsAMissTheFillOverwrites(t *testing.T) {
	e := newEnv(t, 1)
	c := e.caches(cache.Options{})[0]
	fb := e.caches(cache.Options{Name: "fb", FallbackToLoader: true})[0]
	var calls atomic.Int64
	load := func(context.Context, string) ([]byte, error) { calls.Add(1); return []byte("v"), nil }
	for _, cc := range []struct {
		c   *cache.Cache
		key string
	}{{c, "shardis:cache:default:cache:r:k:sku"}, {fb, "shardis:cache:fb:cache:r:k:sku"}} {
		for _, s := range e.srv {
			if err := s.Client(t).HSet(e.ctx, cc.key, "f", "v").Err(); err != nil {
				t.Fatal(err)
			}
		}
		calls.Store(0)
		for i := 0; i < 3; i++ {
			v, err := cc.c.Get(e.ctx, "sku", load)
			if err != nil || string(v) != "v" {
				t.Fatalf("Get %d of a key whose copy is a hash = %q, %v; want the loader's value", i, v, err)
			}
		}
		if n, s := calls.Load(), cc.c.Stats(); n != 1 || s.Hits != 2 {
			t.Fatalf("3 Gets of a key whose copy is a hash: %d loader calls, %d hits; want 1 fill, then 2 hits of the copy it wrote", n, s.Hits)
		}
	}
}

// An error reply a usable node gives on purpose to a copy's read (here
// NOPERM: the node's ACL refuses GET) is not router.ErrUnavailable, and
// FallbackToLoader does not load around it: its doc promises a fallback
// only when no copy is on a usable node or every read failed as
// unavailable. It was wrapped in router.ErrUnavailable.
func TestErrorReplyOfAUsableCopyIsNotUnavailable(t *testing.T) {
	e := newEnv(t, 1)
	c := e.caches(cache.Options{FallbackToLoader: true})[0]
	key := keyHomedOn(t, e, "k", "n2")
	admin := e.srv[1].Client(t)
	if err := admin.Do(e.ctx, "ACL", "SETUSER", "default", "-get").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Do(context.Background(), "ACL", "SETUSER", "default", "+get") })
	var calls atomic.Int64
	_, err := c.Get(e.ctx, key, func(context.Context, string) ([]byte, error) { calls.Add(1); return []byte("v"), nil })
	if n, _ := e.rtrs[0].Node("n2"); !n.Usable() {
		t.Fatal("n2 became unusable: the test no longer holds a usable node's error reply")
	}
	if err == nil || errors.Is(err, router.ErrUnavailable) || calls.Load() != 0 {
		t.Fatalf("Get of a copy whose node answers NOPERM = %v with %d loader calls; want the node's error, not router.ErrUnavailable, and no fallback", err, calls.Load())
	}
}
