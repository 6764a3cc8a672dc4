package rollback_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/rollback"
)

// TestTrimKeepsUpWithAcknowledged checks that the reconciler's trim keeps
// up with a queue that settles more than one call's batch (200) between
// trims when a consumer acknowledges everything (README: "Settled
// redo-log entries are trimmed once acknowledged"): one SKU (one queue)
// settles 250 parts per 30 passes (TrimEvery's default), all acknowledged,
// and after each 30 passes none is left. Found by a review: a trim was
// one TrimRedoLog call of 200 per queue, so 50 entries were left behind
// each cycle and the redo log grew without bound (50, 100, 150).
func TestTrimKeepsUpWithAcknowledged(t *testing.T) {
	const perCycle = 250
	left, trimmed := trimCycles(t, rollback.Settings{}, perCycle, 30, 3) // defaults: TrimEvery 30
	if left[2] != 0 {
		t.Errorf("%d settled parts per 30 passes, every entry acknowledged: entries left after each cycle %v (trimmed %d): the backlog grows by %d per cycle",
			perCycle, left, trimmed, left[1]-left[0])
	}
}

// TestTrimCatchesUpOnTheNextPass: a trim that stopped at its call bound
// (TrimCalls) with more acknowledged entries to remove trims again on the
// node's next pass instead of TrimEvery passes later. With one call of
// 200 per trim and 250 settled, acknowledged entries per 31 passes, none
// is left after each 31 passes; before, 50 more were left each time, so
// a queue settling faster than a trim's bound grew without end.
func TestTrimCatchesUpOnTheNextPass(t *testing.T) {
	// 31 passes a cycle: the trim of the 30th pass and the next
	left, _ := trimCycles(t, rollback.Settings{TrimCalls: 1}, 250, 31, 2)
	if left[0] != 0 || left[1] != 0 {
		t.Errorf("one call of 200 per trim, 250 settled and acknowledged per 31 passes: entries left after each 31 passes %v, want none", left)
	}
}

// trimCycles runs cycles of perCycle settled, acknowledged entries (one
// SKU: one queue on n1, settleAndAck) each followed by passes reconciler
// passes with set, and returns the entries left on n1 after each cycle
// and how many the reconciler trimmed.
func trimCycles(t *testing.T, set rollback.Settings, perCycle, passes, cycles int) (left []int64, trimmed int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	inv, _ := oneNodeInv(t, ctx)
	if _, err := inv.LoadStock(ctx, "r", "tee", 1000, 0); err != nil {
		t.Fatal(err)
	}
	set.Logger = slog.New(slog.DiscardHandler)
	rec := rollback.New(inv, nil, set)
	defer rec.Close()
	for c := range cycles {
		settleAndAck(t, ctx, inv, c, perCycle)
		for range passes {
			rec.RunOnce(ctx)
		}
		n, err := inv.RedoLogLen(ctx, "n1")
		if err != nil {
			t.Fatal(err)
		}
		left = append(left, n)
	}
	return left, rec.Stats().Trimmed
}

// settleAndAck reserves and cancels n 1-unit orders of r/tee (cycle c's
// ids), all in the SKU's one queue on n1, then acknowledges the queue up
// to its head, as a consumer that landed every entry.
func settleAndAck(t *testing.T, ctx context.Context, inv *inventory.Inventory, c, n int) {
	t.Helper()
	queue := -1
	for i := range n {
		id := fmt.Sprintf("o-%d-%d", c, i)
		res, err := inv.Reserve(ctx, id, []inventory.Item{{Route: "r", SKU: "tee", Quantity: 1}}, "", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fmt.Sscanf(res.Receipts[0].RedoLog, "inv:redo:%d", &queue); err != nil {
			t.Fatal(err)
		}
		if _, err := inv.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	page, err := inv.ReadRedoPageFrom(ctx, "n1", inventory.RedoCursor{Queue: queue}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inv.AckRedoLogAt(ctx, "n1", page.Incarnation, inventory.RedoCursor{Queue: queue, After: page.Head}); err != nil {
		t.Fatal(err)
	}
}
