package node_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
)

// sentinelMaster returns the master that the sentinel at addr names for
// group name, once it names one other than old whose ROLE is master,
// within limit. It asks that one sentinel only: redistest.Group.Master
// wants a majority of the group's sentinels, counting dead ones.
func sentinelMaster(t *testing.T, g *redistest.Group, addr, name, old string, limit time.Duration) string {
	t.Helper()
	sc := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, MaxRetries: -1})
	defer sc.Close()
	deadline := time.Now().Add(limit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		v, err := sc.Do(ctx, "sentinel", "get-master-addr-by-name", name).StringSlice()
		if err == nil && len(v) == 2 {
			if m := net.JoinHostPort(v[0], v[1]); m != old {
				if r, rerr := roleOf(ctx, g.Client(t, m)); rerr == nil && r == "master" {
					cancel()
					return m
				}
			}
		}
		cancel()
		if time.Now().After(deadline) {
			t.Fatalf("sentinel %s: no master other than %s within %v (last %v %v)", addr, old, limit, v, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// upAt probes n, as the health scheduler would, until it is UP at master.
func upAt(t *testing.T, n *node.Node, master string, limit time.Duration) {
	t.Helper()
	probeUntil(t, n, limit, "UP at "+master, func(err error) bool { return err == nil && n.MasterAddr() == master })
}

// killOldClients kills, on the data server c, the normal client
// connections at least minAge seconds old, but the sentinels' links.
func killOldClients(t *testing.T, c *redis.Client, minAge int) int {
	t.Helper()
	ctx := context.Background()
	list, err := c.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	killed := 0
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		f := map[string]string{}
		for _, kv := range strings.Fields(line) {
			if k, v, ok := strings.Cut(kv, "="); ok {
				f[k] = v
			}
		}
		age, _ := strconv.Atoi(f["age"])
		if f["flags"] != "N" || age < minAge || strings.HasPrefix(f["name"], "sentinel-") {
			continue
		}
		if err := c.Do(ctx, "client", "kill", "id", f["id"]).Err(); err == nil {
			killed++
		}
	}
	return killed
}

// Suspected break 1. A Sentinel node's witness client (Witness,
// WitnessOf) must, once the node is UP at a new master, write and read
// there at once: during a manual failover the old master stays a master
// until the sentinels convert it (up to their 10s INFO period after the
// switch), and a mark written there is then lost at its resync; a read
// there is stale. go-redis drops a failover client's connections to a
// former master when its own sentinel (one, chosen at its first dial)
// announces +switch-master, or at its next dial; the sentinels' CLIENT
// KILL at the conversion drops them too. Here the witness client's
// sentinel (the only seed) is dead through the failover and its pooled
// connections are healthy, while the probe client (which dialled again
// after its connection was cut, through a live sentinel) hears the switch
// and brings the node UP at the new master before the conversion.
func TestReview3WitnessFollowsFailover(t *testing.T) {
	t.Parallel()
	const name = "w3grp"
	g := redistest.StartGroup(t, redistest.GroupOptions{Name: name})
	ctx := context.Background()
	n := newNode(t, node.Options{
		Name: "w3", Sentinel: &node.SentinelOptions{Master: name, Addrs: g.SentinelAddrs()[:1]}, ProbeTimeout: time.Second,
	}, nil)
	probeUntil(t, n, 10*time.Second, "first probe", func(err error) bool { return err == nil })
	old := g.Master()
	oldc := g.Client(t, old)
	time.Sleep(2100 * time.Millisecond) // set-up: the probe's connection ages past the witness client's (CLIENT LIST ages are whole seconds)
	// Fill the witness client's pool (2 connections) with connections to
	// the old master.
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := n.Witness(ctx, "peer", node.Mark{Gen: 1, Incarnation: "i1", Seq: int64(i)}); err != nil {
				t.Errorf("Witness before the failover: %v", err)
			}
		}()
	}
	wg.Wait()
	if err := g.Sentinels()[0].Kill(); err != nil {
		t.Fatal(err)
	}
	// The probe's connection is cut: its client dials again, asks the
	// sentinels it discovered (the seed is dead) and listens to one of
	// them; the witness client keeps its connections and its dead seed.
	if killOldClients(t, oldc, 2) == 0 {
		t.Fatal("no probe connection found to kill")
	}
	probeUntil(t, n, 10*time.Second, "a probe on a new connection", func(err error) bool { return err == nil })

	other := g.SentinelAddrs()[1]
	sc := redis.NewClient(&redis.Options{Addr: other, Protocol: 2})
	defer sc.Close()
	if err := sc.Do(ctx, "sentinel", "failover", name).Err(); err != nil {
		t.Fatalf("SENTINEL FAILOVER: %v", err)
	}
	promoted := sentinelMaster(t, g, other, name, old, 20*time.Second)
	upAt(t, n, promoted, 20*time.Second)
	r, _ := roleOf(ctx, oldc)
	t.Logf("UP at %s; the old master %s has role %s", promoted, old, r)

	// At once: the write lands on the new master.
	ok, err := n.Witness(ctx, "peer", node.Mark{Gen: 1, Incarnation: "i1", Seq: 100})
	if err != nil || !ok {
		t.Fatalf("Witness right after UP at the new master %s (old %s): %v %v", promoted, old, ok, err)
	}
	direct := g.Client(t, promoted)
	if v, err := direct.HGet(ctx, node.WitnessKey, "peer").Result(); err != nil || v != "1:i1:100" {
		t.Fatalf("the mark on the new master %s: %q %v, want 1:i1:100 (the Witness write went elsewhere)", promoted, v, err)
	}
	// Reads too: a distinct mark written on the old master (while still a
	// master, or as a writable replica) is not what WitnessOf returns.
	if err := oldc.ConfigSet(ctx, "replica-read-only", "no").Err(); err != nil {
		t.Fatal(err)
	}
	if err := oldc.HSet(ctx, node.WitnessKey, "peer", "1:i1:7").Err(); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		m, found, err := n.WitnessOf(ctx, "peer")
		if err != nil || !found || m.Seq != 100 {
			t.Fatalf("WitnessOf after the failover: %v %v %v, want seq 100 from the new master (7: read on the old one)", m, found, err)
		}
	}
}

