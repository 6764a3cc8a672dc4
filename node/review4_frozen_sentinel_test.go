package node_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/internal/redisproc"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
)

// Suspected break 4: one frozen sentinel (SIGSTOP: its port still accepts
// connections, nothing is answered, as behind a blackholing partition)
// out of three must not make a Sentinel node unusable. go-redis's
// failover dialer asks the sentinel it listens to first (twice), then
// every sentinel at once, waiting for them all: a frozen one cost the
// whole dial timeout, and the master's dial then failed with "i/o
// timeout". The node's seeds are all three sentinels; one is frozen
// ("first": the one the probe client listens to, so the one it asks
// first; "other": one that no client of the node listens to).
// With cut, every connection of the node to the master is then cut:
// probes and commands must work again within a bounded time, on new
// connections. Then a failover (SENTINEL FAILOVER via a live sentinel):
// the node must come UP at the new master, with a probe that the hung
// sentinel did not hold for its whole timeout (sentinelsAgree), and take
// commands there.
func TestReview4FrozenSentinelFirst(t *testing.T) {
	t.Parallel()
	review4Frozen(t, "f4grp", true, true)
}

// See TestReview4FrozenSentinelFirst: the failover comes while the probe
// client still listens to the frozen sentinel (no +switch-master reaches
// it). The old master stays a master until the sentinels convert it (their
// INFO period, ten seconds); the probe while UP asks the sentinels, finds
// the live ones naming the promoted replica, fails, and the next dials
// anew: UP at the promoted master within seconds, not ten.
func TestReview4FrozenSentinelFirstFailover(t *testing.T) {
	t.Parallel()
	review4Frozen(t, "g4grp", true, false)
}

// See TestReview4FrozenSentinelFirst.
func TestReview4FrozenSentinelOther(t *testing.T) {
	t.Parallel()
	review4Frozen(t, "o4grp", false, true)
}

func review4Frozen(t *testing.T, name string, first, cut bool) {
	const probeTimeout = time.Second
	g := redistest.StartGroup(t, redistest.GroupOptions{Name: name})
	ctx := context.Background()
	n := newNode(t, node.Options{
		Name: name, Sentinel: &node.SentinelOptions{Master: name, Addrs: g.SentinelAddrs()},
		ProbeTimeout: probeTimeout,
	}, nil)
	probeUntil(t, n, 10*time.Second, "first probe", func(err error) bool { return err == nil })
	time.Sleep(1100 * time.Millisecond) // set-up: the probe client's subscription is the oldest by a second (CLIENT LIST ages)
	review4Within(t, 5*time.Second, "SET before freezing", func() error { return n.Client().Set(ctx, "k", "v0", 0).Err() })
	old := n.MasterAddr()

	frozen := review4PickSentinel(t, g, first)
	var live string
	for _, s := range g.Sentinels() {
		if s != frozen {
			live = s.Addr()
			break
		}
	}
	if err := frozen.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = frozen.Resume() })
	t.Logf("froze sentinel %s (first: %v); live sentinel %s", frozen.Addr(), first, live)

	if cut {
		// Every connection of the node's clients to the master is cut: they
		// dial again, through the sentinels.
		killOldClients(t, g.Client(t, old), 0)
		start := time.Now()
		probes, _ := review4ProbeUp(t, n, old, 3*time.Second, "UP at the same master on new connections")
		t.Logf("probes after the cut (UP %v after it): %s", time.Since(start).Round(time.Millisecond), probes)
		review4Within(t, 3*time.Second, "SET on new connections", func() error { return n.Client().Set(ctx, "k", "v1", 0).Err() })
		t.Logf("SET works %v after the cut", time.Since(start).Round(time.Millisecond))
	}

	sc := redis.NewClient(&redis.Options{Addr: live, Protocol: 2})
	defer sc.Close()
	if err := sc.Do(ctx, "sentinel", "failover", name).Err(); err != nil {
		t.Fatalf("SENTINEL FAILOVER: %v", err)
	}
	promoted := sentinelMaster(t, g, live, name, old, 15*time.Second)
	start := time.Now()
	// A probe client that listens to the frozen sentinel hears no
	// +switch-master; the probe's own question to the sentinels finds it.
	probes, last := review4ProbeUp(t, n, promoted, 5*time.Second, "UP at the promoted master")
	t.Logf("probes after the failover (UP at %s %v after the live sentinel named it): %s",
		promoted, time.Since(start).Round(time.Millisecond), probes)
	if last >= probeTimeout {
		t.Errorf("the probe that found the promoted master took %v, want < the probe timeout %v (a hung sentinel held it)", last, probeTimeout)
	}
	review4Within(t, 3*time.Second, "SET at the promoted master", func() error { return n.Client().Set(ctx, "k", "v2", 0).Err() })
	if v, err := g.Client(t, promoted).Get(ctx, "k").Result(); err != nil || v != "v2" {
		t.Fatalf("k on the promoted master %s: %q %v, want v2", promoted, v, err)
	}
	t.Logf("SET works at the promoted master %v after it was named", time.Since(start).Round(time.Millisecond))
}

