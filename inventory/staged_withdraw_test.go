package inventory

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestStagedWithdrawCrashPoint: a one-round attempt whose round took
// nothing (its home node holds no item, the other nodes' stock is sold:
// their takes answer none) dies before it withdraws its staging record. The record stays staging; a
// retry of the order id decides it (after the lease) and is refused for
// insufficient stock; no unit is reserved, nothing is left pending, and
// the stock adds up on every route.
func TestStagedWithdrawCrashPoint(t *testing.T) {
	e := newStagedEnv(t)
	id := ""
	for i := 0; id == ""; i++ {
		c := fmt.Sprintf("withdraw-%d", i)
		home, err := e.inv.homeFor(e.ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		if home.Name() == "n1" { // routes b and c live on n2 and n3
			id = c
		}
	}
	hog := []Item{{Route: "b", SKU: "s", Quantity: stagedStock}, {Route: "c", SKU: "s", Quantity: stagedStock}}
	if _, err := e.inv.Reserve(e.ctx, "hog", hog, "", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := e.inv.Confirm(e.ctx, "hog"); err != nil {
		t.Fatal(err)
	}
	items := []Item{{Route: "b", SKU: "s", Quantity: 1}, {Route: "c", SKU: "s", Quantity: 1}}
	point := "staged:before-withdraw"
	e.faults.point.Store(&point)
	_, err := e.inv.Reserve(e.ctx, id, items, "", stagedTTL)
	e.faults.point.Store(nil)
	if !errors.Is(err, ErrCrashed) {
		t.Fatalf("Reserve stopped before the withdraw: %v, want ErrCrashed (did it take the one-round path? stats %+v)", err, e.inv.Stats())
	}
	if st := orderFieldsOn(t, e.ctx, e.clients["n1"], id)["status"]; st != string(OrderStaging) {
		t.Fatalf("order record after the crash: status %q, want %q (left for a reader)", st, OrderStaging)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err = e.inv.Reserve(e.ctx, id, items, "", stagedTTL)
		if !errors.Is(err, ErrInProgress) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !errors.Is(err, ErrInsufficientStock) {
		t.Fatalf("retry after the crash: %v, want insufficient stock", err)
	}
	e.expireAll()
	for _, rt := range []string{"b", "c"} {
		lvl, err := e.inv.GetStock(e.ctx, rt, "s")
		if err != nil {
			t.Fatal(err)
		}
		if lvl.Reserved != 0 {
			t.Errorf("route %s: %d units reserved after a refused order", rt, lvl.Reserved)
		}
	}
	e.stock()
}
