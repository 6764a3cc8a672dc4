package inventory

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// lostStuckPart reserves qty units of a/s for order on n1 and builds the
// state TestTrimKeepsTheEntryOfAPartWhoseRecordIsLostWhileListed builds:
// the part's record lost (and its order's, which holds a one-node
// order's part inline) while pending, the part past its deadline set
// aside as the reconciler does, its redo entry and its units kept. It
// returns the part's id, its queue and offset, and the records' dumps.
func lostStuckPart(t *testing.T, e *stagedEnv, order string, qty int64) (string, int, int64, map[string]string) {
	t.Helper()
	cl := e.clients["n1"]
	res, err := e.inv.Reserve(e.ctx, order, []Item{{Route: "a", SKU: "s", Quantity: qty}}, "", stagedTTL)
	if err != nil {
		t.Fatal(err)
	}
	r := res.Receipts[0]
	q := invQueue(t, r.RedoLog)
	en, err := e.inv.ReadRedoLog(e.ctx, r.Node, q, r.Offset-1, 1)
	if err != nil || len(en) != 1 {
		t.Fatal(en, err)
	}
	id := en[0].PartID
	keys := []string{partKey(id), orderKey(order)}
	dumps := map[string]string{}
	for _, k := range keys {
		if d, err := cl.Dump(e.ctx, k).Result(); err == nil {
			dumps[k] = d
		}
	}
	cl.Del(e.ctx, keys...)
	waitDueListed(t, e.ctx, e.inv, "n1", id) // the deadline and the part's grace
	n1, _ := e.r.Node("n1")
	due, err := e.inv.DueParts(e.ctx, n1, 100)
	if err != nil || len(due) != 1 || due[0].PartID != id {
		t.Fatalf("due %+v, %v; want part %s, its record gone", due, err, id)
	}
	_, rerr := e.inv.ResolveExpired(e.ctx, due[0])
	if !Unsettleable(rerr) {
		t.Fatalf("ResolveExpired(%+v) = %v; want an Unsettleable error", due[0], rerr)
	}
	if _, err := e.inv.SetAside(e.ctx, due[0], rerr.Error(), time.Hour, time.Hour); err != nil {
		t.Fatal(err)
	}
	return id, q, r.Offset, dumps
}

// waitDueListed polls (every 20 ms, up to 15 s) until inv's DueParts of
// node lists part id: its deadline and the part's grace have passed by
// the node's clock. It replaces a fixed sleep of the deadline plus the
// grace plus a margin, which a busy machine could still outrun.
func waitDueListed(t *testing.T, ctx context.Context, inv *Inventory, node, id string) {
	t.Helper()
	n, err := inv.r.Node(node)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		due, err := inv.DueParts(ctx, n, 100)
		if err == nil && slices.ContainsFunc(due, func(p PendingPart) bool { return p.PartID == id }) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("part %s on %s not due within 15s: %+v, %v", id, node, due, err)
		}
	}
}

