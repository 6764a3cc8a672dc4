package redistest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/internal/redisproc"
)

// GroupOptions configures StartGroup: see redisproc.GroupOptions. The zero
// value is one master, one replica and three sentinels (quorum 2,
// down-after 1s, failover-timeout 2s), without persistence.
type GroupOptions = redisproc.GroupOptions

// Group is a Sentinel master group started for a test: real redis-server
// processes (a master and its replicas) and redis-sentinel processes, on
// free loopback ports. Methods that can fail report with t.Fatalf on the
// TB given to StartGroup, so call them from that test's goroutine.
type Group struct {
	t testing.TB
	g *redisproc.Group
}

// StartGroup starts a master group and returns once the replicas are in
// sync and every sentinel knows every replica and sentinel, so a failover
// can start at once. It fails the test when redis-server or redis-sentinel
// is missing or the group does not settle within 30s. A t.Cleanup kills
// and closes every process.
func StartGroup(t testing.TB, opts GroupOptions) *Group {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	opts.KillWithParent = true
	g, err := redisproc.StartGroup(opts)
	if errors.Is(err, redisproc.ErrNotFound) {
		t.Fatalf("%v; run `make test`, which installs redis-server and redis-sentinel", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	tg := &Group{t: t, g: g}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs of group %s:\n%s", g.Name, g.Logs(40))
		}
		for _, s := range append(append([]*redisproc.Server(nil), g.Sentinels...), g.Data...) {
			if err := s.Kill(); err != nil {
				t.Errorf("redistest: %v", err)
			}
		}
		if err := g.Close(); err != nil {
			t.Errorf("redistest: %v", err)
		}
	})
	return tg
}

// Name returns the master group's name.
func (g *Group) Name() string { return g.g.Name }

// SentinelAddrs returns the sentinels' addresses.
func (g *Group) SentinelAddrs() []string { return g.g.SentinelAddrs() }

// Data returns the group's data servers; Data()[0] started as the master.
func (g *Group) Data() []*redisproc.Server { return g.g.Data }

// Sentinels returns the group's sentinel processes.
func (g *Group) Sentinels() []*redisproc.Server { return g.g.Sentinels }

// Master returns the address a majority of the sentinels name as master.
func (g *Group) Master() string {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	addr, err := g.g.Master(ctx)
	if err != nil {
		g.t.Fatal(err)
	}
	return addr
}

// KillMaster kills the current master with SIGKILL (kill -9) and returns
// its address.
func (g *Group) KillMaster() string {
	g.t.Helper()
	addr := g.Master()
	if err := g.g.ByAddr(addr).Kill(); err != nil {
		g.t.Fatal(err)
	}
	return addr
}

// WaitPromoted waits up to limit until the sentinels name a master other
// than old that reports role master, and returns its address.
func (g *Group) WaitPromoted(old string, limit time.Duration) string {
	g.t.Helper()
	addr, err := g.g.WaitPromoted(context.Background(), old, limit)
	if err != nil {
		g.t.Fatal(err)
	}
	return addr
}

// Failover switches the group by hand: it sends SENTINEL FAILOVER to
// the sentinel at via, and again every 5 s, until the sentinels name a
// master other than the current one that reports role master, within
// limit, and returns the old master's address and the new one's. A
// sentinel whose timer was held up for over 2 s (a loaded machine)
// enters TILT mode and acts on nothing for 30 s, so a failover it was
// asked for before or during it stalls and may time out; the next
// request after the TILT starts one anew (one while a failover is under
// way is refused with INPROG, which changes nothing). Give limit more
// than 30 s where the machine may be loaded.
func (g *Group) Failover(via string, limit time.Duration) (old, promoted string) {
	g.t.Helper()
	old = g.Master()
	sc := redis.NewSentinelClient(&redis.Options{Addr: via, Protocol: 2, MaxRetries: -1})
	defer sc.Close()
	deadline := time.Now().Add(limit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := sc.Failover(ctx, g.g.Name).Err()
		cancel()
		if err != nil && !strings.Contains(err.Error(), "INPROG") {
			g.t.Logf("SENTINEL FAILOVER %s at %s: %v", g.g.Name, via, err)
		}
		wait := min(5*time.Second, time.Until(deadline))
		addr, err := g.g.WaitPromoted(context.Background(), old, wait)
		if err == nil {
			return old, addr
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("no manual failover within %v: %v", limit, err)
		}
	}
}

// Rejoin restarts the former master at addr if needed and makes it a
// replica of the current master, then waits up to limit for the group to
// settle (see redisproc.Group.Rejoin).
func (g *Group) Rejoin(addr string, limit time.Duration) {
	g.t.Helper()
	ctx := context.Background()
	if err := g.g.Rejoin(ctx, addr); err != nil {
		g.t.Fatal(err)
	}
	if err := g.g.WaitSettled(ctx, limit); err != nil {
		g.t.Fatal(err)
	}
}

// Client returns a plain client of the data server at addr (no sentinel
// involved), closed by a t.Cleanup on t.
func (g *Group) Client(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, Password: g.g.Password, Protocol: 2, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
