package cache_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/shardis/shardis/cache"
)

// A copy key holding a string that is not in the cache's encoding
// (something else wrote it; here "garbage", and an empty string) is a
// miss the fill overwrites, as a copy of another type (WRONGTYPE) is:
// Get calls the loader once and returns its value, and the next Get is a
// hit of the copy the fill wrote (with L1 on, so a corrupt copy kept
// there would show too). Found by a review: Get failed with `cache:
// stored value of unknown kind "garbage"` (undocumented, naming no key)
// and never called the loader, so the copy stayed broken until its TTL,
// forever without one.
func TestForeignStringCopyIsAMissTheFillOverwrites(t *testing.T) {
	e := newEnv(t, 1)
	c := e.caches(cache.Options{L1Size: 100})[0]
	for _, foreign := range []string{"garbage", ""} {
		key := "sku-" + foreign
		for _, s := range e.srv {
			if err := s.Client(t).Set(e.ctx, "shardis:cache:default:cache:r:k:"+key, foreign, 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
		var calls atomic.Int64
		load := func(context.Context, string) ([]byte, error) { calls.Add(1); return []byte("v"), nil }
		for i := 0; i < 3; i++ {
			v, err := c.Get(e.ctx, key, load)
			if err != nil || string(v) != "v" {
				t.Fatalf("Get %d of %q whose copy holds %q = %q, %v; want the loader's value", i, key, foreign, v, err)
			}
		}
		if n := calls.Load(); n != 1 {
			t.Fatalf("3 Gets of %q whose copy holds %q: %d loader calls; want 1 fill, then hits of the copy it wrote", key, foreign, n)
		}
	}
}
