package inventory

import (
	"testing"
)

// Acknowledgements belong to the incarnation they were given at. A node
// accepted with a copy of its data (a new incarnation) keeps the copy's
// acknowledgements, which say nothing of what a consumer landed of the new
// incarnation (pgsync lands it from a new position, and must meet the
// parts the node settled since, differently from their rows: its
// conflicts). So the trim keeps the entries until a consumer acknowledges
// them at the new incarnation, and the reads report them unacknowledged.
// Before, the copy's acknowledgements let the trim remove a part the node
// settled after the accept before any consumer read it: the conflict
// with its confirmed row was never reported (pgsync's
// TestRestoredNodeConflictsWithASettledRow, once a restarted node is held
// back long enough for the part to expire first).
func TestAcksOfAnEarlierIncarnationTrimNothing(t *testing.T) {
	e := newStagedEnv(t)
	one := []Item{{Route: "a", SKU: "s", Quantity: 1}}
	res, err := e.inv.Reserve(e.ctx, "acked-1", one, "", stagedTTL)
	if err != nil {
		t.Fatal(err)
	}
	r := res.Receipts[0]
	q := invQueue(t, r.RedoLog)
	if _, err := e.inv.Confirm(e.ctx, "acked-1"); err != nil {
		t.Fatal(err)
	}
	cl := e.clients[r.Node]
	inc0 := cl.HGet(e.ctx, stampKey, "incarnation").Val()
	if _, err := e.inv.AckRedoBatch(e.ctx, r.Node, inc0, []RedoCursor{{Queue: q, After: r.Offset}}); err != nil {
		t.Fatal(err)
	}
	// the node is accepted with this data (`shardis node accept`): a new
	// incarnation, the same acknowledgements. The accept, not a write of
	// the stamp, so this process and the peers witness the new incarnation:
	// a connection dialled after a bare write (a probe's, a grown pool's)
	// found the node gone back and marked it down (ci467).
	if _, err := e.r.AcceptNode(e.ctx, r.Node); err != nil {
		t.Fatal(err)
	}
	inc1 := cl.HGet(e.ctx, stampKey, "incarnation").Val()
	if inc1 == inc0 || inc1 == "" {
		t.Fatalf("incarnation after the accept = %q, want a new one (was %q)", inc1, inc0)
	}
	if n, err := e.inv.TrimRedoLog(e.ctx, r.Node, 0, 100); err != nil || n != 0 {
		t.Fatalf("TrimRedoLog after the accept = %d, %v; want 0: the acknowledgements are the earlier incarnation's", n, err)
	}
	if u, err := e.inv.RedoUnacked(e.ctx, r.Node); err != nil || u < r.Offset {
		t.Errorf("RedoUnacked after the accept = %d, %v; want at least %d", u, err, r.Offset)
	}
	b, err := e.inv.ReadRedoBatch(e.ctx, r.Node, "", []RedoCursor{{Queue: q}}, 10, 0)
	if err != nil || b.Queues[0].Acked != 0 || len(b.Queues[0].Entries) == 0 {
		t.Fatalf("ReadRedoBatch after the accept = %+v, %v; want the entry there, acknowledged 0", b, err)
	}
	// a consumer acknowledges it at the new incarnation: trimmed
	if _, err := e.inv.AckRedoBatch(e.ctx, r.Node, inc1, []RedoCursor{{Queue: q, After: r.Offset}}); err != nil {
		t.Fatal(err)
	}
	if n, err := e.inv.TrimRedoLog(e.ctx, r.Node, 0, 100); err != nil || n == 0 {
		t.Fatalf("TrimRedoLog after the new acknowledgement = %d, %v; want the entry trimmed", n, err)
	}
}
