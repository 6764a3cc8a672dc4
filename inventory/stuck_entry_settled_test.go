package inventory

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// repairedStuckPart builds a part set aside whose record an operator
// restored by hand: lostStuckPart (the record of a part of order, qty
// units of a/s on n1, lost while pending; the part set aside once due,
// which writes no stuck_since where there is no record), then the records
// lostStuckPart deleted restored as they were (the repair SettleStuck's
// and SettleStuckLost's errors ask for: the part's own record, or for a
// part held inline its order's record). It returns the part's id.
func repairedStuckPart(t *testing.T, e *stagedEnv, order string, qty int64) string {
	t.Helper()
	id, _, _, dumps := lostStuckPart(t, e, order, qty)
	for k, d := range dumps {
		if err := e.clients["n1"].Restore(e.ctx, k, 0, d).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// an inline part (its order's home n1) has no record of its own
	if f := partFieldsOn(t, e.ctx, e.clients["n1"], id); len(dumps) == 0 || f["stuck_since"] != "" {
		t.Fatalf("part %s after the repair of %d records: %v; want no stuck_since", id, len(dumps), f)
	}
	if k, err := e.inv.StuckCount(e.ctx, "n1"); err != nil || k != 1 {
		t.Fatalf("stuck parts on n1 after the repair = %d, %v; want the part's", k, err)
	}
	return id
}

// A part set aside while its record was gone (so its record holds no
// stuck_since), repaired by hand, then settled by its order's Cancel
// while still set aside. The settle (part_settle) took the part out of
// the stuck index only when its record held stuck_since, so the entry
// stayed behind the settled part. Once the settled record lived out its
// retention, the entry read as a part whose record was lost while
// pending: `shardis parts stuck` listed it, SettleStuck sent the
// operator to SettleStuckLost, and SettleStuckLost with the part's true
// route, SKU and quantity (the system of record's) cancelled it a second
// time: its 2 units went back to available again, taken from the 2 that
// another pending order's part holds (reserved 0 with that part pending,
// available 1000 of 1000 loaded with 2 units held: an oversell). Found by
// a review. Now every settle takes the part out of the stuck index in its
// script, so the entry never outlives the settle.
//
// Both ways a Cancel settles the part: its own record's (the order's home
// another node: the settle after the decision, settle.lua), and an inline
// part's (the order's home n1, the part held in its order's record: the
// decision's own script, inline_settle), which never had stuck_since.
func TestSettledStuckPartLeavesNoEntryToSettleTwice(t *testing.T) {
	t.Parallel() // its cases have nodes of their own; they mostly wait a deadline out
	for _, tc := range []struct {
		name   string
		inline bool
	}{{"own record", false}, {"inline", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // its own nodes; it mostly waits a deadline and a retention out
			settledStuckPartOnce(t, tc.inline)
		})
	}
}

