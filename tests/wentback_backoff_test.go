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

// TestLossSeenByACutOffProcessStaysRefused with the default
// health settings (heartbeat 500ms, probe timeout 300ms, backoff
// [500ms, 1s, 1.5s], hold_back heartbeat + timeout = 800ms) instead of a
// 100ms backoff, and n1 down for a few seconds (a restart that loads its
// data, a host reboot) instead of an instant restart.
//
// The cut-off process W is the only one that knows what n1 lost; its
// marks cannot reach the peers, so only its probe during the hold can
// record the loss on n1 (node/wentback.go: "every process that uses the
// node probes it at least once per heartbeat, and the hold ... keeps every
// process off the node until then"). But a DOWN node is probed on the
// backoff list, not every heartbeat: after three failed probes W probes n1
// every 1.5s ± 10%, longer than the 800ms hold. Another instance that
// reaches n1 first (here one started cold just after n1 came back; a
// running one whose backoff happens to come first does the same) holds n1
// back 800ms, then uses it: its writes take n1's write sequence past what
// W saw acknowledged before W's next probe, and from then on nobody can
// tell W's acknowledged reservations are gone.
func TestLossSeenByAProcessOnItsBackoffStaysRefused(t *testing.T) {
	srv := redistest.StartN(t, 3, redistest.Options{})
	servers := map[string]config.Server{"inventory": server(config.OnNodeDownFail,
		map[string][]string{"r": {"n1"}, "s": {"n2", "n3"}})}
	cfgR := newConfig(t, nodeAddrs(srv), servers, nil) // the defaults
	p2, p3 := startLatencyProxy(t, srv[1].Addr(), 0), startLatencyProxy(t, srv[2].Addr(), 0)
	cfgW := newConfig(t, map[string]string{"n1": srv[0].Addr(), "n2": p2.Addr(), "n3": p3.Addr()}, servers, nil)
	if cfgW.HoldBackOrDefault() != 800*time.Millisecond || cfgW.Health.Backoff[len(cfgW.Health.Backoff)-1] != 1500*time.Millisecond {
		t.Fatalf("not the defaults: hold %v, backoff %v", cfgW.HoldBackOrDefault(), cfgW.Health.Backoff)
	}

	// W's router, telling when its probes of n1 fail.
	failed := make(chan time.Time, 64)
	ctx := context.Background()
	nctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	rW, err := router.New(nctx, cfgW, router.Options{KeepData: cfgW.KeepData(), Logger: testLogger(t),
		OnProbe: func(name string, _ time.Duration, err error) {
			if name == "n1" && err != nil {
				select {
				case failed <- time.Now():
				default:
				}
			}
		}})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rW.Close() })
	invW, err := inventory.New(rW, inventory.Options{Logger: invDiscard})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := invW.LoadStock(ctx, "r", "rb", 300, 0); err != nil {
		t.Fatal(err)
	}
	seqAt := func() int64 {
		v, err := srv[0].Client(t).HGet(ctx, node.StampKey, "seq").Int64()
		if err != nil {
			t.Fatalf("reading n1's write sequence: %v", err)
		}
		return v
	}
	reserve := func(inv *inventory.Inventory) error {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		id, err := inv.NewOrderID(rctx, invItem("r", "rb", 1))
		if err == nil {
			_, err = inv.Reserve(rctx, id, []inventory.Item{invItem("r", "rb", 1)}, "", 0)
		}
		return err
	}
	for i := 0; i < 3; i++ { // W's first write of the incarnation: held on a peer
		if err := reserve(invW); err != nil {
			t.Fatalf("Reserve: %v", err)
		}
	}
	if err := srv[0].Client(t).Save(ctx).Err(); err != nil { // the snapshot n1 comes back from
		t.Fatal(err)
	}
	p2.close() // W is cut off from n1's peers, not from n1
	p3.close()
	for i := 0; i < 2; i++ { // acknowledged to W, lost by n1's crash
		if err := reserve(invW); err != nil {
			t.Fatalf("Reserve: %v", err)
		}
	}
	nW, _ := rW.Node("n1")
	acked := nW.MaxSeq()

	srv[0].Kill()
	// n1 stays down until W has failed three probes of it: W now probes it
	// every 1.5s. It comes back right after W's third failed probe.
	for len(failed) > 0 {
		<-failed
	}
	for i := 0; i < 3; i++ {
		select {
		case <-failed:
		case <-time.After(10 * time.Second):
			t.Fatal("W did not probe n1")
		}
	}
	t0 := time.Now()
	srv[0].Restart()
	after := seqAt()
	if after >= acked {
		t.Fatalf("n1's sequence %d after the restart, W saw %d acknowledged: the snapshot is not older", after, acked)
	}
	t.Logf("n1 back %v after W's failed probe, at write %d; W saw %d", time.Since(t0), after, acked)

	// An instance started now (it reads the peers' marks: none of W's).
	rR, _ := startRouter(t, cfgR)
	invR, err := inventory.New(rR, inventory.Options{Logger: invDiscard})
	if err != nil {
		t.Fatal(err)
	}
	used := 0
	for deadline := time.Now().Add(4 * time.Second); time.Now().Before(deadline) && seqAt() < acked+2; {
		if err := reserve(invR); err == nil {
			if used == 0 {
				t.Logf("R's first reservation on n1 %v after W's failed probe", time.Since(t0))
			}
			used++
		} else {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if used > 0 {
		t.Errorf("R reserved %d times on n1 after it lost writes acknowledged to W (W saw %d, it came back at %d, now at %d)",
			used, acked, after, seqAt())
	}
	// W has probed n1 by now: it must refuse n1, and so must an instance
	// started afterwards.
	time.Sleep(2 * time.Second)
	if err := nW.Probe(ctx); !errors.Is(err, node.ErrRolledBack) {
		t.Errorf("W's probe of n1: %v, want %v: W's %d acknowledged reservations are gone and nobody can tell",
			err, node.ErrRolledBack, 2)
	}
	rF, _ := startRouter(t, cfgR)
	nF, _ := rF.Node("n1")
	time.Sleep(2 * time.Second)
	if nF.State() == node.StateUp {
		t.Errorf("a fresh instance uses n1 (write %d, W saw %d acknowledged before the crash): the loss is hidden", seqAt(), acked)
	}
}
