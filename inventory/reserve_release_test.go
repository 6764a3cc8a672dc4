package inventory

import (
	"context"
	"testing"
	"time"
)

// TestReleaseBeforeBeginLands: a general-path Reserve whose caller gave
// up while its begin was still queued releases the attempt
// (releaseLease) and returns; the begin may land on the home node after
// that release (a group sent it later). It must then not hold the order's
// lease: the begin meets the failed record the release left under its
// token and answers failed, and a retry of the order with a new attempt
// is served at once instead of waiting out inventory.attempt_lease.
// Before opRelease the release was a no-op where the order had no record,
// the late begin wrote "reserving", and the retry (CI, under load) waited.
func TestReleaseBeforeBeginLands(t *testing.T) {
	_, addrs := startNamed(t, 2)
	cfg := leaveConfig(t, addrs, map[string][]string{"r": {"n1", "n2"}})
	inv := openInv(t, cfg, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := inv.LoadStock(ctx, "r", "z", 10, 0); err != nil {
		t.Fatal(err)
	}
	id := "late-begin"
	home, err := inv.homeFor(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	items := []Item{{Route: "r", SKU: "z", Quantity: 1}}
	tok := newToken()
	inv.releaseLease(ctx, home, id, tok) // the caller gave up first
	rec, err := inv.begin(ctx, home, id, tok, digestOf(items, ""), "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if rec.status != recFailed || rec.token != tok {
		t.Errorf("the begin landing after its attempt's release: %s under %q, want failed under %q (it holds the lease)", rec.status, rec.token, tok)
	}
	rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
	defer rcancel()
	start := time.Now()
	res, err := inv.Reserve(rctx, id, items, "", time.Minute)
	if err != nil || len(res.Receipts) != 1 {
		t.Fatalf("retry of %s after the released attempt: %+v, %v after %v; want it served at once", id, res, err, time.Since(start).Round(time.Millisecond))
	}
	if lvl, err := inv.GetStock(ctx, "r", "z"); err != nil || lvl.Available != 9 {
		t.Fatalf("r/z after one reservation: %+v, %v; want 9 available", lvl, err)
	}
}
