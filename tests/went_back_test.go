package tests

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
)

// A node that lost writes acknowledged to a process cut off from the
// node's peers (not from the node) stays refused by every process: the
// cut-off process's probe finds the stamp behind what it saw during the
// hold after the restart and records that on the node (node/wentback.go),
// where its marks could not reach the peers. Before, the other process
// used the node once the hold ended, its writes took the write sequence
// past what the cut-off one saw, and from then on nobody could tell that
// 12 acknowledged reservations were gone.
func TestLossSeenByACutOffProcessStaysRefused(t *testing.T) {
	t.Parallel()
	srv := redistest.StartN(t, 3, redistest.Options{})
	h := config.Health{Heartbeat: 500 * time.Millisecond, Timeout: 300 * time.Millisecond, Backoff: []time.Duration{100 * time.Millisecond}}
	servers := map[string]config.Server{"inventory": server(config.OnNodeDownFail,
		map[string][]string{"r": {"n1"}, "s": {"n2", "n3"}})}
	cfgR := newConfig(t, nodeAddrs(srv), servers, &h)
	p2, p3 := startLatencyProxy(t, srv[1].Addr(), 0), startLatencyProxy(t, srv[2].Addr(), 0)
	cfgW := newConfig(t, map[string]string{"n1": srv[0].Addr(), "n2": p2.Addr(), "n3": p3.Addr()}, servers, &h)
	rW, invW := rollbackInventory(t, cfgW, 300)
	rR, _ := startRouter(t, cfgR)
	invR, err := inventory.New(rR, inventory.Options{Logger: invDiscard})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	seqAt := func() int64 {
		v, err := srv[0].Client(t).HGet(ctx, node.StampKey, "seq").Int64()
		if err != nil {
			t.Fatalf("reading n1's write sequence: %v", err)
		}
		return v
	}
	// Every order's record and part on n1: ids minted with the item.
	reserve := func(inv *inventory.Inventory, n int) error {
		for i := 0; i < n; i++ {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			id, err := inv.NewOrderID(rctx, invItem("r", "rb", 1))
			if err == nil {
				_, err = inv.Reserve(rctx, id, []inventory.Item{invItem("r", "rb", 1)}, "", 0)
			}
			cancel()
			if err != nil {
				return err
			}
		}
		return nil
	}
	mustReserve := func(inv *inventory.Inventory, n int) {
		t.Helper()
		if err := reserve(inv, n); err != nil {
			t.Fatalf("Reserve: %v", err)
		}
	}
	mustReserve(invW, 3) // W's first write of the incarnation: held on a peer
	mustReserve(invR, 3)
	if err := srv[0].Client(t).Save(ctx).Err(); err != nil { // the snapshot n1 comes back from
		t.Fatal(err)
	}
	p2.close() // W is cut off from n1's peers, not from n1
	p3.close()
	mustReserve(invW, 12) // acknowledged to W, lost by n1's crash
	nW, _ := rW.Node("n1")
	acked := nW.MaxSeq()
	for _, peer := range srv[1:] {
		if m, err := node.ParseMark(peer.Client(t).HGet(ctx, node.WitnessKey, "n1").Val()); err == nil && m.Seq >= acked {
			t.Fatalf("peer %s holds n1's mark up to %d although W (which saw %d) is cut off from it", peer.Addr(), m.Seq, acked)
		}
	}
	srv[0].Kill()
	srv[0].Restart()
	after := seqAt()
	if after >= acked {
		t.Fatalf("n1's sequence %d after the restart, W saw %d acknowledged: the snapshot is not older", after, acked)
	}
	// R tries to write for 6 s: many holds and heartbeats.
	for deadline := time.Now().Add(6 * time.Second); time.Now().Before(deadline); {
		if err := reserve(invR, 1); err == nil {
			t.Errorf("R reserved on n1 after it lost writes acknowledged to W (W saw %d, it came back at %d)", acked, after)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if now := seqAt(); now != after {
		t.Errorf("n1's sequence went from %d to %d after the restart: written to although it lost W's writes up to %d", after, now, acked)
	}
	if err := nW.Probe(ctx); !errors.Is(err, node.ErrRolledBack) {
		t.Errorf("W's probe of n1: %v, want %v", err, node.ErrRolledBack)
	}
	// A fresh instance that reads no mark of W's is refused too, with the
	// reason W recorded, until an operator accepts n1's data.
	rF, _ := startRouter(t, cfgR)
	waitRefused(t, rF, "n1", node.ErrRolledBack)
	nF, _ := rF.Node("n1")
	t.Logf("n1 for a fresh instance: %v", nF.DownReason())
	if _, err := rR.AcceptNode(ctx, "n1"); err != nil {
		t.Fatalf("AcceptNode(n1): %v", err)
	}
	waitFor(t, 10*time.Second, "n1 UP for the fresh instance after the accept", func() bool { return nF.State() == node.StateUp })
}
