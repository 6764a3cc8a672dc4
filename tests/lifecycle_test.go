package tests

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
)

// stableGoroutines waits until the goroutine count has not changed for
// 1.1s (go-redis's background redial sleeps 1s between attempts, so
// goroutines of clients closed by earlier tests may linger that long), or
// 4s pass, and returns it.
func stableGoroutines() int {
	n := runtime.NumGoroutine()
	since := time.Now()
	for deadline := time.Now().Add(4 * time.Second); time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		if m := runtime.NumGoroutine(); m != n {
			n, since = m, time.Now()
		} else if time.Since(since) >= 1100*time.Millisecond {
			break
		}
	}
	return n
}

// TestCloseLeaksNoGoroutines runs a router through traffic, a dead node and
// reconnect probes, closes it and checks the goroutine count is back where
// it was. Not parallel: it counts the whole process's goroutines.
func TestCloseLeaksNoGoroutines(t *testing.T) {
	ctx := context.Background()
	srv := redistest.StartN(t, 2, redistest.Options{})
	cfg := newConfig(t,
		map[string]string{"n1": srv[0].Addr(), "n2": srv[1].Addr()},
		map[string]config.Server{"order": server(config.OnNodeDownNext, map[string][]string{"eu": {"n1", "n2"}})},
		&quickHealth)

	before := stableGoroutines()
	r, ev := startRouter(t, cfg)
	waitUp(t, r, ev, "n1", "n2")
	for i, k := range keys("order", 200) {
		c, err := r.Client("order", "eu", k)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, k, i, 0)
			p.Incr(ctx, k)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	// A dead node and failed reconnect probes. The node is restarted so the
	// harness's per-process waiter goroutine is counted again, as before.
	srv[1].Kill()
	ev.wait("n2", false, 2*time.Second)
	time.Sleep(300 * time.Millisecond)
	during := runtime.NumGoroutine()
	srv[1].Restart()
	ev.wait("n2", true, 2*time.Second)

	start := time.Now()
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	closeTook := time.Since(start)
	if _, err := r.Nodes()[0].Client().Get(ctx, "k").Result(); !errors.Is(err, redis.ErrClosed) && !errors.Is(err, node.ErrDown) {
		t.Errorf("command after Close: err = %v, want redis.ErrClosed", err)
	}

	t.Logf("Close took %v", closeTook)
	goroutinesBackTo(t, before, during, 2*time.Second)
}

// goroutinesBackTo waits up to wait for the goroutine count to come back
// to before (the count before New; during: while the work ran, for the
// log), and fails the test with every goroutine's stack when it does not.
func goroutinesBackTo(t *testing.T, before, during int, wait time.Duration) {
	t.Helper()
	after := runtime.NumGoroutine()
	for deadline := time.Now().Add(wait); after != before && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		after = runtime.NumGoroutine()
	}
	t.Logf("goroutines: %d before New, %d under way, %d after Close", before, during, after)
	if after != before {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Errorf("goroutines after Close = %d, want %d (before New)\n%s", after, before, buf)
	}
}
