package inventory

import (
	"errors"
	"testing"
	"time"
)

// A refusal behind a fence may rely on a failed record that was already
// there (soldout.go: "failed(any) ──fence──▶ unchanged: refuse (a failed
// record fences already)") to keep out the late stage of an attempt R0 of
// the same order whose take holds the units that made the order short.
// The fence op gives that record the retention again (order.lua,
// relied_on; staged.go's one assumption counts from the last read that
// relied on the record), so R0's stage, delayed by less than the
// retention after the refusal, meets it and rolls back. Before, the record
// expired on its old clock shortly after the refusal, R0's stage landed on
// the empty key and R0 answered success: the order refused for
// insufficient stock was reserved and confirmed by the very units whose
// hold refused it (found by a review).
func TestRefusalFenceOnOldFailedRecordKeepsLateStageOut(t *testing.T) {
	t.Parallel() // it mostly waits a retention out
	const loaded = 2
	c := newLateStageCase(t, loaded)
	e, items, x := c.e, c.items, c.x

	// An earlier attempt of X was refused (y1 held the stock): X has a
	// failed record, its retention counted from then.
	if _, err := e.inv.Reserve(e.ctx, "y1", items, "", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := e.inv.Reserve(e.ctx, x, items, "", 2*time.Second); !errors.Is(err, ErrInsufficientStock) {
		t.Fatalf("Reserve %s while y1 holds the stock = %v, want ErrInsufficientStock", x, err)
	}
	if _, err := e.inv.Cancel(e.ctx, "y1"); err != nil {
		t.Fatal(err)
	}
	e.verify(x, "failed")
	// The failed record ages (a retry of an order id long after its
	// earlier refusal: here most of the short retention).
	time.Sleep(lateRetention - time.Second)

	// R0, a new attempt of X: its take lands on n2 (all the stock), its
	// stage is held back (a paused home, a stall).
	r0 := e.startHeld(x, items, "", 2*time.Second)

	// Another order is refused meanwhile (a sold-out storm): the SKU's
	// hint is marked, so the retry of X reads first.
	if _, err := e.inv.Reserve(e.ctx, e.awayOrder("z"), items, "", time.Second); !errors.Is(err, ErrInsufficientStock) {
		t.Fatalf("Reserve z while R0 holds the stock = %v, want ErrInsufficientStock", err)
	}
	// R1, a retry of X: refused behind the failed record already there.
	if _, err := e.inv.Reserve(e.ctx, x, items, "", 2*time.Second); !errors.Is(err, ErrInsufficientStock) {
		t.Fatalf("retry of %s while R0 holds the stock = %v, want ErrInsufficientStock", x, err)
	}
	refusedAt := time.Now()
	t.Logf("R1 refused; X's failed record has %v left", c.ttl())
	held := map[string]bool{}
	for id, st := range e.partsOf(x) {
		if st == "pending" {
			held[id] = true
		}
	}
	if len(held) == 0 {
		t.Fatal("no part of R0 is pending when R1 was refused")
	}

	// R0's stage lands within the retention of the refusal's read (well
	// inside staged.go's one assumption).
	t.Logf("R0 answered %v", c.landBefore(t, r0, refusedAt))
	if _, err := e.inv.Confirm(e.ctx, x); err == nil {
		for _, p := range e.checkConfirmed("b", "t", loaded, x) {
			t.Error(p)
		}
	}
	for id, st := range e.partsOf(x) {
		if held[id] && st != "cancelled" {
			t.Errorf("part %s, held when a Reserve of %s was refused with insufficient stock, ended %s", id, x, st)
		}
	}
}

// Confirm is idempotent within the retention (its idempotency window). A
// decided record lives the retention from when its parts come due, and so
// does a settled part record (settle.lua), so a Confirm retried while the
// record lives finds its parts. Before, a part lived the retention from
// its settle, and a Confirm retried after that found the order confirmed,
// its parts "missing", and answered ErrDataLoss ("the node lost data"),
// logging DATA LOSS, though no node lost anything (found by a review).
func TestConfirmRetryAfterPartsExpireIsNoDataLoss(t *testing.T) {
	t.Parallel() // it mostly waits a retention out
	const retention = 3 * time.Second
	e := newShortRetentionEnv(t, retention)
	if _, err := e.inv.LoadStock(e.ctx, "b", "t", 2, 0); err != nil {
		t.Fatal(err)
	}
	items := []Item{{Route: "b", SKU: "t", Quantity: 2}}
	x := e.awayOrder("x")
	if _, err := e.inv.Reserve(e.ctx, x, items, "", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if out, err := e.inv.Confirm(e.ctx, x); err != nil || out.Status != StatusConfirmed || out.PendingParts != 0 {
		t.Fatalf("Confirm %s = %+v, %v", x, out, err)
	}
	confirmedAt := time.Now()
	time.Sleep(time.Until(confirmedAt.Add(retention + 300*time.Millisecond)))
	home, _ := e.inv.orderHome(e.inv.topo.cur.Load(), x)
	t.Logf("%s's record: TTL %v; its parts on n2: %v", x, e.clients[home.Name()].PTTL(e.ctx, orderKey(x)).Val(), e.partsOf(x))
	if out, err := e.inv.Confirm(e.ctx, x); err != nil {
		t.Errorf("Confirm %s retried within its record's life = %+v, %v; want confirmed, no error", x, out, err)
	}
}

// A Cancel answered by a record already cancelled (here the tombstone an
// earlier Cancel of the order wrote, near its expiry) is as final as one
// that wrote it: an attempt R0 of the order whose take landed and whose
// stage is late must meet that record when its stage lands within the
// retention of the Cancel, and roll back. The cancel op gives the record
// it answers by the retention again (order.lua, relied_on), as the fence
// and expire ops do.
func TestCancelAnsweredByATombstoneKeepsLateStageOut(t *testing.T) {
	t.Parallel() // it mostly waits a retention out
	c := newLateStageCase(t, 2)
	e, items, x := c.e, c.items, c.x
	if out, err := e.inv.Cancel(e.ctx, x); err != nil || out.Status != StatusCancelled {
		t.Fatalf("Cancel %s with no record = %+v, %v; want cancelled (a tombstone)", x, out, err)
	}
	time.Sleep(lateRetention - time.Second) // the tombstone ages
	r0 := e.startHeld(x, items, "", 2*time.Second)
	out, err := e.inv.Cancel(e.ctx, x)
	if err != nil || out.Status != StatusCancelled {
		t.Fatalf("Cancel %s again = %+v, %v; want cancelled", x, out, err)
	}
	lerr := c.landBefore(t, r0, time.Now())
	_, cerr := e.inv.Confirm(e.ctx, x)
	t.Logf("R0 answered %v; Confirm answered %v", lerr, cerr)
	if lerr == nil || cerr == nil {
		t.Errorf("order %s: a Cancel answered cancelled, then R0 answered %v and Confirm %v: the cancelled order ended reserved", x, lerr, cerr)
	}
	for id, st := range e.partsOf(x) {
		if st == "confirmed" {
			t.Errorf("part %s of %s, cancelled, ended confirmed", id, x)
		}
	}
}

// With a retention that is not whole seconds (3.5s), the scripts keep a
// settled part 3s past its due (seconds truncates): a Confirm retried
// after the parts' expiry, its record kept alive by the retries, finds
// the record and not its parts, and reports no data loss. It counted the
// full 3.5s and reported ErrDataLoss for parts that had expired as
// designed (found by a review).
func TestConfirmRetryAfterPartsExpireFractionalRetention(t *testing.T) {
	t.Parallel() // it mostly waits a retention out
	const retention = 3500 * time.Millisecond
	e := newShortRetentionEnv(t, retention)
	if _, err := e.inv.LoadStock(e.ctx, "b", "t", 2, 0); err != nil {
		t.Fatal(err)
	}
	x := e.awayOrder("x")
	res, err := e.inv.Reserve(e.ctx, x, []Item{{Route: "b", SKU: "t", Quantity: 2}}, "", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := e.inv.Confirm(e.ctx, x); err != nil || out.Status != StatusConfirmed {
		t.Fatalf("Confirm %s = %+v, %v", x, out, err)
	}
	// the parts are gone 1s (their grace) + 3s past the deadline; retry
	// until 300ms past that, each retry keeping the record
	gone := res.Deadline.Add(partGrace + 3*time.Second + 300*time.Millisecond)
	for time.Now().Before(gone) {
		time.Sleep(time.Second)
		if _, err := e.inv.Confirm(e.ctx, x); err != nil {
			t.Fatalf("Confirm %s retried: %v", x, err)
		}
	}
	if n := len(e.partsOf(x)); n != 0 {
		t.Fatalf("%d parts of %s left: the test did not reach their expiry", n, x)
	}
	if out, err := e.inv.Confirm(e.ctx, x); err != nil {
		t.Errorf("Confirm %s retried after its parts expired = %+v, %v; want confirmed, no data loss", x, out, err)
	}
}
