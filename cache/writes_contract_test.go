package cache_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardis/shardis/cache"
	"github.com/shardis/shardis/router"
)

// keyHomedOn returns a key (<prefix>0, <prefix>1, ...) whose copy 0 is on
// node name for e's first router (which must find the node usable).
func keyHomedOn(t *testing.T, e *env, prefix, name string) string {
	t.Helper()
	for i := 0; i < 10000; i++ {
		k := fmt.Sprintf("%s%d", prefix, i)
		if n, err := e.rtrs[0].Pick("cache", "r", k); err == nil && n.Name() == name {
			return k
		}
	}
	t.Fatalf("no key homed on %s", name)
	return ""
}

// An Invalidate that cannot reach a copy's node says so with an error
// wrapping router.ErrUnavailable, as a Set does (README: "a Set or
// Invalidate that could not reach a copy's node says so"). It sent its
// script to the DOWN node and returned the node's refusal, a *node.Error
// wrapping node.ErrDown, which is not router.ErrUnavailable.
func TestInvalidateOfACopyOnADownNodeIsUnavailable(t *testing.T) {
	e := newEnv(t, 1)
	c := e.caches(cache.Options{TTL: time.Minute})[0]
	key := keyHomedOn(t, e, "k", "n2")
	e.srv[1].Kill()
	waitDown(t, e.rtrs[0], "n2")
	errSet := c.Set(e.ctx, key, []byte("v"))
	errInv := c.Invalidate(e.ctx, key)
	if !errors.Is(errSet, router.ErrUnavailable) {
		t.Errorf("Set of a key whose copy is on a DOWN node = %v, want an error wrapping router.ErrUnavailable", errSet)
	}
	if !errors.Is(errInv, router.ErrUnavailable) {
		t.Errorf("Invalidate of a key whose copy is on a DOWN node = %v, want an error wrapping router.ErrUnavailable", errInv)
	}
}

// A Set or Invalidate made while Replicas answers 1 for a key (it cooled)
// reaches the copies an earlier answer of 3 filled, so once the key is hot
// again no Get reads the value from before the write (README: "a Set or
// Invalidate always reaches the copies a Get reads"; Replicas as in the
// README's example, hot(key) deciding). They wrote or deleted copy 0 only,
// and about two Gets in three read the old value from copies 1 and 2
// until their TTL.
func TestWritesReachTheCopiesOfAnEarlierLargerReplicasAnswer(t *testing.T) {
	e := newEnv(t, 1)
	var hot atomic.Bool
	c := e.caches(cache.Options{TTL: time.Minute, Replicas: func(string) int {
		if hot.Load() {
			return 3
		}
		return 1
	}})[0]
	var row atomic.Value
	load := func(context.Context, string) ([]byte, error) { return []byte(row.Load().(string)), nil }
	for _, w := range []struct {
		name  string
		write func(key string) error
	}{
		{"Set", func(key string) error { return c.Set(e.ctx, key, []byte("new")) }},
		{"Invalidate", func(key string) error { return c.Invalidate(e.ctx, key) }},
	} {
		key := "sku-" + w.name
		row.Store("old")
		hot.Store(true)
		if v, err := c.Get(e.ctx, key, load); err != nil || string(v) != "old" {
			t.Fatalf("Get = %q, %v", v, err)
		}
		hot.Store(false)
		row.Store("new")
		if err := w.write(key); err != nil {
			t.Fatalf("%s while the key is cold: %v", w.name, err)
		}
		hot.Store(true)
		stale, misses := 0, c.Stats().Misses
		for i := 0; i < 100; i++ {
			v, err := c.Get(e.ctx, key, load)
			if err != nil {
				t.Fatal(err)
			}
			if string(v) == "old" {
				stale++
			}
		}
		if stale > 0 {
			t.Errorf("%s(%s) returned nil while the key was cold; once hot again %d of 100 Gets return the value from before it", w.name, key, stale)
		}
		// The Set replaced the copies the hot answer filled (they stay
		// warm): the hot Gets read them without a miss.
		if n := c.Stats().Misses - misses; w.name == "Set" && n != 0 {
			t.Errorf("after a Set while the key was cold, %d of 100 hot Gets missed, want 0", n)
		}
	}
}
