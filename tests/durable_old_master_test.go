package tests

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
)

// With durability replica and two replicas per group (README: so one
// replica's outage does not stop writes), WAIT 1 can be answered by a
// replica the failover is about to resync. Here the sentinels switch the
// group over to replica r1 (SENTINEL FAILOVER, the old master still
// running); r2 cannot be reconfigured yet, and the sentinels are cut off
// from this process (frozen) once r1 is promoted, before they announce
// anything: every sentinel still names the old master, or none answers.
// The node stays UP at the old master, a Reserve runs there on a pooled
// connection, and its WAIT is answered by r2, still the old master's
// replica. Acknowledged; then the sentinels finish the switch, r2 resyncs
// from r1, which never had the Reserve, and the old master is converted
// too: the acknowledged reservation is gone (its units sold again). The
// rule (durability.go, "The server that acknowledged"): a write on a
// Sentinel group is acknowledged only when, after its WAIT, a majority of
// the group's sentinels answer that the server it ran on (its run_id,
// read on the same connection) is the master, with no failover under way.
func TestAcknowledgedWriteOnADemotedMasterIsNotDurable(t *testing.T) {
	t.Parallel()
	const pw = "grouppw"
	g := redistest.StartGroup(t, redistest.GroupOptions{Name: "old-master-ack", Password: pw, Replicas: 2,
		DownAfter: 5 * time.Second, FailoverTimeout: 60 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	old, r1, r2 := masterAndReplicas(g)
	oc, c1, c2 := g.Client(t, old), g.Client(t, r1), g.Client(t, r2)
	// r2 is never the one promoted; the sentinel that leads the switch
	// must know it before it starts (it reads a replica's INFO every 10 s)
	if err := c2.ConfigSet(ctx, "replica-priority", "0").Err(); err != nil {
		t.Fatal(err)
	}
	leader := redis.NewSentinelClient(&redis.Options{Addr: g.SentinelAddrs()[0], Protocol: 2})
	defer leader.Close()
	waitFor(t, 30*time.Second, "the leading sentinel sees r2's priority 0", func() bool {
		rs, err := leader.Replicas(ctx, g.Name()).Result()
		if err != nil {
			return false
		}
		for _, r := range rs {
			if r["ip"]+":"+r["port"] == r2 {
				return r["slave-priority"] == "0"
			}
		}
		return false
	})

	cfg := durableSentinelConfig(g, pw)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	inv, n1 := durableOrderA(ctx, t, &cfg)

	// r2 refuses to be reconfigured (the leader cannot reach it), so it
	// stays the old master's replica whatever the leader does next
	if err := c2.Do(ctx, "acl", "setuser", "default", "-slaveof", "-replicaof").Err(); err != nil {
		t.Fatal(err)
	}
	if err := leader.Failover(ctx, g.Name()).Err(); err != nil {
		t.Fatalf("SENTINEL FAILOVER: %v", err)
	}
	waitFor(t, 30*time.Second, "r1 promoted", func() bool {
		role, err := c1.Do(ctx, "role").Slice()
		return err == nil && len(role) > 0 && role[0] == "master"
	})
	// this process loses the sentinels: none answers, none announces
	for _, s := range g.Sentinels() {
		if err := s.Pause(); err != nil {
			t.Fatal(err)
		}
	}
	resumed := false
	resume := func() {
		if resumed {
			return
		}
		resumed = true
		for _, s := range g.Sentinels() {
			_ = s.Resume()
		}
	}
	defer resume()
	waitFor(t, 10*time.Second, "n1 usable at the old master", func() bool { return n1.Usable() && n1.MasterAddr() == old })
	if info, err := oc.Info(ctx, "replication").Result(); err != nil || !strings.Contains(info, "connected_slaves:1") ||
		!strings.Contains(info, "role:master") {
		t.Fatalf("the old master before the Reserve: %q %v, want a master with r2 alone", info, err)
	}

	_, xerr := inv.Reserve(ctx, "x", []inventory.Item{{Route: "r", SKU: "tee", Quantity: 1}}, "", 0)
	t.Logf("Reserve x on the old master, r1 promoted, r2 still its replica: %v", xerr)
	acked, _ := oc.HGetAll(ctx, "inv:stock:r:tee").Result()

	// the sentinels come back and finish the switch: r2 resyncs from r1
	if err := c2.Do(ctx, "acl", "setuser", "default", "+slaveof", "+replicaof").Err(); err != nil {
		t.Fatal(err)
	}
	resume()
	inSyncWith(ctx, t, c2, r1, 60*time.Second)
	if m := g.Master(); m != r1 {
		t.Fatalf("the sentinels name %s, want r1 %s", m, r1)
	}
	newMasterHolds(ctx, t, c1, acked, xerr, "(WAIT answered by r2, the old master's replica) but the group's new master")
}

// durableOrderA starts a router and an inventory over cfg (warnings
// logged to t), waits until n1 is usable, loads 10 units of r/tee and
// reserves order a (1 unit): the start of the old-master durability
// tests. It returns the inventory and node n1.
func durableOrderA(ctx context.Context, t *testing.T, cfg *config.Config) (*inventory.Inventory, *node.Node) {
	t.Helper()
	r, _ := startRouter(t, cfg)
	logger := slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	inv, err := inventory.New(r, inventory.Options{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(inv.Close)
	n1, _ := r.Node("n1")
	waitFor(t, 10*time.Second, "n1 usable", func() bool { return n1.Usable() })
	if _, err := inv.LoadStock(ctx, "r", "tee", 10, 0); err != nil {
		t.Fatalf("LoadStock: %v", err)
	}
	if _, err := inv.Reserve(ctx, "a", []inventory.Item{{Route: "r", SKU: "tee", Quantity: 1}}, "", 0); err != nil {
		t.Fatalf("Reserve a: %v", err)
	}
	return inv, n1
}

// masterAndReplicas are the addresses of group g's master and its two
// replicas, in the group's order.
func masterAndReplicas(g *redistest.Group) (old, r1, r2 string) {
	old = g.Master()
	for _, s := range g.Data() {
		switch {
		case s.Addr() == old:
		case r1 == "":
			r1 = s.Addr()
		default:
			r2 = s.Addr()
		}
	}
	return old, r1, r2
}

// inSyncWith waits up to limit until the replica c replicates from
// master addr with its link up.
func inSyncWith(ctx context.Context, t *testing.T, c *redis.Client, addr string, limit time.Duration) {
	t.Helper()
	waitFor(t, limit, "r2 in sync with r1", func() bool {
		info, err := c.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_port:"+addr[strings.LastIndex(addr, ":")+1:]) &&
			strings.Contains(info, "master_link_status:up")
	})
}

// newMasterHolds fails the test when Reserve x (its error xerr) was
// acknowledged but the stock the new master (c) holds is not acked, the
// stock the old master held after it (why: how it was acknowledged and
// which master); an error other than an unknown outcome fails it too.
func newMasterHolds(ctx context.Context, t *testing.T, c *redis.Client, acked map[string]string, xerr error, why string) {
	t.Helper()
	now, err := c.HGetAll(ctx, "inv:stock:r:tee").Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stock on the old master after x: %v; on the new master: %v", acked, now)
	if xerr != nil && !errors.Is(xerr, inventory.ErrNotDurable) && !errors.Is(xerr, inventory.ErrUnavailable) {
		t.Fatalf("Reserve x: %v, want acknowledged or unknown", xerr)
	}
	if xerr == nil && !maps.Equal(acked, now) {
		t.Errorf("Reserve x was acknowledged %s does not hold it: stock %v, acknowledged %v", why, now, acked)
	}
}
