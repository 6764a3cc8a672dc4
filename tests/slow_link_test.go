package tests

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
)

// A node behind a slow link stays UP when one round trip fits its probe
// timeout but two do not: a probe is one round trip to the node, and the
// peer-witness traffic of the inventory's nodes runs off the probe's path
// (issue B11: 80 ms one way, 300 ms timeout). Here the link is 700 ms
// each way and the timeout 2.7 s, 100 ms short of two round trips: the
// proxy's delays are lower bounds (a loaded machine only adds to them), so
// a probe of two round trips always passes the timeout, however loaded,
// while one of a single round trip has 1.3 s for this process's
// scheduling delays. At 400 ms and 1.4 s, a make test run beside two
// other suites on 2 cores took 1.43 s and 1.65 s over single-trip probes
// and their connection's PING, and n1 was marked DOWN (at 200 ms and
// 700 ms, a one-trip probe had taken 753 ms beside three explorers).
// Before, a probe took the stamp script and the drain read one after the
// other (two round trips, more on a reconnect), and the node was marked
// DOWN.
func TestSlowLinkNodeStaysUp(t *testing.T) {
	t.Parallel()
	srv := redistest.StartN(t, 2, redistest.Options{})
	proxy := startLatencyProxy(t, srv[0].Addr(), slowLinkOneWay)
	h := config.Health{
		Heartbeat: 200 * time.Millisecond,
		Timeout:   slowLinkProbeTimeout,
		Backoff:   []time.Duration{200 * time.Millisecond, 400 * time.Millisecond},
	}
	cfg := newConfig(t, map[string]string{"n1": proxy.Addr(), "n2": srv[1].Addr()},
		map[string]config.Server{"inventory": server(config.OnNodeDownFail, map[string][]string{"r": {"n1", "n2"}})},
		&h)
	cfg.Client.CommandTimeout = 10 * time.Second // marks to n1 over the slow link: handshake, script load
	var probes, failed, slowest atomic.Int64     // slowest: the longest probe of n1 since the last reset, ns
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	r, err := router.New(ctx, cfg, router.Options{KeepData: cfg.KeepData(),
		Logger: testLogger(t),
		OnProbe: func(name string, d time.Duration, err error) {
			if name != "n1" {
				return
			}
			probes.Add(1)
			raiseTo(&slowest, int64(d))
			if err != nil {
				failed.Add(1)
				t.Logf("probe of n1 failed after %v: %v", d, err)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	n1, _ := r.Node("n1")
	waitFor(t, 30*time.Second, "n1 UP behind the slow link", func() bool { return n1.State() == node.StateUp })

	// The peer-witness traffic through the proxy (n2's mark, written on
	// n1 in the background) settles first.
	direct := srv[0].Client(t)
	waitFor(t, 30*time.Second, "n1 holds n2's mark", func() bool {
		return direct.HExists(ctx, node.WitnessKey, "n2").Val()
	})

	// Several probe intervals: n1 stays UP and every probe is one round
	// trip. The proxy also carries the marks read off the probes' path
	// (every heartbeat, on a connection of their own), so the probes'
	// round trips show in their durations: one is 1.4 s, two 2.8.
	p0, f0, trips0 := probes.Load(), failed.Load(), proxy.RoundTrips()
	slowest.Store(0)
	waitFor(t, 40*time.Second, "8 more probes of n1", func() bool {
		if n1.State() != node.StateUp {
			t.Fatalf("n1 marked DOWN behind a %v round trip with a %v probe timeout: %v",
				2*slowLinkOneWay, slowLinkProbeTimeout, n1.DownReason())
		}
		return probes.Load()-p0 >= 8
	})
	p, f, trips := probes.Load()-p0, failed.Load()-f0, proxy.RoundTrips()-trips0
	t.Logf("%d probes, %d failed, the slowest %v; %d round trips to n1 (probes and marks)", p, f, time.Duration(slowest.Load()), trips)
	// A probe of two round trips (at least 2.8 s) passes the 2.7 s timeout
	// and fails: counted here. Its duration is only logged (a loaded
	// machine made a one-trip probe of 800 ms take 1.27 s, and others pass
	// 1.4 s).
	if f > 0 {
		t.Errorf("%d of %d probes of n1 failed: want one round trip per probe", f, p)
	}
}

// The slow link of TestSlowLinkNodeStaysUp: its delay each way, and a
// probe timeout between one round trip (1.4 s) and two (2.8 s).
const (
	slowLinkOneWay       = 700 * time.Millisecond
	slowLinkProbeTimeout = 2700 * time.Millisecond
)

// raiseTo raises v to x when x is higher.
func raiseTo(v *atomic.Int64, x int64) {
	for cur := v.Load(); x > cur; cur = v.Load() {
		if v.CompareAndSwap(cur, x) {
			return
		}
	}
}
