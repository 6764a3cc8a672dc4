package tests

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardis/shardis/inventory"
)

// dropStagedCommit is a Faults that keeps the next staged commit (the
// order script's "commit" op, sent off the caller's path) from reaching
// its node, as if the process died right after Reserve answered.
type dropStagedCommit struct{ armed atomic.Bool }

func (d *dropStagedCommit) Call(_ context.Context, c inventory.ScriptCall, send func() (any, error)) (any, error) {
	if c.Script == "order" && len(c.Args) > 0 && c.Args[0] == "commit" && d.armed.CompareAndSwap(true, false) {
		return nil, inventory.ErrCrashed
	}
	return send()
}

func (d *dropStagedCommit) Crash(context.Context, string) bool { return false }

// A one-round reservation acknowledged to the caller whose commit never
// landed, and whose part on another node that node then lost (restarted
// from an older snapshot, the loss accepted by an operator): Confirm
// reports the lost part as data loss, never "not reserved" (safety issue
// A4). Before, a probe tombstoned the lost part and the order was
// recorded failed.
func TestInvStagedAcknowledgedPartLostIsDataLoss(t *testing.T) {
	t.Parallel()
	c := newInvCluster(t, invOpts{routes: map[string][]string{"a": {"n1"}, "b": {"n2"}}, lease: 300 * time.Millisecond, health: &quickHealth})
	ctx := invCtx(t, 30*time.Second)
	drop := &dropStagedCommit{}
	inv, err := inventory.New(c.r, inventory.Options{AttemptLease: c.lease, Logger: invDiscard, Faults: drop})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(inv.Close)
	c.load("a", "x", 10, 0)
	c.load("b", "x", 10, 0)
	if err := c.clients["n1"].Save(ctx).Err(); err != nil { // the snapshot n1 comes back from
		t.Fatal(err)
	}
	id := c.orderIDWith("loss", func(id string) bool { return c.home(id) != "n1" })
	drop.armed.Store(true)
	res, err := inv.Reserve(ctx, id, []inventory.Item{invItem("a", "x", 1), invItem("b", "x", 2)}, "", time.Minute)
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	if st := inv.Stats(); st.StagedReservations != 1 {
		t.Fatalf("the order did not take the one-round path: %+v", st)
	}
	inv.Close() // the dropped commit has run
	if drop.armed.Load() {
		t.Fatal("no staged commit was sent")
	}
	var lost string
	for _, r := range res.Receipts {
		if r.Node == "n1" {
			lost = r.Node
		}
	}
	if lost == "" {
		t.Fatalf("no receipt on n1: %+v", res.Receipts)
	}

	c.srv["n1"].Kill()
	c.srv["n1"].Restart() // without the acknowledged part
	c.acceptNode("n1")
	c.waitUsable("n1", 10*time.Second)

	for i := 0; i < 2; i++ {
		out, err := c.inv.Confirm(ctx, id)
		if !errors.Is(err, inventory.ErrDataLoss) || !strings.Contains(err.Error(), "n1/"+id+"|") {
			t.Fatalf("Confirm %d of an acknowledged order whose part n1 lost: %+v, %v; want ErrDataLoss naming n1's part", i+1, out, err)
		}
	}
	lvl, err := c.inv.GetStock(ctx, "b", "x")
	if err != nil {
		t.Fatal(err)
	}
	if lvl.Confirmed != 2 || lvl.Reserved != 0 || lvl.Available != 8 {
		t.Fatalf("route b after Confirm: %+v, want the surviving part confirmed (2)", lvl)
	}
}
