package rollback_test

import (
	"context"
	"testing"
	"time"

	"github.com/shardis/shardis/inventory"
)

// A reconciler paused between an expiry that met data to repair and its
// SetAside (past its lease) resumes after another instance set the part
// aside, an operator repaired the counter and retried it, and a pass
// settled it: the late SetAside moves nothing, the part is in no index
// and its units moved once.
func TestLateSetAsideAfterASettleMovesNothing(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	inv, srv := oneNodeInv(t, ctx)
	c := srv.Client(t)
	reserveDue(t, ctx, inv)
	key := "inv:stock:r:tee"
	orig := c.HGet(ctx, key, "reserved").Val()
	c.HSet(ctx, key, "reserved", "x")
	// A: lists the part, meets the corrupt counter, pauses
	n := inv.Nodes()[0]
	due, err := inv.DueParts(ctx, n, 10)
	if err != nil || len(due) != 1 {
		t.Fatalf("due %+v, %v", due, err)
	}
	_, rerr := inv.ResolveExpired(ctx, due[0])
	if !inventory.Unsettleable(rerr) {
		t.Fatalf("resolve: %v; want unsettleable", rerr)
	}
	// B: sets it aside; repaired, retried, settled
	b := quietReconciler(t, inv, time.Hour)
	b.RunOnce(ctx)
	if k, _ := inv.StuckCount(ctx, "n1"); k != 1 {
		t.Fatalf("stuck %d; want 1", k)
	}
	c.HSet(ctx, key, "reserved", orig)
	if ok, err := inv.RetryStuck(ctx, "n1", due[0].PartID); !ok || err != nil {
		t.Fatalf("retry %v %v", ok, err)
	}
	b.RunOnce(ctx)
	// A resumes
	tries, err := inv.SetAside(ctx, due[0], rerr.Error(), time.Millisecond, time.Millisecond)
	if err != nil || tries != 0 {
		t.Errorf("late SetAside: %d, %v; want 0 (nothing moved)", tries, err)
	}
	if k, _ := inv.StuckCount(ctx, "n1"); k != 0 {
		t.Errorf("stuck %d; want 0", k)
	}
	time.Sleep(5 * time.Millisecond)
	b.RunOnce(ctx)
	b.RunOnce(ctx)
	if lvl, err := inv.GetStock(ctx, "r", "tee"); err != nil || lvl.Reserved != 0 || lvl.Available != 10 {
		t.Errorf("stock %+v, %v; want 0 reserved, 10 available", lvl, err)
	}
	if k := c.ZCard(ctx, inventory.PendingKey).Val(); k != 0 {
		t.Errorf("pending index holds %d", k)
	}
}
