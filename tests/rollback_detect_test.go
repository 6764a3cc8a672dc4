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
	"github.com/shardis/shardis/router"
)

// rollbackEnv is three RDB-only nodes (no AOF) under one inventory route,
// probed as h says.
func rollbackEnv(t *testing.T, h *config.Health) ([]*redistest.Server, *config.Config) {
	t.Helper()
	srv := redistest.StartN(t, 3, redistest.Options{})
	cfg := newConfig(t, nodeAddrs(srv),
		map[string]config.Server{"inventory": server(config.OnNodeDownFail, map[string][]string{"r": {"n1", "n2", "n3"}})},
		h)
	return srv, cfg
}

// rollbackInventory starts a router on cfg and an inventory on it, with
// stock units of r/rb loaded.
func rollbackInventory(t *testing.T, cfg *config.Config, stock int64) (*router.Router, *inventory.Inventory) {
	t.Helper()
	r, _ := startRouter(t, cfg)
	inv, err := inventory.New(r, inventory.Options{Logger: invDiscard})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inv.LoadStock(context.Background(), "r", "rb", stock, 0); err != nil {
		t.Fatal(err)
	}
	return r, inv
}

// reserveSome places n one-unit orders (writes on every node).
func reserveSome(t *testing.T, inv *inventory.Inventory, prefix string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := 0; i < n; i++ {
		if _, err := inv.Reserve(ctx, prefix+string(rune('a'+i)), []inventory.Item{invItem("r", "rb", 1)}, "", 0); err != nil {
			t.Fatalf("Reserve: %v", err)
		}
	}
}

// waitRefused waits until name is DOWN with a reason wrapping want.
func waitRefused(t *testing.T, r *router.Router, name string, want error) {
	t.Helper()
	n, _ := r.Node(name)
	waitFor(t, 10*time.Second, name+" refused with "+want.Error(), func() bool {
		return n.State() == node.StateDown && errors.Is(n.DownReason(), want)
	})
	// It stays refused: every probe checks again.
	time.Sleep(3 * quickHealth.Heartbeat)
	if n.State() != node.StateDown || !errors.Is(n.DownReason(), want) {
		t.Fatalf("%s: %v (%v) after more probes, want still refused with %v", name, n.State(), n.DownReason(), want)
	}
}

// A node restarted from an older RDB snapshot is refused (its write
// sequence is behind what its peers witnessed), also by an instance started
// afterwards, until accepted; accepting gives it a new incarnation (issue
// 9, item 2). Before, it came back UP as if nothing happened.
func TestNodeRestoredFromOlderSnapshotRefused(t *testing.T) {
	t.Parallel()
	srv, cfg := rollbackEnv(t, &quickHealth)
	r1, inv := rollbackInventory(t, cfg, 300)
	ctx := context.Background()
	reserveSome(t, inv, "before-", 6)
	if err := srv[0].Client(t).Save(ctx).Err(); err != nil { // the snapshot n1 will come back from
		t.Fatal(err)
	}
	reserveSome(t, inv, "after-", 12) // acknowledged, lost by n1's crash
	n1, _ := r1.Node("n1")
	before := n1.Incarnation()
	srv[0].Kill()
	srv[0].Restart() // loads the older dump.rdb
	waitRefused(t, r1, "n1", node.ErrRolledBack)

	// Every instance restarted: the witnesses are on n1's peers.
	r1.Close()
	r2, _ := startRouter(t, cfg)
	waitRefused(t, r2, "n1", node.ErrRolledBack)

	m, err := r2.AcceptNode(ctx, "n1")
	if err != nil {
		t.Fatalf("AcceptNode: %v", err)
	}
	n1b, _ := r2.Node("n1")
	waitFor(t, 10*time.Second, "n1 UP after accept", func() bool { return n1b.Usable() })
	if n1b.Incarnation() == before || m.Incarnation != n1b.Incarnation() || m.Gen < 1 {
		t.Errorf("after accept: incarnation %s (was %s), mark %+v; want a new incarnation at generation >= 1", n1b.Incarnation(), before, m)
	}
}

// A node wiped while every instance was down is not stamped as new: its
// peers witnessed it, so it is refused with ErrDataLost and keeps no stamp.
func TestWipedNodeRefusedAfterAllInstancesRestart(t *testing.T) {
	t.Parallel()
	srv, cfg := rollbackEnv(t, &quickHealth)
	r1, inv := rollbackInventory(t, cfg, 30)
	ctx := context.Background()
	reserveSome(t, inv, "w-", 3)
	peer := srv[1].Client(t)
	waitFor(t, 5*time.Second, "a peer holds n1's mark", func() bool {
		v, err := peer.HGet(ctx, node.WitnessKey, "n1").Result()
		return err == nil && v != ""
	})
	r1.Close()
	if err := srv[0].Client(t).FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	r2, _ := startRouter(t, cfg)
	waitRefused(t, r2, "n1", node.ErrDataLost)
	// The stamp may hold the loss a probe recorded (node/wentback.go), never a name.
	if name, _ := srv[0].Client(t).HGet(ctx, node.StampKey, "name").Result(); name != "" {
		t.Errorf("the wiped node was stamped anew (as %q) although its peers witnessed it", name)
	}
}

