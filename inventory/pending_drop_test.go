package inventory

import (
	"fmt"
	"testing"
	"time"
)

// A pending stock part's record disappears (by hand, or evicted) while its
// redo entry and its pending-index member "queue:offset" stay: the drop
// unindexes the member. Before, pending_due reported the part under its
// id, the drop could not rebuild the member from a missing record, and the
// member stayed due for ever: enough of them (a batch) kept every pass on
// the same entries, so no other due part was reached.
func TestDropUnindexesAPlaceWhosePartRecordIsGone(t *testing.T) {
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
	time.Sleep(stagedTTL + 1500*time.Millisecond)
	n1, _ := e.r.Node("n1")
	for i := 0; i < 3; i++ {
		due, err := e.inv.DueParts(e.ctx, n1, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range due {
			got, err := e.inv.ResolveExpired(e.ctx, p)
			t.Logf("pass %d: %+v -> %v %v", i, p, got, err)
		}
	}
	if _, err := cl.ZScore(e.ctx, PendingKey, m).Result(); err == nil {
		t.Errorf("member %s still indexed after the drops: %v", m, cl.ZRange(e.ctx, PendingKey, 0, -1).Val())
	}
}
