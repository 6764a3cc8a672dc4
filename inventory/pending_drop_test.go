package inventory

import (
	"fmt"
	"testing"
	"time"
)

// A pending stock part's record disappears (by hand, or evicted) while its
// redo entry and its pending-index member "queue:offset" stay: the part is
// set aside (its units stay reserved, and only a repair can say how many),
// which unindexes the member and lists it stuck. Before, pending_due
// reported the part under its id, the drop could not rebuild the member
// from a missing record, and the member stayed due for ever: enough of
// them (a batch) kept every pass on the same entries, so no other due part
// was reached. Then it was dropped, unlisted, its units reserved for good.
func TestAPlaceWhosePartRecordIsGoneIsSetAside(t *testing.T) {
	t.Parallel() // it mostly waits a deadline out
	e := newStagedEnv(t)
	cl := e.clients["n1"]
	one := []Item{{Route: "a", SKU: "s", Quantity: 1}}
	res, err := e.inv.Reserve(e.ctx, "zomb-1", one, "", stagedTTL)
	if err != nil {
		t.Fatal(err)
	}
	r := res.Receipts[0]
	en, err := e.inv.ReadRedoLog(e.ctx, r.Node, invQueue(t, r.RedoLog), r.Offset-1, 1)
	if err != nil || len(en) != 1 {
		t.Fatal(en, err)
	}
	id, m := en[0].PartID, fmt.Sprintf("%d:%d", invQueue(t, r.RedoLog), r.Offset)
	t.Logf("part %s member %s exists=%d", id, m, cl.Exists(e.ctx, partKey(id)).Val())
	// the part's record and its order's vanish; the redo entry stays
	cl.Del(e.ctx, partKey(id), orderKey("zomb-1"))
	waitDueListed(t, e.ctx, e.inv, "n1", id) // the deadline and the part's grace
	n1, _ := e.r.Node("n1")
	for i := 0; i < 3; i++ {
		due, err := e.inv.DueParts(e.ctx, n1, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range due {
			got, err := e.inv.ResolveExpired(e.ctx, p)
			t.Logf("pass %d: %+v -> %v %v", i, p, got, err)
			if !Unsettleable(err) || p.PartID != id {
				t.Fatalf("ResolveExpired(%+v) = %v, %v; want an Unsettleable error for part %s", p, got, err, id)
			}
			// as the reconciler does (rollback/pass.go)
			if _, err := e.inv.SetAside(e.ctx, p, err.Error(), time.Hour, time.Hour); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := cl.ZScore(e.ctx, PendingKey, m).Result(); err == nil {
		t.Errorf("member %s still indexed after the set-aside: %v", m, cl.ZRange(e.ctx, PendingKey, 0, -1).Val())
	}
	stuck, err := e.inv.StuckParts(e.ctx, "n1", 10)
	if err != nil || len(stuck) != 1 || stuck[0].PartID != id || stuck[0].State != PartMissing {
		t.Errorf("stuck %+v, %v; want %s listed, its record missing", stuck, err, id)
	}
}
