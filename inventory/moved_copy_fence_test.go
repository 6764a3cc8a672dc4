package inventory

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/router"
)

// TestExpireMeetingAMovedCopyWithinTheRetentionFencesALateStage: the
// order's home x holds only a copy marked moved by an older apply (the
// order's first life moved to n4 and lived out its retention there, x's
// copy never given its TTL: a failed expireMoved, twice), and the order
// id is reserved again, one round: its take of 2 units lands on n2, its
// stage on x is held back (in flight). The part comes due within the
// retention, and the reconciler's expire op meets the moved copy on x,
// dead there, which it deletes: no record, so it must record the
// attempt's failure (staged.go: a part is cancelled only after a record
// that excludes its attempt was read, one a late stage meets) as it
// does where the order has no record at all. The part is cancelled and
// another order, y, reserves and confirms 2 of the 3 units. Then the
// stage lands on the empty key. Before, the expire op wrote nothing for
// a moved copy (answering "missing", which cancels as well): the stage
// staged the record, the attempt saw its take and its stage succeed,
// and Reserve answered success with a receipt for the part the
// reconciler had cancelled, its units confirmed to y (an acknowledged
// reservation lost, 4 units promised of 3). Now the stage meets the
// failed record of its own token, the attempt rolls back and takes the
// general path, and finds 1 unit left: ErrInsufficientStock.
func TestExpireMeetingAMovedCopyWithinTheRetentionFencesALateStage(t *testing.T) {
	t.Parallel() // it mostly waits a retention out
	e := newMovedCopyEnv(t, 6*time.Second, 2*time.Second)
	items := []Item{{Route: "s", SKU: "t", Quantity: 2}}
	e.onlyAMovedCopyAtHome(items)

	// the order id reserved again: the take lands, the stage is held back
	l := newLateStage(e.order)
	late := e.open(e.old, l)
	done := make(chan error, 1)
	go func() {
		_, err := late.Reserve(e.ctx, e.order, items, "", time.Second)
		done <- err
	}()
	select {
	case <-l.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the attempt's stage was not held within 10s")
	}
	select {
	case <-l.taken:
	case <-time.After(10 * time.Second):
		t.Fatal("the attempt's take did not return within 10s")
	}

	// the reconciler, within the retention of the part's deadline
	inv := e.open(e.old, nil)
	p := e.duePart(inv, e.order)
	if res, err := inv.ResolveExpired(e.ctx, p); err != nil || res != Cancelled {
		t.Fatalf("ResolveExpired of the attempt's part, its stage not landed = %v, %v; want cancelled", res, err)
	}
	if f := orderFieldsOn(t, e.ctx, e.clients[e.x], e.order); f["status"] != "failed" || f["token"] != p.Token {
		t.Errorf("%s's record on %s after the expiry: %v; want failed under the part's token %s", e.order, e.x, f, p.Token)
	}
	if _, err := inv.Reserve(e.ctx, "y", items, "", time.Minute); err != nil {
		t.Fatalf("Reserve y of the units given back: %v", err)
	}
	if out, err := inv.Confirm(e.ctx, "y"); err != nil || out.Status != StatusConfirmed {
		t.Fatalf("Confirm y = %+v, %v; want confirmed", out, err)
	}

	// the stage lands
	close(l.release)
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the attempt did not answer within 10s of its stage landing")
	}
	late.Close() // its background commit, if any, has landed
	if err == nil {
		out, cerr := inv.Confirm(e.ctx, e.order)
		t.Fatalf("Reserve %s answered success after the reconciler cancelled its part and y confirmed the units: Confirm = %+v, %v; stock on n2 %v",
			e.order, out, cerr, e.stockOn())
	}
	if !errors.Is(err, ErrInsufficientStock) {
		t.Errorf("Reserve %s = %v; want ErrInsufficientStock (y holds 2 of the 3 units)", e.order, err)
	}
	if s := e.stockOn(); s["confirmed"] != "2" || s["reserved"] != "0" || s["available"] != "1" {
		t.Errorf("stock on n2 = %v; want y's 2 units confirmed, 1 available", s)
	}
}

