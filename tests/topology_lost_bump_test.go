package tests

import (
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/topology"
)

// A node that loses only its topology writes (the bump and the stable
// record of an apply that moved nothing off it: a crash before they were
// on disk, a failover to a replica without them) went back as surely as
// one that lost reservations: the apply reported the topology applied
// and relies on it, and the node is back at the earlier epoch, where an
// instance still at that epoch acts on it (no script at the old token
// may run after the bump: inventory/epoch.go), and no accept fences it,
// since nothing refused it. So the topology writes advance the node's
// write sequence like every inventory write, and the node is refused as
// gone back (ErrRolledBack) until accepted, its accept fencing it behind
// its peers. Before, its sequence was unchanged: after the hold it came
// back UP at the earlier token.
func TestNodeThatLostOnlyItsTopologyWritesIsRefused(t *testing.T) {
	c := newInvCluster(t, invOpts{})
	ctx := invCtx(t, 60*time.Second)
	c.load("r", "s", 30, 0)
	n3 := c.clients["n3"]
	before := n3.HGet(ctx, node.StampKey, "epoch").Val()
	if err := n3.Save(ctx).Err(); err != nil { // the copy n3 comes back with
		t.Fatal(err)
	}
	// A new route over n1 and n2: every node is bumped, nothing moves off n3.
	cfg := *c.cfg
	cfg.Servers = map[string]config.Server{invServer: {OnNodeDown: config.OnNodeDownFail,
		Routes: map[string][]string{"r": c.names, "r2": {"n1", "n2"}}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	applyTopology(t, &cfg, c.cfg, time.Second, topology.PhaseStable)
	if now := n3.HGet(ctx, node.StampKey, "epoch").Val(); now == before {
		t.Fatalf("n3 still at token %q after the apply", now)
	}
	c.srv["n3"].Kill()
	c.srv["n3"].Restart() // back from the copy taken before its bump
	if now := n3.HGet(ctx, node.StampKey, "epoch").Val(); now != before {
		t.Fatalf("n3 came back at token %q, want the earlier %q", now, before)
	}
	waitRefused(t, c.r, "n3", node.ErrRolledBack)
}
