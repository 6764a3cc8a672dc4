package inventory

import (
	"testing"
	"time"
)

// A position at a part settled by SettleStuckLost (its record lost while
// pending, set aside, then settled by the operator's values), whose entry
// the max age trimmed before the consumer's acknowledgement reached the
// node (a sync killed between its commit and its acknowledgement, an
// acknowledgement cut and retried): the node took that part, so the
// queue still holds it there. ReadRedoBatch and ReadRedoPageFrom go on
// from it, AckRedoLogAt and AckRedoBatch take it. The record
// SettleStuckLost writes names no place (the operator's values hold no
// queue or offset) and no take time (the max age trims it at once,
// however young); before, the position read as gone back: the sync paused
// the queue as REDO LOG WENT BACK until the node was accepted, though it
// never went back.
func TestPositionAtAPartSettledLostHoldsOnceTrimmed(t *testing.T) {
	t.Parallel() // its own nodes; it mostly waits a deadline out
	e := newStagedEnv(t)
	id, q, off, _ := lostStuckPart(t, e, "lost-pos", 2)
	if res, err := e.inv.SettleStuckLost(e.ctx, "n1", id, Confirm, StuckUnits{Route: "a", SKU: "s", Quantity: 2}); err != nil || res != settleDone {
		t.Fatalf("SettleStuckLost = %q, %v; want done", res, err)
	}
	p, err := e.inv.ReadRedoPageFrom(e.ctx, "n1", RedoCursor{Queue: q, After: off - 1}, 10)
	if err != nil || len(p.Entries) != 1 || p.Entries[0].PartID != id || p.Entries[0].State != "confirmed" {
		t.Fatalf("ReadRedoPageFrom = %+v, %v; want part %s confirmed", p, err, id)
	}
	// landed, not acknowledged yet: the max age (an hour) trims it
	if n, err := e.inv.TrimRedoLog(e.ctx, "n1", time.Hour, 100); err != nil || n != 1 {
		t.Fatalf("TrimRedoLog by the max age = %d, %v; want the settled entry removed", n, err)
	}
	pos := RedoCursor{Queue: q, After: off, PartID: id}
	b, err := e.inv.ReadRedoBatch(e.ctx, "n1", p.Incarnation, []RedoCursor{pos}, 10, 0)
	if err != nil || len(b.Queues) != 1 || b.Queues[0].Rewound {
		t.Errorf("ReadRedoBatch from the position = %+v, %v; want it held (not rewound)", b, err)
	}
	if pg, err := e.inv.ReadRedoPageFrom(e.ctx, "n1", pos, 10); err != nil || pg.Rewound {
		t.Errorf("ReadRedoPageFrom the position = %+v, %v; want it held (not rewound)", pg, err)
	}
	if a, err := e.inv.AckRedoLogAt(e.ctx, "n1", p.Incarnation, pos); err != nil || a != off {
		t.Errorf("AckRedoLogAt the position = %d, %v; want %d acknowledged", a, err, off)
	}
	if a, err := e.inv.AckRedoBatch(e.ctx, "n1", p.Incarnation, []RedoCursor{pos}); err != nil || len(a) != 1 || a[0] != off {
		t.Errorf("AckRedoBatch the position = %v, %v; want [%d]", a, err, off)
	}
}
