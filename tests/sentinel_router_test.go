package tests

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
)

// sentinelHealth is the health configuration of the Sentinel tests: a
// failed master is noticed at once (connection refused), and a DOWN node
// is probed every 100-200ms, so it is UP soon after the sentinels promote.
var sentinelHealth = config.Health{
	Heartbeat: 100 * time.Millisecond,
	Timeout:   time.Second,
	Backoff:   []time.Duration{100 * time.Millisecond, 200 * time.Millisecond},
}

// sentinelNode is the configuration of a node that is the master group g.
func sentinelNode(g *redistest.Group, readFrom string) config.Node {
	return config.Node{Weight: 1, ReadFrom: readFrom,
		Sentinel: config.Sentinel{Master: g.Name(), Addrs: g.SentinelAddrs()}}
}

// The router over a Sentinel group (shard s1) and a standalone node (n2),
// under a steady SET/GET load on keys of both, while s1's master is killed
// with SIGKILL: s1's keys are refused at once (ErrUnavailable, no waiting)
// while the sentinels promote the replica, and served again by the promoted
// replica without a restart, with the data written before the kill (it was
// acknowledged by the replica); n2's keys never fail.
func TestSentinelRouterFailoverUnderLoad(t *testing.T) {
	g := redistest.StartGroup(t, redistest.GroupOptions{Name: "shard-a"})
	n2 := redistest.Start(t, redistest.Options{})
	cfg := config.Default()
	cfg.Nodes = map[string]config.Node{
		"s1": sentinelNode(g, config.ReadFromReplicaPreferred),
		"n2": {Addr: n2.Addr(), Weight: 1},
	}
	cfg.Servers = map[string]config.Server{"cache": server(config.OnNodeDownFail, map[string][]string{"r": {"s1", "n2"}})}
	cfg.Health = sentinelHealth
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	before := stableGoroutines()
	r, ev := startRouter(t, &cfg)
	waitUp(t, r, ev, "s1", "n2")
	set, _ := r.Set("cache", "r")
	aKeys := keysHomedOn(t, set, "s1", "a", 20)
	bKeys := keysHomedOn(t, set, "n2", "b", 20)
	ctx := context.Background()

	// Seed s1's keys and wait for the replica to have them: the failover
	// must keep what a replica acknowledged.
	c, err := r.Client("cache", "r", aKeys[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range aKeys {
		if err := c.Set(ctx, k, "seed", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if acks, err := c.Do(ctx, "wait", 1, 900).Int64(); err != nil || acks != 1 {
		t.Fatalf("WAIT 1 after seeding: %d %v", acks, err)
	}
	// Reads of s1 go to its replica (read_from replica_preferred).
	rc, _ := r.ReadClient("cache", "r", aKeys[0])
	if role, err := rc.Do(ctx, "role").Slice(); err != nil || role[0] != "slave" {
		t.Errorf("ROLE through ReadClient: %v %v, want a replica", role, err)
	}
	if v, err := rc.Get(ctx, aKeys[1]).Result(); err != nil || v != "seed" {
		t.Errorf("GET through ReadClient: %q %v, want seed", v, err)
	}

	// Load on both shards; n2 must never fail.
	var bFail, aOK, aRefused atomic.Int64
	var slowRefusal atomic.Int64 // the slowest ErrUnavailable of s1's keys, ns
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				bk := bKeys[(w*7+i)%len(bKeys)]
				if err := setGet(ctx, r, bk); err != nil {
					bFail.Add(1)
					t.Errorf("n2 key %s: %v", bk, err)
				}
				ak := aKeys[(w*7+i)%len(aKeys)]
				start := time.Now()
				err := setGet(ctx, r, ak)
				switch {
				case err == nil:
					aOK.Add(1)
				case errors.Is(err, router.ErrUnavailable):
					aRefused.Add(1)
					for d := int64(time.Since(start)); ; {
						cur := slowRefusal.Load()
						if d <= cur || slowRefusal.CompareAndSwap(cur, d) {
							break
						}
					}
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	killed := time.Now()
	old := g.KillMaster()
	ev.wait("s1", false, 10*time.Second)
	down := time.Since(killed)
	// DOWN: refused at once, without touching the network.
	fastLoops(t, "Router.Client for a key of the failed group", func() error {
		if _, err := r.Client("cache", "r", aKeys[3]); !errors.Is(err, router.ErrUnavailable) || !errors.Is(err, node.ErrDown) {
			return fmt.Errorf("err = %v, want ErrUnavailable wrapping node.ErrDown", err)
		}
		return nil
	})
	ev.wait("s1", true, 30*time.Second)
	up := time.Since(killed)
	promoted := g.Master()
	time.Sleep(300 * time.Millisecond) // load on the promoted master
	close(stop)
	wg.Wait()
	t.Logf("s1: DOWN %v and UP %v after kill -9 of %s (promoted %s); s1 ops ok %d, refused %d (slowest refusal %v); n2 failures %d",
		down.Round(time.Millisecond), up.Round(time.Millisecond), old, promoted, aOK.Load(), aRefused.Load(),
		time.Duration(slowRefusal.Load()).Round(time.Microsecond), bFail.Load())

	if promoted == old {
		t.Fatalf("the sentinels still name %s", old)
	}
	if st := status(t, r, "s1"); st.State != node.StateUp || st.Addr != "sentinel:shard-a (master "+promoted+")" {
		t.Errorf("s1 status after failover: %v %q, want up on %s", st.State, st.Addr, promoted)
	}
	if aRefused.Load() == 0 {
		t.Error("no operation on s1's keys was refused during the promotion")
	}
	// Every key of s1 is served by the promoted replica; the ones the load
	// did not overwrite still hold the seeded value.
	for _, k := range aKeys {
		if err := setGet(ctx, r, k); err != nil {
			t.Errorf("s1 key %s after failover: %v", k, err)
		}
	}
	direct := g.Client(t, promoted)
	if n, err := direct.Exists(ctx, aKeys...).Result(); err != nil || n != int64(len(aKeys)) {
		t.Errorf("promoted master holds %d of %d seeded keys (%v)", n, len(aKeys), err)
	}

	// Close leaks nothing: the failover clients' sentinel subscriptions,
	// the replica read client and the clients retired at the failover.
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	after := runtime.NumGoroutine()
	for deadline := time.Now().Add(3 * time.Second); after > before && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		after = runtime.NumGoroutine()
	}
	if after > before {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Errorf("goroutines after Close = %d, want %d (before New)\n%s", after, before, buf)
	}
}

// setGet writes and reads key through the router.
func setGet(ctx context.Context, r *router.Router, key string) error {
	c, err := r.Client("cache", "r", key)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := c.Set(ctx, key, "v", 0).Err(); err != nil {
		return err
	}
	return c.Get(ctx, key).Err()
}
