package inventory

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// A two-node order (2 units of a/s on n1, 1 of b/s on n2) whose part on
// n1 lost its record while pending (deleted, evicted, lost with the
// node's writes), its redo entry, its pending-index member "queue:offset"
// and its units kept, is cancelled. The cancel settles the part on n2 and
// leaves the one on n1 as it is: no tombstone (its node still lists it),
// answered "lost", counted among the parts not settled now; the 2 units
// stay reserved, the member stays, the redo entry is not read as
// cancelled. Once due it is set aside (a settle that knows only its id
// leaves it too, listed stuck), and the operator's SettleStuckLost gives
// the units back. A part the node does not list (by the member given,
// whose entry must name it, or by its id) still gets its tombstone.
// Before, settle.lua wrote the tombstone (cancelled, qty 0) for the
// missing record: the redo entry read cancelled with qty 0, the expiry
// read the tombstone as settled and dropped the member, and
// SettleStuckLost refused the part since a record existed: 2 units
// reserved for good, nothing reported.
func TestCancelWritesNoTombstoneForAPartItsNodeStillLists(t *testing.T) {
	t.Parallel() // it mostly waits a deadline out
	e := newStagedEnv(t)
	cl := e.clients["n1"]
	const order = "tomb-lost"
	res, err := e.inv.Reserve(e.ctx, order, []Item{{Route: "a", SKU: "s", Quantity: 2}, {Route: "b", SKU: "s", Quantity: 1}}, "", stagedTTL)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(res.Receipts, func(r Receipt) bool { return r.Node == "n1" })
	if i < 0 {
		t.Fatalf("receipts %+v; want one on n1", res.Receipts)
	}
	r := res.Receipts[i]
	// the one-round commit lands off the caller's path (carry.go); until it
	// does, the order's record names no part's place, only its id
	e.awaitCommitted(order)
	q := invQueue(t, r.RedoLog)
	en, err := e.inv.ReadRedoLog(e.ctx, "n1", q, r.Offset-1, 1)
	if err != nil || len(en) != 1 {
		t.Fatal(en, err)
	}
	id, m := en[0].PartID, fmt.Sprintf("%d:%d", q, r.Offset)
	if n, err := cl.Exists(e.ctx, partKey(id)).Result(); err != nil || n != 1 {
		t.Fatalf("part %s has no record of its own on n1 (%d, %v)", id, n, err)
	}
	cl.Del(e.ctx, partKey(id))
	reserved := func(route string, want int64, when string) {
		t.Helper()
		if lv, err := e.inv.GetStock(e.ctx, route, "s"); err != nil || lv.Reserved != want {
			t.Errorf("%s: %s/s %+v, %v; want reserved %d", when, route, lv, err, want)
		}
	}

	out, err := e.inv.Cancel(e.ctx, order)
	if err != nil || out.Status != StatusCancelled || out.PendingParts != 1 {
		t.Fatalf("Cancel = %+v, %v; want cancelled, 1 part not settled now", out, err)
	}
	if n, _ := cl.Exists(e.ctx, partKey(id)).Result(); n != 0 {
		t.Fatalf("Cancel wrote a record for the part whose record is lost: %v", partFieldsOn(t, e.ctx, cl, id))
	}
	if _, err := cl.ZScore(e.ctx, PendingKey, m).Result(); err != nil {
		t.Errorf("pending member %s after the cancel: %v; want it kept", m, err)
	}
	reserved("a", 2, "after the cancel")
	reserved("b", 0, "after the cancel")
	if en, err := e.inv.ReadRedoLog(e.ctx, "n1", q, r.Offset-1, 1); !errors.Is(err, ErrCorrupt) {
		t.Errorf("ReadRedoLog after the cancel = %+v, %v; want ErrCorrupt naming the part, not a settled entry", en, err)
	}
	// a part the node does not list gets its tombstone, even given a
	// member the index holds: the entry there names another part
	other := stockPartID(order, "never", 0)
	if got, err := e.inv.SettleNow(e.ctx, Settle{Node: "n1", Action: Cancel, OrderID: order, PartIDs: []string{other},
		Members: []string{m}}); err != nil || !slices.Equal(got, []string{"tombstoned"}) {
		t.Errorf("cancel of a part never taken, given %s = %v, %v; want tombstoned", m, got, err)
	}
	if f := partFieldsOn(t, e.ctx, cl, other); f["tombstone"] != "1" || f["state"] != "cancelled" {
		t.Errorf("record of the part never taken %v; want its tombstone", f)
	}

	waitDueListed(t, e.ctx, e.inv, "n1", id) // the deadline and the part's grace
	n1, _ := e.r.Node("n1")
	due, err := e.inv.DueParts(e.ctx, n1, 100)
	if err != nil || len(due) != 1 || due[0].PartID != id {
		t.Fatalf("due %+v, %v; want part %s listed, its record gone", due, err, id)
	}
	_, rerr := e.inv.ResolveExpired(e.ctx, due[0])
	if !Unsettleable(rerr) {
		t.Fatalf("ResolveExpired(%+v) = %v; want an Unsettleable error", due[0], rerr)
	}
	// as the reconciler does (rollback/pass.go)
	if _, err := e.inv.SetAside(e.ctx, due[0], rerr.Error(), time.Hour, time.Hour); err != nil {
		t.Fatal(err)
	}
	// listed stuck by its id: a cancel without its member leaves it too
	if got, err := e.inv.SettleNow(e.ctx, Settle{Node: "n1", Action: Cancel, OrderID: order, PartIDs: []string{id}}); err != nil ||
		!slices.Equal(got, []string{"lost"}) {
		t.Errorf("cancel of the part set aside = %v, %v; want lost", got, err)
	}
	if n, _ := cl.Exists(e.ctx, partKey(id)).Result(); n != 0 {
		t.Fatalf("a cancel wrote a record for the part set aside: %v", partFieldsOn(t, e.ctx, cl, id))
	}
	reserved("a", 2, "set aside")
	got, err := e.inv.SettleStuckLost(e.ctx, "n1", id, Cancel, StuckUnits{Route: "a", SKU: "s", Quantity: 2})
	if err != nil || got != settleDone {
		t.Fatalf("SettleStuckLost = %q, %v; want done", got, err)
	}
	reserved("a", 0, "after SettleStuckLost")
}
