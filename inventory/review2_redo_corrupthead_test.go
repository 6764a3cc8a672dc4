package inventory

import (
	"errors"
	"testing"
	"time"
)

// TestReview2CorruptHeadIsCorrupt: a queue whose head (its field of
// inv:redo:offsets) is not an integer is corrupt data, which the inventory
// reports as ErrCorrupt (nodeErr's contract; RedoHeads, ReadRedoBatch and
// AckRedoBatch do). ReadRedoLog read the head as 0 and returned an empty
// page for a queue that holds an entry (a consumer saw an empty queue and
// waited for ever), and AckRedoLog refused an acknowledgement of that
// entry as past a head of 0 ("last offset handed out 0": ErrInvalid, a
// wrong input rather than wrong data on the node).
func TestReview2CorruptHeadIsCorrupt(t *testing.T) {
	e := newStagedEnv(t)
	res, err := e.inv.Reserve(e.ctx, "corrupt-head-1", []Item{{Route: "a", SKU: "s", Quantity: 1}}, "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	r := res.Receipts[0]
	q := invQueue(t, r.RedoLog)
	page, err := e.inv.ReadRedoLog(e.ctx, r.Node, q, 0, 10)
	if err != nil || len(page) != 1 || page[0].Offset != r.Offset {
		t.Fatalf("ReadRedoLog before the corruption = %+v, %v; want the entry at %d", page, err, r.Offset)
	}
	if err := e.clients[r.Node].HSet(e.ctx, RedoOffsetsKey, r.RedoLog, "x1").Err(); err != nil {
		t.Fatal(err)
	}
	page, err = e.inv.ReadRedoLog(e.ctx, r.Node, q, 0, 10)
	if !errors.Is(err, ErrCorrupt) {
		t.Errorf("ReadRedoLog with head %q = %+v, %v; want ErrCorrupt, not an empty queue", "x1", page, err)
	}
	a, err := e.inv.AckRedoLog(e.ctx, r.Node, q, r.Offset)
	if !errors.Is(err, ErrCorrupt) {
		t.Errorf("AckRedoLog(%d) with head %q = %d, %v; want ErrCorrupt", r.Offset, "x1", a, err)
	}
	if _, err := e.inv.ReadRedoBatch(e.ctx, r.Node, "", []RedoCursor{{Queue: q}}, 10, 0); !errors.Is(err, ErrCorrupt) {
		t.Errorf("ReadRedoBatch with head %q: %v; want ErrCorrupt (as it was)", "x1", err)
	}
}