// Crash point of an accept: the node is stamped at a new generation but no
// peer was told (the accepting process died). A probe trusts the stamp,
// which is ahead of every witness: the node serves, and the next marks
// raise the peers to the new generation.
func TestAcceptCrashBeforePeersTold(t *testing.T) {
	t.Parallel()
	srv, cfg := rollbackEnv(t, &quickHealth)
	r1, inv := rollbackInventory(t, cfg, 30)
	ctx := context.Background()
	reserveSome(t, inv, "c-", 3)
	peer := srv[1].Client(t)
	waitFor(t, 5*time.Second, "a peer holds n1's mark", func() bool {
		v, _ := peer.HGet(ctx, node.WitnessKey, "n1").Result()
		return v != ""
	})
	r1.Close()
	srv[0].Client(t).FlushAll(ctx) // wiped while every instance is down
	r2, _ := startRouter(t, cfg)
	waitRefused(t, r2, "n1", node.ErrDataLost)

	// Step one of an accept only, as if the process died before telling peers.
	n1, _ := r2.Node("n1")
	seen, _ := node.ParseMark(peer.HGet(ctx, node.WitnessKey, "n1").Val())
	if _, err := n1.Accept(ctx, seen.Gen+1, ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "n1 UP with peers still at the old generation", func() bool { return n1.Usable() })
	// r2's witness writer raises the peers at its next heartbeat.
	waitFor(t, 5*time.Second, "peers raised to the new generation", func() bool {
		m, err := node.ParseMark(peer.HGet(ctx, node.WitnessKey, "n1").Val())
		return err == nil && m.Gen == seen.Gen+1
	})
}

// A node that restarts from an older snapshot while no command of this
// process is in flight is not noticed by a failed command: go-redis drops
// the dead idle connections and dials the restarted server. Until a
// heartbeat probe comes, the node still looks UP, and a write must not be
// served on its older data all the same: a command connection dialled to
// a node this process has seen reads the stamp, on that connection, before
// its first command (node/dialcheck.go). Probes and witness marks here
// are 30 s apart and no reconciler runs, so nothing of this process
// touches n1 between the kill and the restart, and only that read can
// stop the writes.
func TestIdleRestartFromOlderSnapshotServesNoWrite(t *testing.T) {
	t.Parallel()
	srv, cfg := rollbackEnv(t, &config.Health{Heartbeat: 30 * time.Second, Timeout: time.Second, Backoff: []time.Duration{100 * time.Millisecond}})
	r, inv := rollbackInventory(t, cfg, 300)
	ctx := context.Background()
	reserveSome(t, inv, "before-", 6)
	direct := srv[0].Client(t)
	if err := direct.Save(ctx).Err(); err != nil { // the snapshot n1 comes back from
		t.Fatal(err)
	}
	reserveSome(t, inv, "after-", 12)
	seqAt := func() int64 {
		v, err := srv[0].Client(t).HGet(ctx, node.StampKey, "seq").Int64()
		if err != nil {
			t.Fatalf("reading n1's write sequence: %v", err)
		}
		return v
	}
	before := seqAt()
	srv[0].Kill()
	srv[0].Restart()
	after := seqAt()
	if after >= before {
		t.Fatalf("n1's write sequence %d after the restart, %d before: the snapshot is not older", after, before)
	}
	n1, _ := r.Node("n1")
	if n1.State() != node.StateUp {
		t.Fatalf("n1 is %v before any command reached it; the test needs it still UP (no probe yet)", n1.State())
	}
	served := 0
	for i := 0; i < 12; i++ {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if _, err := inv.Reserve(rctx, "idle-"+string(rune('a'+i)), []inventory.Item{invItem("r", "rb", 1)}, "", 0); err == nil {
			served++
		}
		cancel()
	}
	if now := seqAt(); now != after {
		t.Fatalf("n1 applied %d writes on its older data (write sequence %d → %d) before it was refused; %d of 12 reserves acknowledged",
			now-after, after, now, served)
	}
	waitRefused(t, r, "n1", node.ErrRolledBack)
}

