package tests

import (
	"context"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
)

// A node refused for coming back empty and accepted once its hold-back
// is long over is used from the probe the accept asks for: the refused
// probes never recorded the new server process, so the first probe after
// the accept found it "new" and held the node back a whole hold_back
// more (and a DOWN node waited out its backoff for that probe).
func TestAcceptedNodeNotHeldBackAgain(t *testing.T) {
	t.Parallel()
	srv := redistest.StartN(t, 3, redistest.Options{})
	h := config.Health{Heartbeat: 100 * time.Millisecond, Timeout: 300 * time.Millisecond,
		Backoff: []time.Duration{100 * time.Millisecond, 5 * time.Second}, HoldBack: 1500 * time.Millisecond}
	cfg := newConfig(t, nodeAddrs(srv), map[string]config.Server{"inventory": server(config.OnNodeDownFail,
		map[string][]string{"r": {"n1"}, "s": {"n2", "n3"}})}, &h)
	r, inv := rollbackInventory(t, cfg, 10)
	reserveSome(t, inv, "o", 1)
	ctx := context.Background()
	n1, _ := r.Node("n1")
	waitFor(t, 5*time.Second, "n1's mark on a peer", func() bool {
		m, err := node.ParseMark(srv[1].Client(t).HGet(ctx, node.WitnessKey, "n1").Val())
		return err == nil && m.Seq >= n1.MaxSeq()
	})
	srv[0].Kill()
	srv[0].Restart() // empty: no persistence
	waitRefused(t, r, "n1", node.ErrDataLost)
	time.Sleep(h.HoldBack + 200*time.Millisecond) // every hold of the new process is over
	start := time.Now()
	if _, err := r.AcceptNode(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "n1 UP after the accept", func() bool { return n1.State() == node.StateUp })
	if took := time.Since(start); took >= h.HoldBack {
		t.Errorf("n1 UP %v after the accept; want sooner than hold_back (%v): its hold ran out before the accept", took, h.HoldBack)
	}
}
