package cache_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/shardis/shardis/cache"
)

// Close leaves no goroutine of the cache behind (its subscription loops
// and their pub/sub connections), and is idempotent.
func TestReview6CloseLeavesNoGoroutine(t *testing.T) {
	e := newEnv(t, 1)
	time.Sleep(300 * time.Millisecond) // the router's own goroutines settled
	before := runtime.NumGoroutine()
	c, err := cache.New(e.rtrs[0], "cache", "r", cache.Options{L1Size: 10})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // subscriptions made
	if err := c.Set(e.ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	c.Close()
	c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines 10s after Close, %d before New:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}