// Two instances: W acknowledged writes on n1 past the snapshot n1 comes
// back from, R only writes before it. R's own record of n1 is not behind
// the restored stamp, yet the node went back (W's writes are gone, and
// with them the stock they took): R must refuse it too, from the marks W
// left on n1's peers, before it applies a write to the older data, even
// when none of its probes fell in the restart.
func TestRolledBackNodeRefusedByInstanceThatSawLess(t *testing.T) {
	t.Parallel()
	srv, cfg := rollbackEnv(t, &quickHealth)
	rW, invW := rollbackInventory(t, cfg, 300)
	// R probes every 30 s: the restart falls between two of its probes,
	// so no failed probe makes it look at the peers' marks.
	cfgR := *cfg
	cfgR.Health = config.Health{Heartbeat: 30 * time.Second, Timeout: time.Second, Backoff: []time.Duration{100 * time.Millisecond}}
	rR, _ := startRouter(t, &cfgR)
	invR, err := inventory.New(rR, inventory.Options{Logger: invDiscard})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	reserveSome(t, invR, "r-", 6)
	if err := srv[0].Client(t).Save(ctx).Err(); err != nil { // the snapshot n1 comes back from
		t.Fatal(err)
	}
	reserveSome(t, invW, "w-", 12)
	nW, _ := rW.Node("n1")
	peer := srv[1].Client(t)
	waitFor(t, 5*time.Second, "a peer holds W's mark of n1", func() bool {
		m, err := node.ParseMark(peer.HGet(ctx, node.WitnessKey, "n1").Val())
		return err == nil && m.Seq >= nW.MaxSeq()
	})
	seqAt := func() int64 {
		v, _ := srv[0].Client(t).HGet(ctx, node.StampKey, "seq").Int64()
		return v
	}
	srv[0].Kill()
	srv[0].Restart()
	after := seqAt()
	waitRefused(t, rW, "n1", node.ErrRolledBack)

	for i := 0; i < 12; i++ {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, _ = invR.Reserve(rctx, "r-after-"+string(rune('a'+i)), []inventory.Item{invItem("r", "rb", 1)}, "", 0)
		cancel()
	}
	if now := seqAt(); now != after {
		t.Fatalf("R applied %d writes to n1's older data (write sequence %d → %d)", now-after, after, now)
	}
	waitRefused(t, rR, "n1", node.ErrRolledBack)
}

// A peer's mark ahead of an UP node's stamp (another instance saw writes
// the node no longer has, and marked them when it found the node gone
// back) makes this instance refuse the node within a few heartbeats,
// though none of its own commands or probes failed: the marks are read
// every heartbeat and every probe compares the stamp with them.
func TestPeerMarkAheadRefusesUpNode(t *testing.T) {
	t.Parallel()
	srv, cfg := rollbackEnv(t, &quickHealth)
	r, inv := rollbackInventory(t, cfg, 30)
	reserveSome(t, inv, "m-", 3)
	n1, _ := r.Node("n1")
	m, ok := n1.Mark()
	if !ok {
		t.Fatal("n1 has no mark after writes")
	}
	m.Seq += 1000 // what another instance would have seen acknowledged
	if err := srv[1].Client(t).HSet(context.Background(), node.WitnessKey, "n1", m.String()).Err(); err != nil {
		t.Fatal(err)
	}
	waitRefused(t, r, "n1", node.ErrRolledBack)
}

// An instance that closes leaves on the peers the marks of every write it
// saw acknowledged, not only those its last heartbeat wrote: a short-lived
// process (`shardis topology apply`) that wrote and exited within a
// heartbeat left its last writes unmarked, and a node that then lost them
// came back unrefused (the explorer's data-loss actor found a transfer
// lost so). The heartbeat here is an hour: only the first write of the
// incarnation (witnessed before it is acknowledged) and Close write marks.
func TestClosingInstanceLeavesItsMarks(t *testing.T) {
	t.Parallel()
	slow := config.Health{Heartbeat: time.Hour, Timeout: time.Second, Backoff: []time.Duration{100 * time.Millisecond}}
	srv, cfg := rollbackEnv(t, &slow)
	r1, inv := rollbackInventory(t, cfg, 300)
	ctx := context.Background()
	reserveSome(t, inv, "m-", 8)
	n1, _ := r1.Node("n1")
	seen := n1.MaxSeq()
	peer := srv[1].Client(t)
	if m, err := node.ParseMark(peer.HGet(ctx, node.WitnessKey, "n1").Val()); err == nil && m.Seq >= seen {
		t.Fatalf("a peer holds n1's mark up to write %d before Close, %d seen: the heartbeat wrote it, nothing to check", m.Seq, seen)
	}
	inv.Close()
	if err := r1.Close(); err != nil {
		t.Fatal(err)
	}
	for i, p := range []*redistest.Server{srv[1], srv[2]} {
		m, err := node.ParseMark(p.Client(t).HGet(ctx, node.WitnessKey, "n1").Val())
		if err != nil || m.Seq != seen {
			t.Errorf("peer n%d holds n1's mark %+v (%v) after Close, want write sequence %d", i+2, m, err, seen)
		}
	}
}
