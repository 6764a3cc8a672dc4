package node_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
)

// probeUntil probes n until ok(err) or the deadline, applying each result
// to the node's state as the health scheduler would, and returns the last
// probe error.
func probeUntil(t *testing.T, n *node.Node, limit time.Duration, what string, ok func(error) bool) error {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := n.Probe(context.Background())
		if err == nil {
			n.SetUp()
		} else {
			n.SetDown(err)
		}
		if ok(err) {
			return err
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v (last probe: %v)", what, limit, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// roleOf returns the first element of ROLE on c: "master" or "slave".
func roleOf(ctx context.Context, c *redis.Client) (string, error) {
	v, err := c.Do(ctx, "role").Slice()
	if err != nil {
		return "", err
	}
	if len(v) == 0 {
		return "", fmt.Errorf("empty ROLE reply")
	}
	s, _ := v[0].(string)
	return s, nil
}

// A Sentinel node follows its group through kill -9 of the master: DOWN
// with fast refusals while no master answers, UP on the promoted replica
// without a restart, with the same stamp (replicated) and the data
// acknowledged by a replica (WAIT on the node's client). Its read client
// reads from a replica; its write client from the master.
func TestSentinelNodeFollowsFailover(t *testing.T) {
	g := redistest.StartGroup(t, redistest.GroupOptions{Name: "grp"})
	ctx := context.Background()
	n := newNode(t, node.Options{
		Name:         "s1",
		Sentinel:     &node.SentinelOptions{Master: "grp", Addrs: g.SentinelAddrs(), ReadFromReplicas: true},
		ProbeTimeout: time.Second,
	}, nil)
	if n.Addr() != "sentinel:grp" || !n.IsSentinel() {
		t.Errorf("Addr %q IsSentinel %v, want sentinel:grp, true", n.Addr(), n.IsSentinel())
	}
	probeUntil(t, n, 10*time.Second, "first probe", func(err error) bool { return err == nil })
	master := g.Master()
	if n.MasterAddr() != master {
		t.Errorf("MasterAddr = %q, want %q", n.MasterAddr(), master)
	}
	inc := n.Incarnation()

	// Writes go to the master and, with WAIT in the same pipeline (one
	// connection), are on the replica when acknowledged.
	cmds, err := n.Client().Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "k", "v1", 0)
		p.Do(ctx, "wait", 1, 900)
		return nil
	})
	if acks, _ := cmds[1].(*redis.Cmd).Int64(); err != nil || acks != 1 {
		t.Fatalf("SET + WAIT 1: %v, acknowledged by %d replicas; want 1", err, acks)
	}
	if r, err := roleOf(ctx, n.Client()); err != nil || r != "master" {
		t.Errorf("ROLE through Client: %q %v, want master", r, err)
	}
	if r, err := roleOf(ctx, n.ReadClient()); err != nil || r != "slave" {
		t.Errorf("ROLE through ReadClient (replica_preferred): %q %v, want slave", r, err)
	}

	killed := time.Now()
	old := g.KillMaster()
	// The first failed command counts as a failure; the probe then finds
	// no master and the node goes DOWN.
	_ = n.Client().Get(ctx, "k").Err()
	probeUntil(t, n, 10*time.Second, "DOWN after kill -9 of the master", func(err error) bool { return err != nil })
	down := time.Since(killed)
	fastLoops(t, "GET while the group has no master", func() error {
		if err := n.Client().Get(ctx, "k").Err(); !errors.Is(err, node.ErrDown) {
			return fmt.Errorf("err = %v, want ErrDown", err)
		}
		if err := n.ReadClient().Get(ctx, "k").Err(); !errors.Is(err, node.ErrDown) {
			return fmt.Errorf("read client: err = %v, want ErrDown", err)
		}
		return nil
	})
	probeUntil(t, n, 20*time.Second, "UP on the promoted replica", func(err error) bool { return err == nil })
	t.Logf("DOWN %v and UP %v after kill -9", down.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
	promoted := g.Master()
	if promoted == old || n.MasterAddr() != promoted {
		t.Errorf("MasterAddr %q after failover, want the promoted %q (old %q)", n.MasterAddr(), promoted, old)
	}
	if n.Incarnation() != inc {
		t.Errorf("incarnation %q after failover, want the replicated %q", n.Incarnation(), inc)
	}
	if v, err := n.Client().Get(ctx, "k").Result(); err != nil || v != "v1" {
		t.Errorf("GET k on the promoted master: %q %v, want v1", v, err)
	}
	if err := n.Client().Set(ctx, "k", "v2", 0).Err(); err != nil {
		t.Errorf("SET on the promoted master: %v", err)
	}
}

// A master demoted while alive (a manual SENTINEL FAILOVER) is not used
// for writes: the node ends on the new master, and writes through its
// client land there.
func TestSentinelNodeFollowsManualFailover(t *testing.T) {
	g := redistest.StartGroup(t, redistest.GroupOptions{Name: "grp2"})
	ctx := context.Background()
	n := newNode(t, node.Options{
		Name: "s2", Sentinel: &node.SentinelOptions{Master: "grp2", Addrs: g.SentinelAddrs()}, ProbeTimeout: time.Second,
	}, nil)
	probeUntil(t, n, 10*time.Second, "first probe", func(err error) bool { return err == nil })
	if err := n.Client().Set(ctx, "k", "v1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// past a sentinel's TILT (30 s) on a loaded machine (Group.Failover)
	old, promoted := g.Failover(g.SentinelAddrs()[0], 60*time.Second)
	var sawNotMaster bool
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := n.Probe(ctx)
		sawNotMaster = sawNotMaster || errors.Is(err, node.ErrNotMaster)
		if err == nil {
			n.SetUp()
		} else {
			n.SetDown(err)
		}
		if err == nil && n.MasterAddr() == promoted {
			if werr := n.Client().Set(ctx, "k", "v2", 0).Err(); werr == nil {
				break
			} else if !redis.IsReadOnlyError(werr) && !node.IsFailure(ctx, werr) {
				t.Fatalf("SET after the switch: %v", werr)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node did not settle on the new master %s (MasterAddr %q, last probe %v)", promoted, n.MasterAddr(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("settled on %s (old %s); a probe saw the demoted master: %v", promoted, old, sawNotMaster)
	direct := g.Client(t, promoted)
	if v, err := direct.Get(ctx, "k").Result(); err != nil || v != "v2" {
		t.Errorf("GET k on the new master directly: %q %v, want v2", v, err)
	}
}