// A part set aside whose own record is gone (lost while pending) is
// settled by the operator's route, SKU and quantity: SettleStuck alone
// refuses it (nothing on the node names its order or units), SettleStuckLost
// moves the units from reserved to confirmed (confirm) or available
// (cancel), takes the part out of the stuck index and writes its record
// settled, so its redo entry reads as settled with that state (the
// queue's reads no longer stop at it) and the trim removes it once
// acknowledged. A second settle is refused, naming the state. Before,
// nothing but a hand-made record got the part out: its units reserved for
// good, the queue's consumer and trim stopped at it.
func TestSettleStuckLostSettlesAPartWhoseRecordIsGone(t *testing.T) {
	t.Parallel() // its cases have nodes of their own; they mostly wait a deadline out
	for _, tc := range []struct {
		action     Action
		state      string
		sold, back int64
	}{{Confirm, "confirmed", 2, 0}, {Cancel, "cancelled", 0, 2}} {
		t.Run(string(tc.action), func(t *testing.T) {
			t.Parallel() // it mostly waits a deadline out
			e := newStagedEnv(t)
			before, err := e.inv.GetStock(e.ctx, "a", "s")
			if err != nil {
				t.Fatal(err)
			}
			id, q, off, _ := lostStuckPart(t, e, "lost-"+string(tc.action), 2)
			if _, err := e.inv.SettleStuck(e.ctx, "n1", id, tc.action); !errors.Is(err, ErrPrecondition) || !strings.Contains(err.Error(), "is gone") {
				t.Fatalf("SettleStuck without the part's values = %v; want ErrPrecondition, its record gone", err)
			}
			res, err := e.inv.SettleStuckLost(e.ctx, "n1", id, tc.action, StuckUnits{Route: "a", SKU: "s", Quantity: 2})
			if err != nil || res != settleDone {
				t.Fatalf("SettleStuckLost(%s) = %q, %v; want done", tc.action, res, err)
			}
			lv, err := e.inv.GetStock(e.ctx, "a", "s")
			if err != nil || lv.Reserved != 0 || lv.Confirmed != before.Confirmed+tc.sold || lv.Available != before.Available-2+tc.back {
				t.Errorf("stock %+v, %v (before the reserve %+v); want the 2 units moved to %s", lv, err, before, tc.state)
			}
			if stuck, err := e.inv.StuckParts(e.ctx, "n1", 10); err != nil || len(stuck) != 0 {
				t.Errorf("stuck parts after the settle %+v, %v; want none", stuck, err)
			}
			en, err := e.inv.ReadRedoLog(e.ctx, "n1", q, off-1, 1)
			if err != nil || len(en) != 1 || en[0].PartID != id || en[0].State != tc.state || en[0].Quantity != 2 ||
				en[0].SKU != "s" || en[0].OrderID != "lost-"+string(tc.action) {
				t.Errorf("redo entry after the settle %+v, %v; want part %s %s, 2 of s, its order named", en, err, id, tc.state)
			}
			b, err := e.inv.ReadRedoBatch(e.ctx, "n1", "", []RedoCursor{{Queue: q, After: off - 1}}, 10, 0)
			if err != nil || len(b.Queues) != 1 || b.Queues[0].Problem != nil || len(b.Queues[0].Entries) != 1 {
				t.Errorf("ReadRedoBatch after the settle %+v, %v; want the entry, no problem", b, err)
			}
			if _, err := e.inv.AckRedoLog(e.ctx, "n1", q, off); err != nil {
				t.Fatal(err)
			}
			if n, err := e.inv.TrimRedoLog(e.ctx, "n1", 0, 100); err != nil || n != 1 {
				t.Errorf("trim of the acknowledged entry once settled: %d removed, %v; want 1", n, err)
			}
			snap := e.snapshot()
			res, err = e.inv.SettleStuckLost(e.ctx, "n1", id, tc.action, StuckUnits{Route: "a", SKU: "s", Quantity: 2})
			if !errors.Is(err, ErrPrecondition) || !strings.Contains(err.Error(), tc.state) {
				t.Errorf("second SettleStuckLost = %q, %v; want ErrPrecondition naming %s", res, err, tc.state)
			}
			e.unchanged(snap, "a second SettleStuckLost")
		})
	}
}

