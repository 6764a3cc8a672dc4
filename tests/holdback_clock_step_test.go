package tests

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
)

// TestHoldBackSurvivesAClockStep is TestLostWritesMaskedByAnotherInstancesWrites
// with n1's clock stepped 5 s forward (NTP, after a reboot) right after the
// first read of its stamp on the new server process: the hold-back
// (health.hold_back, node/identity.go "A new server process") is counted
// by the node's clock from that read (run_at), so the step must not end
// it before every instance had a heartbeat to mark what it saw. Every
// instance that used n1 before holds it back by its own clock too
// (node/identity.go, "The hold by this process's clock"). Before, the step
// ended the hold at once, R wrote to the older data, and the loss of 12
// reservations acknowledged to W was never detected (found by a review).
func TestHoldBackSurvivesAClockStep(t *testing.T) {
	t.Parallel()
	slow := config.Health{Heartbeat: 3 * time.Second, Timeout: time.Second, Backoff: []time.Duration{100 * time.Millisecond}}
	skew := filepath.Join(t.TempDir(), "n1.skew")
	redistest.SetSkew(t, skew, 0)
	srv := []*redistest.Server{redistest.Start(t, redistest.Options{Env: redistest.SkewClock(t, skew)}),
		redistest.Start(t, redistest.Options{}), redistest.Start(t, redistest.Options{})}
	cfg := newConfig(t, nodeAddrs(srv),
		map[string]config.Server{"inventory": server(config.OnNodeDownFail, map[string][]string{"r": {"n1", "n2", "n3"}})},
		&slow)
	rW, invW := rollbackInventory(t, cfg, 300)
	rR, _ := startRouter(t, cfg)
	invR, err := inventory.New(rR, inventory.Options{Logger: invDiscard})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	reserveSome(t, invW, "w0-", 3)
	reserveSome(t, invR, "r0-", 3)
	direct := srv[0].Client(t)
	seqAt := func() int64 {
		v, err := srv[0].Client(t).HGet(ctx, node.StampKey, "seq").Int64()
		if err != nil {
			t.Fatalf("reading n1's write sequence: %v", err)
		}
		return v
	}
	if err := direct.Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	reserveSome(t, invW, "w1-", 12) // acknowledged to W, lost by n1's crash
	nW, _ := rW.Node("n1")
	acked := nW.MaxSeq()
	if m, err := node.ParseMark(srv[1].Client(t).HGet(ctx, node.WitnessKey, "n1").Val()); err == nil && m.Seq >= acked {
		t.Skipf("a peer already holds n1's mark up to %d (W saw %d): W's heartbeat fell in, nothing lags", m.Seq, acked)
	}
	oldRun := direct.HGet(ctx, node.StampKey, "run").Val()
	srv[0].Kill()
	srv[0].Restart()
	after := seqAt()
	if after >= acked {
		t.Fatalf("n1's sequence %d after the restart, W saw %d acknowledged: the snapshot is not older", after, acked)
	}
	// R's probe reads the stamp on the new process first (the hold
	// starts: run_at), then n1's clock is stepped 5 s forward.
	nR, _ := rR.Node("n1")
	for end := time.Now().Add(5 * time.Second); direct.HGet(ctx, node.StampKey, "run").Val() == oldRun; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("n1's stamp was not read on its new process within 5s")
		}
		t.Logf("R's probe after the restart: %v", nR.Probe(ctx))
	}
	redistest.SetSkew(t, skew, 5000) // past the hold (heartbeat + timeout: 4 s)
	m := maskedLoss{cfg: cfg, invR: invR, invW: invW, rW: rW, nW: nW, seqAt: seqAt, acked: acked, after: after}
	m.rWrites(t, 12*time.Second)
	m.check(t)
}
