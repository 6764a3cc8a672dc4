package tests

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
)

// Two instances, W and R. W acknowledges writes on n1 past the snapshot
// n1 comes back from; its marks of them have not reached a peer yet
// (marks lag the writes by up to a heartbeat). R, which saw less,
// dials the restarted n1 (its dial check reads the peers' marks: none
// ahead of the stamp), and writes to the older data: the documented
// window of "up to about two heartbeats". But R's writes advance n1's
// write sequence past what W saw acknowledged: the node's sequence
// counts writes, it does not name them, so the loss of W's writes can no
// longer be seen by anyone. W's own checks (its next connection, its
// probe) find the stamp at or after its acknowledged sequence, and its
// marks, once written, are at or below the stamp: n1 is never refused,
// W's acknowledged reservations are gone and their units sold again.
func TestLostWritesMaskedByAnotherInstancesWrites(t *testing.T) {
	t.Parallel()
	// Heartbeats of 3 s: marks of the writes below lag them by up to
	// that, and no probe falls between the restart and R's writes.
	slow := config.Health{Heartbeat: 3 * time.Second, Timeout: time.Second, Backoff: []time.Duration{100 * time.Millisecond}}
	srv, cfg := rollbackEnv(t, &slow)
	rW, invW := rollbackInventory(t, cfg, 300)
	rR, _ := startRouter(t, cfg)
	invR, err := inventory.New(rR, inventory.Options{Logger: invDiscard})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	reserveSome(t, invW, "w0-", 3) // W's first write of the incarnation: held on a peer
	reserveSome(t, invR, "r0-", 3)
	direct := srv[0].Client(t)
	seqAt := func() int64 {
		v, err := srv[0].Client(t).HGet(ctx, node.StampKey, "seq").Int64()
		if err != nil {
			t.Fatalf("reading n1's write sequence: %v", err)
		}
		return v
	}
	if err := direct.Save(ctx).Err(); err != nil { // the snapshot n1 comes back from
		t.Fatal(err)
	}
	reserveSome(t, invW, "w1-", 12) // acknowledged to W, lost by n1's crash
	nW, _ := rW.Node("n1")
	acked := nW.MaxSeq()
	if m, err := node.ParseMark(srv[1].Client(t).HGet(ctx, node.WitnessKey, "n1").Val()); err == nil && m.Seq >= acked {
		t.Skipf("a peer already holds n1's mark up to %d (W saw %d): W's heartbeat fell in, nothing lags", m.Seq, acked)
	}
	srv[0].Kill()
	srv[0].Restart()
	after := seqAt()
	if after >= acked {
		t.Fatalf("n1's sequence %d after the restart, W saw %d acknowledged: the snapshot is not older", after, acked)
	}
	// R writes (its dial check finds no mark ahead of the stamp) until
	// n1's sequence reaches what W saw acknowledged, for 12 s at most
	// (longer than W's marks take to reach the peers).
	m := maskedLoss{cfg: cfg, invR: invR, invW: invW, rW: rW, nW: nW, seqAt: seqAt, acked: acked, after: after}
	m.rWrites(t, 12*time.Second)
	m.check(t)
}

// maskedLoss is what the masked-loss tests share once n1 came back
// older: W saw writes up to acked, n1 came back at after (seqAt reads its
// sequence), R is the other instance.
type maskedLoss struct {
	cfg          *config.Config
	invR, invW   *inventory.Inventory
	rW           *router.Router
	nW           *node.Node
	seqAt        func() int64
	acked, after int64
}

// rWrites has R write (its dial check finds no mark ahead of the stamp)
// until n1's sequence reaches what W saw acknowledged, for d at most
// (longer than W's marks take to reach the peers).
func (m maskedLoss) rWrites(t *testing.T, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(d)
	for i := 0; time.Now().Before(deadline) && m.seqAt() < m.acked; i++ {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := m.invR.Reserve(rctx, "r1-"+string(rune('a'+i%26))+string(rune('a'+i/26%26)), []inventory.Item{invItem("r", "rb", 1)}, "", 0)
		cancel()
		if err != nil {
			time.Sleep(100 * time.Millisecond)
		}
	}
	t.Logf("n1: W saw %d acknowledged, came back at %d, R brought it to %d", m.acked, m.after, m.seqAt())
}

// check has W write again (its connections redial and check the stamp)
// and probe n1, which must refuse it; then W closes, leaving its marks on
// the peers, the lost reservations are counted, and a fresh instance must
// not find n1 UP.
func (m maskedLoss) check(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < 6; i++ {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, _ = m.invW.Reserve(rctx, "w2-"+string(rune('a'+i)), []inventory.Item{invItem("r", "rb", 1)}, "", 0)
		cancel()
	}
	if err := m.nW.Probe(ctx); err != nil && !errors.Is(err, node.ErrRolledBack) {
		t.Logf("W's probe: %v", err)
	} else if err == nil {
		t.Errorf("W's probe of n1 passes: n1 lost writes W saw acknowledged (up to %d; it came back at %d) and W cannot tell", m.acked, m.after)
	}
	m.invW.Close()
	_ = m.rW.Close()
	lost := 0
	for i := 0; i < 12; i++ {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := m.invR.Confirm(cctx, "w1-"+string(rune('a'+i)))
		cancel()
		if errors.Is(err, inventory.ErrNotFound) || errors.Is(err, inventory.ErrDataLoss) {
			lost++
		}
		t.Logf("Confirm w1-%c (acknowledged to W): %v", 'a'+i, err)
	}
	t.Logf("%d of W's 12 acknowledged reservations lost with n1's writes", lost)
	r3, _ := startRouter(t, m.cfg)
	n3, _ := r3.Node("n1")
	time.Sleep(500 * time.Millisecond)
	if n3.State() == node.StateUp {
		t.Errorf("n1 is UP for a fresh instance: the writes it lost (acknowledged to W up to %d, came back at %d) are never detected", m.acked, m.after)
	}
}
