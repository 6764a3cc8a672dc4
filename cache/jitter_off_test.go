package cache_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/cache"
)

// A negative Jitter turns jitter off: every value lives exactly TTL and
// every "not found" marker exactly NegativeTTL. Before, 0 meant the default
// 0.1 and a negative value was refused, so no jitter could not be asked for.
// NaN is refused by name (it passed the range check and made NaN TTLs).
func TestJitterOff(t *testing.T) {
	e := newEnv(t, 1)
	c := e.caches(cache.Options{TTL: 10 * time.Second, NegativeTTL: 5 * time.Second, Jitter: -1})[0]
	load := func(_ context.Context, key string) ([]byte, error) {
		if strings.HasPrefix(key, "gone") {
			return nil, cache.ErrNotFound
		}
		return []byte("v"), nil
	}
	check := func(key string, want time.Duration) {
		t.Helper()
		_, _ = c.Get(e.ctx, key, load)
		found := 0
		for _, s := range e.srv {
			cl := s.Client(t)
			keys, _ := cl.Keys(e.ctx, "shardis:cache:*:"+key).Result()
			for _, k := range keys {
				found++
				// The write happened within the last second of this test.
				if left := cl.PTTL(e.ctx, k).Val(); left > want || left < want-time.Second {
					t.Fatalf("%s lives %v with Jitter -1, want %v", k, left, want)
				}
			}
		}
		if found == 0 {
			t.Fatalf("%s: nothing written", key)
		}
	}
	for i := range 10 {
		check(fmt.Sprintf("row%d", i), 10*time.Second)
		check(fmt.Sprintf("gone%d", i), 5*time.Second)
	}
	_, err := cache.New(e.rtrs[0], "cache", "r", cache.Options{Jitter: math.NaN()})
	if err == nil || !strings.Contains(err.Error(), "Jitter is NaN") {
		t.Fatalf("New with Jitter NaN: %v, want a refusal naming Jitter", err)
	}
}
