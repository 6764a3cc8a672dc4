package cache_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/shardis/shardis/cache"
)

// A hot key's copy i is placed by hashing key#i, but stored under a Redis
// key of its own copy number's namespace (copyKey): it is never the key
// key#i of another caller. It was once stored as key#i, so the copy of
// "hotN" on the node of "hotN#1" was the very Redis key of the caller's
// key "hotN#1": Get("hotN#1") answered hotN's value without calling its
// loader, and a Set of either overwrote the other.
func TestCopyIsNeverAnotherKey(t *testing.T) {
	e := newEnv(t, 1)
	c := e.caches(cache.Options{Replicas: func(key string) int {
		if strings.HasPrefix(key, "hot") && !strings.Contains(key, "#") {
			return 2
		}
		return 1
	}})[0]
	var hot string
	for i := 0; hot == ""; i++ {
		k := fmt.Sprintf("hot%d", i)
		a, _ := e.rtrs[0].Pick("cache", "r", k)
		b, _ := e.rtrs[0].Pick("cache", "r", k+"#1")
		if a != b { // hot's copy 1 goes to the home node of hot#1
			hot = k
		}
	}
	if err := c.Set(e.ctx, hot, []byte("value of "+hot)); err != nil {
		t.Fatal(err)
	}
	other := hot + "#1"
	v, err := c.Get(e.ctx, other, func(_ context.Context, key string) ([]byte, error) { return []byte("value of " + key), nil })
	if err != nil || string(v) != "value of "+other {
		t.Fatalf("Get(%q) = %q, %v; want %q (it read the copy of key %q)", other, v, err, "value of "+other, hot)
	}
	if v, err := c.Get(e.ctx, hot, nil); err != nil || string(v) != "value of "+hot {
		t.Fatalf("Get(%q) after Get(%q) = %q, %v; want %q", hot, other, v, err, "value of "+hot)
	}
}
