package inventory

import (
	"errors"
	"testing"
)

// The report counts what the apply moved: a leaving node's sold-out stock
// hash (no unit available, some confirmed and loaded) is transferred and
// counted; it was transferred and left out of StockMoved, which counted
// only hashes with available units (found by a review).
func TestStockMovedCountsASoldOutHash(t *testing.T) {
	t.Parallel() // its own nodes
	e := newLeaveEnv(t, true)
	rep, err := e.apply(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !e.transferred("after apply") {
		t.Fatal("the leaving node's stock was not transferred")
	}
	if rep.StockMoved != 2 {
		t.Errorf("StockMoved = %d, want 2 (n3 held hashes z and sold, both transferred)", rep.StockMoved)
	}
}

// A rerun after a crash counts only what it moved itself: every order
// record had moved in the first run, and the rerun reported them moved
// again (found by a review).
func TestRerunDoesNotCountOrdersMovedBefore(t *testing.T) {
	e := newMigrateEnv(t)
	rep, err := e.applyWith(&topoFaults{point: "xfer-in", nth: 1})
	if !errors.Is(err, errCrashed) {
		t.Fatalf("apply with a crash at xfer-in: %v, want the crash", err)
	}
	if rep.OrdersMoved == 0 {
		t.Fatal("the first run moved no order: the test needs some")
	}
	rep2, err := e.apply()
	if err != nil {
		t.Fatal(err)
	}
	if rep2.OrdersMoved != 0 {
		t.Errorf("rerun reports OrdersMoved %d; every order had moved in the first run (%d)", rep2.OrdersMoved, rep.OrdersMoved)
	}
}
