package inventory

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/router"
)

// An order is decided (confirmed or cancelled) while its part's counter on
// n2 is corrupt: the settle is refused, the reconciler sets the part
// aside. The order's record then lives out its retention (its key
// deleted, as its expiry does) before the counter is repaired: retried,
// the part meets the 'gone' verdict (its decision cannot be inferred) and
// is set aside again, its units reserved. SettleStuck is the operator's
// decision for it (stuck_settle.go).

// TestSettleStuckConfirmsAPartWhoseOrderRecordIsGone: confirm moves its
// units from reserved to confirmed and empties the stuck index; a second
// call is refused, naming the state the part settled to.
func TestSettleStuckConfirmsAPartWhoseOrderRecordIsGone(t *testing.T) {
	settleGoneStuck(t, Confirm, func(lv StockLevel) bool { return lv.Reserved == 0 && lv.Confirmed == 2 && lv.Available == 8 })
}

// TestSettleStuckCancelsAPartWhoseOrderRecordIsGone: cancel gives its
// units back to available.
func TestSettleStuckCancelsAPartWhoseOrderRecordIsGone(t *testing.T) {
	settleGoneStuck(t, Cancel, func(lv StockLevel) bool { return lv.Reserved == 0 && lv.Confirmed == 0 && lv.Available == 10 })
}

func settleGoneStuck(t *testing.T, action Action, want func(StockLevel) bool) {
	t.Parallel() // its own nodes; it mostly waits
	e := newShortRetentionEnv(t, 3*time.Second)
	if _, err := e.inv.LoadStock(e.ctx, "b", "t", 10, 0); err != nil {
		t.Fatal(err)
	}
	p := e.goneStuckPart("x", action)
	if lv, err := e.inv.GetStock(e.ctx, "b", "t"); err != nil || lv.Reserved != 2 {
		t.Fatalf("stock before the settle = %+v, %v; want the part's 2 units reserved", lv, err)
	}
	res, err := e.inv.SettleStuck(e.ctx, "n2", p.PartID, action)
	if err != nil || res != settleDone {
		t.Fatalf("SettleStuck(n2, %s, %s) = %q, %v; want done", p.PartID, action, res, err)
	}
	lv, err := e.inv.GetStock(e.ctx, "b", "t")
	if err != nil || !want(lv) {
		t.Errorf("stock after SettleStuck %s = %+v, %v", action, lv, err)
	}
	if k, err := e.inv.StuckCount(e.ctx, "n2"); err != nil || k != 0 {
		t.Errorf("stuck parts on n2 after SettleStuck = %d, %v; want 0", k, err)
	}
	settled := string(Confirm) + "ed"
	if action == Cancel {
		settled = string(Cancel) + "led"
	}
	if st := partFieldsOn(t, e.ctx, e.clients["n2"], p.PartID)["state"]; st != settled {
		t.Errorf("part %s after SettleStuck %s: state %q, want %q", p.PartID, action, st, settled)
	}
	// asked again (an answer lost), either way: refused, naming the state
	for _, again := range []Action{Confirm, Cancel} {
		before := e.snapshot()
		res, err = e.inv.SettleStuck(e.ctx, "n2", p.PartID, again)
		if !errors.Is(err, ErrPrecondition) || !strings.Contains(err.Error(), "not set aside") || !strings.Contains(err.Error(), settled) {
			t.Errorf("SettleStuck %s of the part settled = %q, %v; want ErrPrecondition, not set aside, naming %s", again, res, err, settled)
		}
		e.unchanged(before, "SettleStuck of a settled part")
	}
}

