package inventory

import (
	"testing"
	"time"
)

// A Confirm answered by a record already confirmed (a retry) relies on it
// as a Cancel answered by a cancelled record does: a late stage of another
// attempt of the order, sent before that Confirm and landing within the
// retention of it, must meet the record (order.lua, relied_on). Before,
// the record kept its TTL from the decision, expired, and the late stage
// landed on the empty key: the order Confirm had answered confirmed was
// then cancelled by a Cancel (found by a review).
func TestConfirmAnsweredByAConfirmedRecordKeepsLateStageOut(t *testing.T) {
	t.Parallel() // it mostly waits a retention out
	c := newLateStageCase(t, 4)
	e, items, x := c.e, c.items, c.x
	if _, err := e.inv.Reserve(e.ctx, x, items, "", time.Second); err != nil {
		t.Fatal(err)
	}
	if out, err := e.inv.Confirm(e.ctx, x); err != nil || out.Status != StatusConfirmed {
		t.Fatalf("Confirm %s = %+v, %v", x, out, err)
	}
	c.waitTTLUnder(time.Second)
	r0 := e.startHeld(x, items, "", 2*time.Second)
	out, err := e.inv.Confirm(e.ctx, x)
	if err != nil || out.Status != StatusConfirmed {
		t.Fatalf("Confirm %s retried = %+v, %v; want confirmed", x, out, err)
	}
	confirmedAt := time.Now()
	t.Logf("record TTL after the retried Confirm: %v", c.ttl())
	lerr := c.landBefore(t, r0, confirmedAt)
	cout, cerr := e.inv.Cancel(e.ctx, x)
	t.Logf("R0 answered %v; Cancel answered %+v, %v; parts %v", lerr, cout, cerr, e.partsOf(x))
	if cerr == nil && cout.Status == StatusCancelled {
		t.Errorf("order %s: Confirm answered confirmed, then Cancel answered cancelled", x)
	}
	if ccerr := func() error { _, err := e.inv.Confirm(e.ctx, x); return err }(); ccerr != nil {
		t.Errorf("order %s: Confirm answered confirmed, a retry now answers %v", x, ccerr)
	}
}