func settledStuckPartOnce(t *testing.T, inline bool) {
	e := newShortRetentionEnv(t, 3*time.Second)
	before, err := e.inv.GetStock(e.ctx, "a", "s")
	if err != nil {
		t.Fatal(err)
	}
	x := "x"
	for i := 0; (e.inv.topo.cur.Load().homes.Home(x) == "n1") != inline; i++ {
		x = fmt.Sprintf("x-%d", i)
	}
	id := repairedStuckPart(t, e, x, 2)
	if own := e.clients["n1"].Exists(e.ctx, partKey(id)).Val() == 1; own == inline {
		t.Fatalf("part %s of %s has a record of its own: %v; want %v", id, x, own, !inline)
	}
	// another order's part holds 2 units of the SKU, pending
	if _, err := e.inv.Reserve(e.ctx, "y", []Item{{Route: "a", SKU: "s", Quantity: 2}}, "", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	e.awaitCommitted("y")
	if out, err := e.inv.Cancel(e.ctx, x); err != nil || out.Status != StatusCancelled || out.PendingParts != 0 {
		t.Fatalf("Cancel %s = %+v, %v; want cancelled, its part settled", x, out, err)
	}
	if st := partFieldsOn(t, e.ctx, e.clients["n1"], id)["state"]; st != string(PartCancelled) {
		t.Fatalf("part %s after the Cancel: state %q, want cancelled", id, st)
	}
	if stuck, err := e.inv.StuckParts(e.ctx, "n1", 10); err != nil || len(stuck) != 0 {
		t.Errorf("stuck parts after the part settled %+v, %v; want none", stuck, err)
	}
	// the settled record lives out its retention (no reconciler runs)
	for deadline := time.Now().Add(15 * time.Second); e.clients["n1"].Exists(e.ctx, partKey(id)).Val() == 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("part %s's settled record still there 15s after its settle", id)
		}
	}
	stuck, err := e.inv.StuckParts(e.ctx, "n1", 10)
	t.Logf("stuck parts once the settled record expired: %+v, %v", stuck, err)
	if _, err := e.inv.SettleStuck(e.ctx, "n1", id, Cancel); !errors.Is(err, ErrPrecondition) || !strings.Contains(err.Error(), "not set aside") {
		t.Errorf("SettleStuck of the part settled before = %v; want ErrPrecondition, not set aside", err)
	}
	res, err := e.inv.SettleStuckLost(e.ctx, "n1", id, Cancel, StuckUnits{Route: "a", SKU: "s", Quantity: 2})
	if !errors.Is(err, ErrPrecondition) || !strings.Contains(err.Error(), "not set aside") {
		t.Errorf("SettleStuckLost of the part settled before, by its true values = %q, %v; want ErrPrecondition, not set aside", res, err)
	}
	lv, err := e.inv.GetStock(e.ctx, "a", "s")
	if err != nil || lv.Reserved != 2 || lv.Available != before.Available-2 || lv.Confirmed != before.Confirmed {
		t.Errorf("stock %+v, %v (loaded %+v); want y's 2 units reserved, x's back once: reserved 2, available %d",
			lv, err, before, before.Available-2)
	}
}

// An entry of the stuck index whose part is settled (one a release
// before this one left behind a settle, its record not yet expired) is
// refused by both operator settles with ErrStuckSettled, naming the node,
// the part and its state, writing nothing. Before, SettleStuck told the
// operator to retry it for its order's record to decide and
// SettleStuckLost that the record decides, as for a pending part.
func TestOperatorSettleRefusesTheStuckEntryOfASettledPart(t *testing.T) {
	t.Parallel() // its own nodes; it mostly waits a deadline out
	e := newStagedEnv(t)
	id := repairedStuckPart(t, e, "x", 2)
	since := e.clients["n1"].ZScore(e.ctx, keyStuck, id).Val()
	if _, err := e.inv.Cancel(e.ctx, "x"); err != nil {
		t.Fatal(err)
	}
	// the entry as a settle of a release before left it
	e.clients["n1"].ZAdd(e.ctx, keyStuck, redis.Z{Score: since, Member: id})
	before := e.snapshot()
	_, err := e.inv.SettleStuck(e.ctx, "n1", id, Confirm)
	if !errors.Is(err, ErrStuckSettled) || !errors.Is(err, ErrPrecondition) || !strings.Contains(err.Error(), "n1") ||
		!strings.Contains(err.Error(), id) || !strings.Contains(err.Error(), "cancelled") {
		t.Errorf("SettleStuck of a settled part's entry = %v; want ErrStuckSettled, naming n1, %s and cancelled", err, id)
	}
	e.unchanged(before, "SettleStuck of a settled part's entry")
	_, err = e.inv.SettleStuckLost(e.ctx, "n1", id, Cancel, StuckUnits{Route: "a", SKU: "s", Quantity: 2})
	if !errors.Is(err, ErrStuckSettled) || !errors.Is(err, ErrPrecondition) || !strings.Contains(err.Error(), "n1") ||
		!strings.Contains(err.Error(), id) || !strings.Contains(err.Error(), "cancelled") {
		t.Errorf("SettleStuckLost of a settled part's entry = %v; want ErrStuckSettled, naming n1, %s and cancelled", err, id)
	}
	e.unchanged(before, "SettleStuckLost of a settled part's entry")
}