// onlyAMovedCopyAtHome loads the stock and runs the order's first life
// until its home x holds only a copy marked moved by an older apply:
// reserved on x (items, for the longest hold up to 4 s: see reserve),
// its home moved to n4 with x's
// expireMoved failing (the copy keeps no TTL), cancelled on n4 and gone
// from there after the retention, then its home moved back to x, x's
// copy left without a TTL again (expireFrozen failing too).
func (e *movedCopyEnv) onlyAMovedCopyAtHome(items []Item) {
	t := e.t
	t.Helper()
	first := e.open(e.old, nil)
	if _, err := first.LoadStock(e.ctx, "s", "t", movedCopyLoaded, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Reserve(e.ctx, e.order, items, "", min(e.hold, 4*time.Second)); err != nil {
		t.Fatal(err)
	}
	xSlow := e.xMovedExpireLost()
	e.apply(e.new, nil, xSlow)
	// the order's first life ends on n4: cancelled, its record gone after
	// the retention
	if out, err := e.open(e.new, nil).Cancel(e.ctx, e.order); err != nil || out.Status != StatusCancelled {
		t.Fatalf("Cancel %s = %+v, %v; want cancelled", e.order, out, err)
	}
	e.homeBackOnceN4Forgets(xSlow)
}

// TestReleaseMeetingAMovedCopyFencesALateStage: the order's home x holds
// only a copy marked moved by an older apply (as above), and the order id
// is reserved again, one round, by an attempt whose caller stopped
// waiting while its stage was under way (failBeforeStage: its takes
// never left, its stage is answered at once with an unknown outcome and
// lands only after the attempt's release). The release meets the moved
// copy, dead there, which it deletes: no record, so it must record the
// attempt's failure under its token, as where the order has no record at
// all, for the late stage to meet. Before, the release wrote nothing for
// a moved copy (it answered "missing"): the stage staged the record on
// the empty key, and a retry of the order id waited out the whole
// attempt lease (30 s here), or the record's deadline (10 s), before it
// could decide it, as
// TestStageLandingAfterItsFailLeavesNoLease found for a fail.
func TestReleaseMeetingAMovedCopyFencesALateStage(t *testing.T) {
	t.Parallel() // it mostly waits a retention out
	// holds of up to 12 s: the late stage's record, left staging, is
	// decided by its deadline (a prevent) no sooner than the lease
	e := newMovedCopyEnv(t, 15*time.Second, 12*time.Second)
	items := []Item{{Route: "s", SKU: "t", Quantity: 2}}
	e.onlyAMovedCopyAtHome(items)

	f := &failBeforeStage{order: e.order, failRan: make(chan struct{}), landed: make(chan any, 1)}
	const lease = 30 * time.Second // far longer than the retry may take
	inv := e.openLeased(e.old, f, lease)
	if _, err := inv.Reserve(e.ctx, e.order, items, "", 10*time.Second); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Reserve with its stage's outcome unknown = %v, want ErrUnavailable", err)
	}
	var got any
	select {
	case got = <-f.landed:
	case <-time.After(10 * time.Second):
		t.Fatal("the attempt's release did not run within 10s")
	}
	t.Logf("the late stage answered %v", got)
	if rec := orderFieldsOn(t, e.ctx, e.clients[e.x], e.order); rec["status"] != "failed" {
		t.Errorf("%s's record on %s once the late stage landed: %v; want the attempt's failure", e.order, e.x, rec)
	}

	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	res, err := inv.Reserve(ctx, e.order, items, "", 10*time.Second)
	if err != nil {
		t.Fatalf("retry of the order id after %v: %v", time.Since(start).Round(time.Millisecond), err)
	}
	t.Logf("retry answered after %v: %+v", time.Since(start).Round(time.Millisecond), res)
	if len(res.Receipts) != 1 {
		t.Errorf("retry's receipts %+v, want 1", res.Receipts)
	}
	if s := e.stockOn(); s["reserved"] != "2" || s["available"] != "1" {
		t.Errorf("stock on n2 = %v; want the retry's 2 units reserved, 1 available", s)
	}
}

// openLeased is open with an attempt lease of lease.
func (e *movedCopyEnv) openLeased(cfg *config.Config, f Faults, lease time.Duration) *Inventory {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := router.New(ctx, cfg, router.Options{KeepData: cfg.KeepData(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = r.Close() })
	inv, err := New(r, Options{Logger: slog.New(slog.DiscardHandler), Faults: f, AttemptLease: lease})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(inv.Close)
	return inv
}
