package cache_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardis/shardis/cache"
)

// A key filled while Replicas answered one copy, then turned hot (three
// copies): the first Get that misses a new copy fills it (and the other)
// from the copy that holds the value, so the hot key's reads stop
// missing. The missing copies were never filled from the one that held
// the value: about two Gets in three went through the fill gate until
// copy 0 expired, the key's reads serialised on the gate just when it
// turned hot. The copies never outlive the value they copy.
func TestHotKeyCopiesAreRefilledFromTheValue(t *testing.T) {
	e := newEnv(t, 1)
	var hot atomic.Bool
	c := hotWhen(e, &hot)
	var loads atomic.Int64
	load := func(context.Context, string) ([]byte, error) { loads.Add(1); return []byte("v"), nil }
	const key = "sku"
	if v, err := c.Get(e.ctx, key, load); err != nil || string(v) != "v" {
		t.Fatalf("Get = %q, %v", v, err)
	}
	hot.Store(true)
	misses := c.Stats().Misses
	for range 100 {
		if v, err := c.Get(e.ctx, key, load); err != nil || string(v) != "v" {
			t.Fatalf("Get = %q, %v", v, err)
		}
	}
	if n := c.Stats().Misses - misses; n > 1 {
		t.Errorf("%d of 100 Gets of the key turned hot missed, want at most 1 (the one that refills its copies)", n)
	}
	if n := loads.Load(); n != 1 {
		t.Errorf("%d loader calls, want 1: the copies are filled from the value, not the loader", n)
	}
	// every copy there (<prefix>k:sku, k1:sku, k2:sku), none living
	// longer than the value's TTL allows
	var longest time.Duration
	copies := 0
	for _, s := range e.srv {
		for _, k := range s.Client(t).Keys(e.ctx, "*k*:sku").Val() {
			copies++
			longest = max(longest, s.Client(t).PTTL(e.ctx, k).Val())
		}
	}
	if copies != 3 {
		t.Errorf("%d copies of the key in Redis, want 3", copies)
	}
	if longest > time.Minute+time.Minute/10 {
		t.Errorf("a copy lives %v, past the value's TTL (1m, jitter 10%%)", longest)
	}
}

// A missing copy whose node holds a version the found copy's node does
// not (a write that reached that node and not the found copy's yet) is
// not refilled: the found value may be older than that write.
func TestCopyWithAnotherVersionIsNotRefilled(t *testing.T) {
	e := newEnv(t, 1)
	var hot atomic.Bool
	c := hotWhen(e, &hot)
	load := func(context.Context, string) ([]byte, error) { return []byte("v"), nil }
	const key = "sku"
	if _, err := c.Get(e.ctx, key, load); err != nil {
		t.Fatal(err)
	}
	home, err := e.rtrs[0].Pick("cache", "r", key)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range e.srv { // a version on every node but the value's
		if name := "n" + string(rune('1'+i)); name != home.Name() {
			if err := s.Client(t).Set(e.ctx, "shardis:cache:default:cache:r:ver:"+key, "w", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	hot.Store(true)
	for range 20 {
		if _, err := c.Get(e.ctx, key, load); err != nil {
			t.Fatal(err)
		}
	}
	copies := 0
	for _, s := range e.srv {
		copies += len(s.Client(t).Keys(e.ctx, "*k*:sku").Val())
	}
	if copies != 1 {
		t.Errorf("%d copies of the key, want 1: a copy was refilled across a version it did not share", copies)
	}
}

// hotWhen is e's cache whose keys keep 3 copies while hot is set, else 1.
func hotWhen(e *env, hot *atomic.Bool) *cache.Cache {
	return e.caches(cache.Options{TTL: time.Minute, MaxReplicas: 3, Replicas: func(string) int {
		if hot.Load() {
			return 3
		}
		return 1
	}})[0]
}