// SettleStuckLost writes nothing when the values are missing or out of
// range, the stock hash cannot give the units up, the part is not set
// aside, or its record exists (the record decides then, not the values).
func TestSettleStuckLostRefusesWhatItDoesNotSettle(t *testing.T) {
	t.Parallel()
	e := newStagedEnv(t)
	id, _, _, dumps := lostStuckPart(t, e, "lost-r", 2)
	// another order's part, pending
	other, err := e.inv.Reserve(e.ctx, "other", []Item{{Route: "a", SKU: "s", Quantity: 1}}, "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	e.awaitCommitted("other") // its commit lands off the caller's path: not between two snapshots
	en, err := e.inv.ReadRedoLog(e.ctx, "n1", invQueue(t, other.Receipts[0].RedoLog), other.Receipts[0].Offset-1, 1)
	if err != nil || len(en) != 1 {
		t.Fatal(en, err)
	}
	pending := en[0].PartID
	ok := StuckUnits{Route: "a", SKU: "s", Quantity: 2}
	with := func(f func(*StuckUnits)) StuckUnits { u := ok; f(&u); return u }
	if err := e.clients["n1"].HSet(e.ctx, stockKey("a", "bad"), "reserved", "x").Err(); err != nil {
		t.Fatal(err)
	}
	before := e.snapshot()
	for _, c := range []struct {
		what, part string
		action     Action
		u          StuckUnits
		is         error
		says       string
	}{
		{"an empty route", id, Confirm, with(func(u *StuckUnits) { u.Route = "" }), ErrInvalid, "route_key"},
		{"an unknown route", id, Confirm, with(func(u *StuckUnits) { u.Route = "zz" }), ErrInvalid, "route_key"},
		{"an empty SKU", id, Confirm, with(func(u *StuckUnits) { u.SKU = "" }), ErrInvalid, "sku_id"},
		{"quantity 0", id, Cancel, with(func(u *StuckUnits) { u.Quantity = 0 }), ErrInvalid, "quantity"},
		{"a quantity above the limit", id, Cancel, with(func(u *StuckUnits) { u.Quantity = MaxQuantity + 1 }), ErrInvalid, "quantity"},
		{"more units than reserved", id, Confirm, with(func(u *StuckUnits) { u.Quantity = 4 }), ErrInvalid, "quantity 4"},
		{"a SKU without stock", id, Cancel, with(func(u *StuckUnits) { u.SKU = "none" }), ErrStockMissing, "missing"},
		{"a corrupt stock hash", id, Cancel, with(func(u *StuckUnits) { u.SKU = "bad" }), ErrCorrupt, "reserved"},
		{"another action", id, Action("abort"), ok, ErrInvalid, "action"},
		{"an empty part id", "", Confirm, ok, ErrInvalid, "part_id"},
		{"a quota part's id", "lost-r|t|q|a|s", Cancel, ok, ErrInvalid, "part_id"},
		{"a part not set aside", pending, Cancel, ok, ErrPrecondition, "not set aside (its state: pending)"},
		{"a part never taken", "nope|t|0", Cancel, ok, ErrPrecondition, "not set aside (its state: gone)"},
	} {
		res, err := e.inv.SettleStuckLost(e.ctx, "n1", c.part, c.action, c.u)
		if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("SettleStuckLost with %s = %q, %v; want an error wrapping %v saying %q", c.what, res, err, c.is, c.says)
		}
		e.unchanged(before, "SettleStuckLost with "+c.what)
	}
	// the part's record repaired while it is set aside: the record decides
	for k, d := range dumps {
		if err := e.clients["n1"].Restore(e.ctx, k, 0, d).Err(); err != nil {
			t.Fatal(err)
		}
	}
	before = e.snapshot()
	if res, err := e.inv.SettleStuckLost(e.ctx, "n1", id, Confirm, ok); !errors.Is(err, ErrPrecondition) ||
		!strings.Contains(err.Error(), "exists (state pending)") {
		t.Errorf("SettleStuckLost of a part whose record exists = %q, %v; want ErrPrecondition, its record decides", res, err)
	}
	e.unchanged(before, "SettleStuckLost of a part whose record exists")
}

// awaitCommitted waits (up to 10 s) until order's record on its home is
// reserved: a one-round reservation's commit lands after Reserve returns
// (carried by a later group or sent by itself, carry.go), and would
// change the node between two snapshots (under load it did).
func (e *stagedEnv) awaitCommitted(order string) {
	e.t.Helper()
	home, _ := e.inv.orderHome(e.inv.topo.cur.Load(), order)
	for deadline := time.Now().Add(10 * time.Second); orderFieldsOn(e.t, e.ctx, e.clients[home.Name()], order)["status"] != "reserved"; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			e.t.Fatalf("the commit of %s did not land in 10s", order)
		}
	}
}