// review4PickSentinel returns the sentinel of g that the node's probe
// client listens to (go-redis failover clients subscribe to the sentinel
// they ask first; the probe client's is the oldest subscription, made a
// second before any other), or, when !probes, one nobody listens to.
func review4PickSentinel(t *testing.T, g *redistest.Group, probes bool) *redisproc.Server {
	t.Helper()
	ctx := context.Background()
	var oldest, idle *redisproc.Server
	oldestAge := -1
	for _, s := range g.Sentinels() {
		c := redis.NewClient(&redis.Options{Addr: s.Addr(), Protocol: 2, MaxRetries: -1})
		list, err := c.ClientList(ctx).Result()
		_ = c.Close()
		if err != nil {
			t.Fatal(err)
		}
		var ages []int
		for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
			if !strings.Contains(line, " flags=P ") {
				continue
			}
			for _, kv := range strings.Fields(line) {
				if v, ok := strings.CutPrefix(kv, "age="); ok {
					age, _ := strconv.Atoi(v)
					ages = append(ages, age)
					if age > oldestAge {
						oldest, oldestAge = s, age
					}
				}
			}
		}
		if len(ages) == 0 {
			idle = s
		}
		t.Logf("sentinel %s: subscribers aged %v s", s.Addr(), ages)
	}
	pick := map[bool]*redisproc.Server{true: oldest, false: idle}[probes]
	if pick == nil {
		t.Fatalf("no sentinel found (probe client's: %v)", probes)
	}
	return pick
}

// review4ProbeUp probes n as the health scheduler would until it is UP at
// master, within limit, and returns each probe's outcome and duration,
// and the duration of the last (successful) one.
func review4ProbeUp(t *testing.T, n *node.Node, master string, limit time.Duration, what string) (string, time.Duration) {
	t.Helper()
	var log []string
	deadline := time.Now().Add(limit)
	for {
		start := time.Now()
		err := n.Probe(context.Background())
		took := time.Since(start)
		if err == nil {
			n.SetUp()
			log = append(log, "ok "+took.Round(time.Millisecond).String())
		} else {
			n.SetDown(err)
			log = append(log, took.Round(time.Millisecond).String()+" "+err.Error())
		}
		if err == nil && n.MasterAddr() == master {
			return review4Tail(log), took
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the node is not UP at %s within %v (MasterAddr %q); %d probes: %s",
				what, master, limit, n.MasterAddr(), len(log), review4Tail(log))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// review4Tail returns the first and last few entries of log.
func review4Tail(log []string) string {
	if len(log) <= 6 {
		return strings.Join(log, "; ")
	}
	return strings.Join(log[:3], "; ") + "; ... (" + strconv.Itoa(len(log)-6) + " more); " + strings.Join(log[len(log)-3:], "; ")
}

// review4Within calls f until it returns nil, within limit.
func review4Within(t *testing.T, limit time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after %v: %v", what, limit, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
