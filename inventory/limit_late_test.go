package inventory

import (
	"errors"
	"testing"
	"time"
)

// limitLoweredUnderLateStage: a late attempt R0 of order X (user u, 2 of
// b/t) holds its stock and its quota part on n2 (taken while the SKU's
// limit was `before`), its stage held back. The SKU is sold out (another
// order Y was refused short, marking the sold-out hint), then the limit is
// set to 1 (LoadStock qty 0). A retry R1 of X, which wants more than the
// limit, must not be refused for good by reads alone: the units the user
// holds may be R0's (soldout.go, shortSKU.refusal), so it is refused
// behind a fence, and R0's stage, landing after, rolls back. Before, R1
// answered limit exceeded with no fence and R0 then answered success:
// the order refused for good ended reserved by the units R0 held when R1
// answered (found by a review).
func limitLoweredUnderLateStage(t *testing.T, before int64) {
	e := newStagedEnv(t)
	if _, err := e.inv.LoadStock(e.ctx, "b", "t", 2, before); err != nil {
		t.Fatal(err)
	}
	items := []Item{{Route: "b", SKU: "t", Quantity: 2}}
	x := e.awayOrder("x")
	r0 := e.startHeld(x, items, "u", time.Minute)

	// Sold out: another user's order is refused short (marks the hint).
	if _, err := e.inv.Reserve(e.ctx, "y", []Item{{Route: "b", SKU: "t", Quantity: 1}}, "v", time.Minute); !errors.Is(err, ErrInsufficientStock) {
		t.Fatalf("Reserve y while X's late attempt holds all the stock = %v, want ErrInsufficientStock", err)
	}
	// The operator lowers (or sets) the per-user limit.
	if _, err := e.inv.LoadStock(e.ctx, "b", "t", 0, 1); err != nil {
		t.Fatal(err)
	}
	_, rerr := e.inv.Reserve(e.ctx, x, items, "u", time.Minute)
	t.Logf("retry of %s while R0 holds its stock and quota: %v", x, rerr)
	held := 0
	for _, st := range e.partsOf(x) {
		if st == "pending" {
			held++
		}
	}
	if held == 0 {
		t.Fatal("no part of the late attempt is pending when the retry answered")
	}

	lerr := r0.land()
	t.Logf("late attempt R0 answered: %v", lerr)
	_, cerr := e.inv.Confirm(e.ctx, x)
	refusedForGood := errors.Is(rerr, ErrLimitExceeded) || errors.Is(rerr, ErrInsufficientStock)
	if refusedForGood && (lerr == nil || cerr == nil) {
		t.Errorf("order %s was refused for good (%v) while R0 held what it wanted, then R0 answered %v and Confirm answered %v: the order ended reserved",
			x, rerr, lerr, cerr)
	}
}

// TestLimitSetUnderLateStage: the limit is set (0 → 1) while R0 is
// in flight.
func TestLimitSetUnderLateStage(t *testing.T) { limitLoweredUnderLateStage(t, 0) }

// TestLimitLoweredUnderLateStage: the limit is lowered (5 → 1).
func TestLimitLoweredUnderLateStage(t *testing.T) { limitLoweredUnderLateStage(t, 5) }

// TestLimitSetUnderLateStageNoUser: an order without a user, R0
// in flight (take landed on n2 while b/t had no limit, stage held back);
// then a limit is set. Stock is left, so the retry R1's take lands (a
// stock take without a user still takes) and its refusal is fenced by a
// failed record (it held before the fix too).
func TestLimitSetUnderLateStageNoUser(t *testing.T) { limitSetNoUser(t, 10, false) }

// TestLimitSetUnderLateStageNoUserSoldOut: as above, R0 holding all
// the stock, so R1's take on n2 takes nothing: its refusal keeps its
// record as a fence (needsUserMayBeOwn; before, it withdrew its stage).
func TestLimitSetUnderLateStageNoUserSoldOut(t *testing.T) { limitSetNoUser(t, 2, false) }

// TestLimitSetUnderLateStageNoUserHint: as SoldOut, with the sold-out
// hint marked by another order's refusal first, so R1 is refused by
// refuseShort's reads ("a per-user limit while the order has no user"),
// behind a fence while units are held that may be the order's own.
func TestLimitSetUnderLateStageNoUserHint(t *testing.T) { limitSetNoUser(t, 2, true) }

// limitSetNoUser: R0 of order X without a user takes loaded's units on
// n2 while b/t has no limit, its stage held back; a limit is set, and a
// retry R1 of X must not be refused for good while R0 may still succeed.
func limitSetNoUser(t *testing.T, loaded int64, hint bool) {
	e := newStagedEnv(t)
	if _, err := e.inv.LoadStock(e.ctx, "b", "t", loaded, 0); err != nil {
		t.Fatal(err)
	}
	items := []Item{{Route: "b", SKU: "t", Quantity: 2}}
	x := e.awayOrder("x")
	r0 := e.startHeld(x, items, "", time.Minute)
	if hint {
		if _, err := e.inv.Reserve(e.ctx, "y", []Item{{Route: "b", SKU: "t", Quantity: 1}}, "", time.Minute); !errors.Is(err, ErrInsufficientStock) {
			t.Fatalf("Reserve y while X's late attempt holds all the stock = %v, want ErrInsufficientStock", err)
		}
	}
	if _, err := e.inv.LoadStock(e.ctx, "b", "t", 0, 1); err != nil {
		t.Fatal(err)
	}
	_, rerr := e.inv.Reserve(e.ctx, x, items, "", time.Minute)
	t.Logf("retry of %s while R0 holds its stock: %v (staged_refused %d, refused_unwritten %d, refused_fenced %d)", x, rerr,
		e.inv.stats.stagedRefused.Load(), e.inv.stats.refusedUnwritten.Load(), e.inv.stats.refusedFenced.Load())
	pending := 0
	for _, st := range e.partsOf(x) {
		if st == "pending" {
			pending++
		}
	}
	if pending == 0 {
		t.Fatal("no part of the late attempt is pending when the retry answered")
	}
	lerr := r0.land()
	_, cerr := e.inv.Confirm(e.ctx, x)
	t.Logf("late attempt R0 answered %v; Confirm answered %v", lerr, cerr)
	if rerr != nil && !errors.Is(rerr, ErrUnavailable) && (lerr == nil || cerr == nil) {
		t.Errorf("order %s was refused for good (%v) while R0 held what it wanted, then R0 answered %v and Confirm %v: the order ended reserved",
			x, rerr, lerr, cerr)
	}
}
