package inventory

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// A stock part listed in the pending index by its redo-log place
// ("queue:offset") whose record names no place: its record lost while
// pending and re-created by hand in the hash layout every script still
// reads (partrec.go), from the system of record's row, without the redo
// and offset fields. The order is confirmed, which settles the part;
// part_settle unindexes pend_member's member, the part's id, so the
// place stays in the index. Before, the expiry's drop of the settled part
// named the same id and left the place too, so it stayed listed; once the
// settled record lived out its retention, the place (its redo entry kept:
// not acknowledged) read as a part whose record was lost while pending:
// the expiry set it aside, `shardis parts stuck` listed it, and
// SettleStuckLost with the part's true route, SKU and quantity confirmed
// it a second time, its 2 units taken from the 2 another pending order
// holds (confirmed 4 for 2 sold, reserved 0 with that part pending: an
// oversell). Now the expiry's ops take the member the due listing read
// when it names the part (lua/pending_adjust.lua), so the place leaves
// the index with the settled part, before its record can expire.
func TestSettledPartRestoredWithoutItsPlaceLeavesThePendingIndex(t *testing.T) {
	t.Parallel() // its own nodes; it mostly waits a deadline and a retention out
	e := newRetentionEnv(t, 5*time.Second, 4*time.Second)
	cl := e.clients["n1"]
	n1, _ := e.r.Node("n1")
	before, err := e.inv.GetStock(e.ctx, "a", "s")
	if err != nil {
		t.Fatal(err)
	}
	// another order's part holds 2 units of the SKU, pending to the end
	if _, err := e.inv.Reserve(e.ctx, "y", []Item{{Route: "a", SKU: "s", Quantity: 2}}, "", 4*time.Second); err != nil {
		t.Fatal(err)
	}
	e.awaitCommitted("y")
	x := "x"
	for i := 0; e.inv.topo.cur.Load().homes.Home(x) == "n1"; i++ {
		x = fmt.Sprintf("x-%d", i) // a home away from n1: the part has a record of its own
	}
	res, err := e.inv.Reserve(e.ctx, x, []Item{{Route: "a", SKU: "s", Quantity: 2}}, "", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	e.awaitCommitted(x)
	r := res.Receipts[0]
	en, err := e.inv.ReadRedoLog(e.ctx, "n1", invQueue(t, r.RedoLog), r.Offset-1, 1)
	if err != nil || len(en) != 1 {
		t.Fatal(en, err)
	}
	id := en[0].PartID
	f := partFieldsOn(t, e.ctx, cl, id)
	place := PendingMember(id, f)
	if !strings.Contains(place, ":") || cl.ZScore(e.ctx, PendingKey, place).Err() != nil {
		t.Fatalf("part %s (%v) is not indexed by its place %q", id, f, place)
	}
	// lost while pending, then re-created by hand without its place
	delete(f, "redo")
	delete(f, "offset")
	cl.Del(e.ctx, partKey(id))
	if err := cl.HSet(e.ctx, partKey(id), f).Err(); err != nil {
		t.Fatal(err)
	}
	if out, err := e.inv.Confirm(e.ctx, x); err != nil || out.Status != StatusConfirmed || out.PendingParts != 0 {
		t.Fatalf("Confirm %s = %+v, %v; want confirmed, its part settled", x, out, err)
	}
	// the expiry meets the settled part once due and drops it
	p := e.dueOf("n1", x)
	if got, err := e.inv.ResolveExpired(e.ctx, p); err != nil || got != AlreadySettled {
		t.Fatalf("ResolveExpired(%+v) = %q, %v; want already settled", p, got, err)
	}
	if cl.ZScore(e.ctx, PendingKey, place).Err() == nil {
		t.Errorf("the pending index still lists %s's place %q once the expiry dropped the settled part", id, place)
	}
	// the settled record lives out its retention; the reconciler's passes
	// go on (y's part is left pending: its order is not decided)
	for deadline := time.Now().Add(15 * time.Second); cl.Exists(e.ctx, partKey(id)).Val() == 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("part %s's settled record still there 15s after its settle", id)
		}
	}
	due, err := e.inv.DueParts(e.ctx, n1, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range due {
		if p.OrderID == "y" {
			continue
		}
		t.Errorf("due once x's settled record expired: %+v", p)
		if _, rerr := e.inv.ResolveExpired(e.ctx, p); Unsettleable(rerr) {
			if _, err := e.inv.SetAside(e.ctx, p, rerr.Error(), time.Hour, time.Hour); err != nil {
				t.Fatal(err)
			}
		}
	}
	if stuck, err := e.inv.StuckParts(e.ctx, "n1", 10); err != nil || len(stuck) != 0 {
		t.Errorf("stuck parts once the settled record expired: %+v, %v; want none", stuck, err)
	}
	got, err := e.inv.SettleStuckLost(e.ctx, "n1", id, Confirm, StuckUnits{Route: "a", SKU: "s", Quantity: 2})
	if !errors.Is(err, ErrPrecondition) || !strings.Contains(err.Error(), "not set aside") {
		t.Errorf("SettleStuckLost of the part confirmed before, by its true values = %q, %v; want ErrPrecondition, not set aside", got, err)
	}
	lv, err := e.inv.GetStock(e.ctx, "a", "s")
	if err != nil || lv.Reserved != 2 || lv.Confirmed != before.Confirmed+2 || lv.Available != before.Available-4 {
		t.Errorf("stock %+v, %v (loaded %+v); want x's 2 units confirmed once, y's 2 reserved", lv, err, before)
	}
}
