package inventory

import (
	"errors"
	"testing"
	"time"
)

// A Reserve retry answered ErrCancelled by the begin op (the order's
// record is a Cancel's tombstone) is a refusal for good behind that
// record, as a Cancel answered by it is (TestCancelAnsweredByATombstone
// KeepsLateStageOut): an attempt R0 of the order whose take landed and
// whose stage is late must meet the record when its stage lands within
// the retention of that answer. The begin op answers by the record with
// its old TTL (no relied_on): the record expires on the Cancel's clock,
// R0's stage lands on the empty key, R0 answers success and Confirm
// confirms the order Reserve had answered cancelled.
func TestReserveAnsweredCancelledKeepsLateStageOut(t *testing.T) {
	t.Parallel() // it mostly waits a retention out
	c := newLateStageCase(t, 4)
	e, items, x := c.e, c.items, c.x
	if out, err := e.inv.Cancel(e.ctx, x); err != nil || out.Status != StatusCancelled {
		t.Fatalf("Cancel %s with no record = %+v, %v; want cancelled (a tombstone)", x, out, err)
	}
	time.Sleep(lateRetention - time.Second) // the tombstone ages
	r0 := e.startHeld(x, items, "", 2*time.Second)
	if _, err := e.inv.Reserve(e.ctx, x, items, "", 2*time.Second); !errors.Is(err, ErrCancelled) {
		t.Fatalf("Reserve %s after its Cancel = %v, want ErrCancelled", x, err)
	}
	answeredAt := time.Now()
	t.Logf("Reserve refused with ErrCancelled; X's record has %v left", c.ttl())
	lerr := c.landBefore(t, r0, answeredAt)
	_, cerr := e.inv.Confirm(e.ctx, x)
	t.Logf("R0 answered %v; Confirm answered %v; parts %v", lerr, cerr, e.partsOf(x))
	if lerr == nil || cerr == nil {
		t.Errorf("order %s: Reserve answered ErrCancelled, then R0 answered %v and Confirm %v: the order refused as cancelled ended reserved", x, lerr, cerr)
	}
	for id, st := range e.partsOf(x) {
		if st == "confirmed" {
			t.Errorf("part %s of %s, refused as cancelled, ended confirmed", id, x)
		}
	}
}

// A Reserve retry answered by a confirmed record (the order's receipts:
// "a retry, even concurrent, of an order that succeeded returns the same
// receipts and takes nothing more") relies on that record as a Confirm
// answered by it does (TestConfirmAnsweredByAConfirmedRecordKeepsLateStage
// Out). The begin op answers by it with its old TTL: the record expires
// on the Confirm's clock, the late stage of a concurrent retry R0 lands
// on the empty key, R0 answers success with new receipts, and a Confirm
// retried confirms them: the order is confirmed twice (4 units for an
// order of 2).
func TestReserveAnsweredConfirmedKeepsLateStageOut(t *testing.T) {
	t.Parallel() // it mostly waits a retention out
	c := newLateStageCase(t, 6)
	e, items, x := c.e, c.items, c.x
	first, err := e.inv.Reserve(e.ctx, x, items, "", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := e.inv.Confirm(e.ctx, x); err != nil || out.Status != StatusConfirmed {
		t.Fatalf("Confirm %s = %+v, %v", x, out, err)
	}
	c.waitTTLUnder(time.Second)
	r0 := e.startHeld(x, items, "", 2*time.Second)
	again, err := e.inv.Reserve(e.ctx, x, items, "", time.Second)
	if err != nil || len(again.Receipts) != len(first.Receipts) {
		t.Fatalf("Reserve %s retried = %+v, %v; want its receipts", x, again, err)
	}
	answeredAt := time.Now()
	t.Logf("Reserve retry answered its receipts; X's record has %v left", c.ttl())
	lerr := c.landBefore(t, r0, answeredAt)
	_, cerr := e.inv.Confirm(e.ctx, x)
	parts := e.partsOf(x)
	lvl, err := e.inv.GetStock(e.ctx, "b", "t")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("R0 answered %v; Confirm answered %v; parts %v; b/t confirmed %d", lerr, cerr, parts, lvl.Confirmed)
	if lvl.Confirmed > 2 {
		t.Errorf("order %s of 2 units: %d units confirmed (parts now %v): a Reserve retry answered its receipts, then a concurrent retry took more and a Confirm confirmed them", x, lvl.Confirmed, parts)
	}
}