// waitRole polls ROLE on c until it is want, within limit, and returns
// how long that took.
func waitRole(t *testing.T, c func() *redis.Client, want string, limit time.Duration, what string) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		r, err := roleOf(ctx, c())
		cancel()
		if err == nil && r == want {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			t.Fatalf("%s: ROLE through the read client is %q %v after %v, want %q", what, r, err, limit, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Suspected break 2: after a manual failover the read client of a node
// with ReadFromReplicas must not stay on the promoted server (now the
// master) through its pooled connection: it reads from a replica again
// (the demoted master, once the sentinels list it as healthy).
func TestReview3ReadClientLeavesPromotedReplica(t *testing.T) {
	t.Parallel()
	g := redistest.StartGroup(t, redistest.GroupOptions{Name: "r3grp"})
	n := newNode(t, node.Options{
		Name:         "r3",
		Sentinel:     &node.SentinelOptions{Master: "r3grp", Addrs: g.SentinelAddrs(), ReadFromReplicas: true},
		ProbeTimeout: time.Second,
	}, nil)
	probeUntil(t, n, 10*time.Second, "first probe", func(err error) bool { return err == nil })
	waitRole(t, n.ReadClient, "slave", 10*time.Second, "before the failover")
	// past a sentinel's TILT (30 s) on a loaded machine (Group.Failover)
	_, promoted := g.Failover(g.SentinelAddrs()[0], 60*time.Second)
	upAt(t, n, promoted, 20*time.Second)
	took := waitRole(t, n.ReadClient, "slave", 40*time.Second, "after the failover")
	t.Logf("the read client reads from a replica %v after UP at %s", took.Round(time.Millisecond), promoted)
}

// Suspected break 2, "does it ever pick a healthy replica again": the
// master is killed, its replica promoted, and the node comes back UP with
// no replica left (the read client falls back to the master). Once the
// former master rejoins as a replica, without any DOWN→UP of the node,
// the read client reads from it again within a bounded time.
func TestReview3ReadClientFindsRejoinedReplica(t *testing.T) {
	t.Parallel()
	g := redistest.StartGroup(t, redistest.GroupOptions{Name: "k3grp"})
	ctx := context.Background()
	n := newNode(t, node.Options{
		Name:         "k3",
		Sentinel:     &node.SentinelOptions{Master: "k3grp", Addrs: g.SentinelAddrs(), ReadFromReplicas: true},
		ProbeTimeout: time.Second,
	}, nil)
	probeUntil(t, n, 10*time.Second, "first probe", func(err error) bool { return err == nil })
	waitRole(t, n.ReadClient, "slave", 10*time.Second, "before the failover")
	old := g.KillMaster()
	_ = n.Client().Get(ctx, "k").Err()
	probeUntil(t, n, 10*time.Second, "DOWN after kill -9 of the master", func(err error) bool { return err != nil })
	promoted := g.WaitPromoted(old, 60*time.Second) // past a TILT (redistest Group.Failover)
	upAt(t, n, promoted, 20*time.Second)
	if r, err := roleOf(ctx, n.ReadClient()); err != nil {
		t.Fatalf("ROLE through the read client with no replica: %v", err)
	} else {
		t.Logf("with no replica the read client reads from a %s", r)
	}
	g.Rejoin(old, 30*time.Second)
	took := waitRole(t, n.ReadClient, "slave", 40*time.Second, "after the old master rejoined")
	t.Logf("the read client reads from the rejoined replica %v after it synced", took.Round(time.Millisecond))
	if n.State() != node.StateUp {
		t.Errorf("state %v, want up", n.State())
	}
}