// TestSettleStuckRefusesWhatItDoesNotDecide: SettleStuck writes nothing
// for a bad action, an unknown node, an empty part id, a part pending
// (not set aside), a part set aside whose order's record exists (its
// decision is the record's), and a part set aside whose own record is
// gone; then it settles the part it is for.
func TestSettleStuckRefusesWhatItDoesNotDecide(t *testing.T) {
	t.Parallel() // its own nodes; it mostly waits
	e := newShortRetentionEnv(t, 3*time.Second)
	if _, err := e.inv.LoadStock(e.ctx, "b", "t", 10, 0); err != nil {
		t.Fatal(err)
	}
	p := e.goneStuckPart("x", Confirm)
	// y: reserved, its part pending on n2 (its record exists)
	y := e.awayOrder("y")
	if _, err := e.inv.Reserve(e.ctx, y, []Item{{Route: "b", SKU: "t", Quantity: 1}}, "", time.Second); err != nil {
		t.Fatal(err)
	}
	yp := e.dueOf("n2", y)
	refused := func(what, node, part string, action Action, is error, says ...string) {
		t.Helper()
		before := e.snapshot()
		res, err := e.inv.SettleStuck(e.ctx, node, part, action)
		if !errors.Is(err, is) {
			t.Errorf("SettleStuck of %s = %q, %v; want an error wrapping %v", what, res, err, is)
		}
		for _, s := range says {
			if err != nil && !strings.Contains(err.Error(), s) {
				t.Errorf("SettleStuck of %s: %v; want it to say %q", what, err, s)
			}
		}
		e.unchanged(before, "SettleStuck of "+what)
	}
	refused("a bad action", "n2", p.PartID, Action("abort"), ErrInvalid, `"abort"`)
	refused("an empty action", "n2", p.PartID, Action(""), ErrInvalid, "action")
	refused("an unknown node", "n9", p.PartID, Confirm, router.ErrUnknownNode, "n9")
	refused("an empty part id", "n2", "", Confirm, ErrInvalid, "part_id")
	refused("a part not set aside", "n2", yp.PartID, Cancel, ErrPrecondition, "not set aside", "pending")
	refused("a bad action for a part not set aside", "n2", yp.PartID, Action("settle"), ErrInvalid, `"settle"`)
	refused("a part never on the node", "n1", p.PartID, Cancel, ErrPrecondition, "not set aside", "missing")
	// y's part set aside: its order's record exists, its decision is the record's
	if _, err := e.inv.SetAside(e.ctx, yp, "a corrupt counter", time.Hour, time.Hour); err != nil {
		t.Fatal(err)
	}
	refused("a part whose order's record exists", "n2", yp.PartID, Cancel, ErrPrecondition,
		"exists", "shardis parts retry n2 '"+yp.PartID+"'")
	// a part set aside whose own record is gone: nothing tells what to settle
	c2 := e.clients["n2"]
	rec, err := c2.Dump(e.ctx, partKey(p.PartID)).Result()
	if err != nil {
		t.Fatal(err)
	}
	c2.Del(e.ctx, partKey(p.PartID))
	refused("a part whose record is gone", "n2", p.PartID, Confirm, ErrPrecondition, "record "+partKey(p.PartID)+" is gone")
	if err := c2.RestoreReplace(e.ctx, partKey(p.PartID), 0, rec).Err(); err != nil {
		t.Fatal(err)
	}
	// a part set aside whose record cannot be read: refused naming it
	c2.Set(e.ctx, partKey(p.PartID), strings.Repeat("\x1f", 40), 0)
	refused("a part whose record is unreadable", "n2", p.PartID, Confirm, ErrCorrupt, partKey(p.PartID), "cannot be read")
	if err := c2.RestoreReplace(e.ctx, partKey(p.PartID), 0, rec).Err(); err != nil {
		t.Fatal(err)
	}
	if res, err := e.inv.SettleStuck(e.ctx, "n2", p.PartID, Confirm); err != nil || res != settleDone {
		t.Fatalf("SettleStuck of the part whose order's record is gone = %q, %v; want done", res, err)
	}
	if k, err := e.inv.StuckCount(e.ctx, "n2"); err != nil || k != 1 {
		t.Errorf("stuck parts on n2 = %d, %v; want 1 (y's, left set aside)", k, err)
	}
}

// goneStuckPart reserves 2 units of b/t (on n2) for an order of prefix
// whose home is not n2, decides it by decide while n2's counter is
// corrupt, sets its part aside, lets its record go (deleted, as its
// retention's expiry does), repairs the counter and checks that the
// retried part meets the 'gone' verdict; it returns the part, set aside
// again.
func (e *stagedEnv) goneStuckPart(prefix string, decide Action) PendingPart {
	t := e.t
	t.Helper()
	x := e.awayOrder(prefix)
	if _, err := e.inv.Reserve(e.ctx, x, []Item{{Route: "b", SKU: "t", Quantity: 2}}, "", time.Second); err != nil {
		t.Fatal(err)
	}
	c2, ck := e.clients["n2"], StockKey("b", "t")
	good := c2.HGet(e.ctx, ck, "reserved").Val()
	c2.HSet(e.ctx, ck, "reserved", "two")
	var err error
	if decide == Confirm {
		_, err = e.inv.Confirm(e.ctx, x)
	} else {
		_, err = e.inv.Cancel(e.ctx, x)
	}
	if err != nil {
		t.Fatalf("%s %s: %v", decide, x, err)
	}
	p := e.dueOf("n2", x)
	if _, err := e.inv.ResolveExpired(e.ctx, p); !Unsettleable(err) {
		t.Fatalf("ResolveExpired of the part on the corrupt counter: %v; want an unsettleable error", err)
	}
	if _, err := e.inv.SetAside(e.ctx, p, "corrupt counter", time.Hour, time.Hour); err != nil {
		t.Fatal(err)
	}
	home, _ := e.inv.orderHome(e.inv.topo.cur.Load(), x)
	if n := e.clients[home.Name()].Del(e.ctx, orderKey(x)).Val(); n != 1 {
		t.Fatalf("order %s had no record on its home %s to let go", x, home.Name())
	}
	c2.HSet(e.ctx, ck, "reserved", good)
	if _, err := e.inv.RetryStuck(e.ctx, "n2", p.PartID); err != nil {
		t.Fatal(err)
	}
	p = e.dueOf("n2", x)
	if _, err := e.inv.ResolveExpired(e.ctx, p); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "cannot be inferred") ||
		!strings.Contains(err.Error(), "shardis parts settle n2 '"+p.PartID+"' confirm|cancel") {
		t.Fatalf("ResolveExpired of the part whose order record is gone: %v; want its decision cannot be inferred, and the command to settle it", err)
	}
	if _, err := e.inv.SetAside(e.ctx, p, "its order record is gone", time.Hour, time.Hour); err != nil {
		t.Fatal(err)
	}
	return p
}

// snapshot is every inv:* key of every node, serialized (DUMP).
func (e *stagedEnv) snapshot() map[string]string {
	e.t.Helper()
	out := map[string]string{}
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	for name, c := range e.clients {
		for _, k := range c.Keys(ctx, "inv:*").Val() {
			out[name+" "+k] = c.Dump(ctx, k).Val()
		}
	}
	return out
}

// unchanged fails the test when a key of before changed, went or came.
func (e *stagedEnv) unchanged(before map[string]string, what string) {
	e.t.Helper()
	after := e.snapshot()
	if maps.Equal(before, after) {
		return
	}
	for k, v := range after {
		if w, ok := before[k]; !ok || w != v {
			e.t.Errorf("%s wrote %s", what, k)
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			e.t.Errorf("%s deleted %s", what, k)
		}
	}
}
