package inventory

import (
	"fmt"
	"testing"
	"time"
)

// A pending stock part's record is lost (deleted, or its node lost
// acknowledged writes) while its redo entry, its pending-index member
// "queue:offset" and its units stay. A trim keeps the entry, whether a
// consumer acknowledged it (max age 0) or it is older than the max age:
// the index names the part by it, and once due the part is set aside,
// listed stuck with its unit reserved. The trim read the missing record
// as a part settled long ago and removed the entry; the member then named
// no part, the expiry dropped it as a stale place, and the unit stayed
// reserved for good, in no index. Once set aside, the entry goes.
func TestTrimKeepsTheEntryOfAPartWhoseRecordIsLostUntilSetAside(t *testing.T) {
	t.Parallel() // it mostly waits a deadline out
	e := newStagedEnv(t)
	cl := e.clients["n1"]
	res, err := e.inv.Reserve(e.ctx, "lost-1", []Item{{Route: "a", SKU: "s", Quantity: 1}}, "", stagedTTL)
	if err != nil {
		t.Fatal(err)
	}
	r := res.Receipts[0]
	q := invQueue(t, r.RedoLog)
	en, err := e.inv.ReadRedoLog(e.ctx, r.Node, q, r.Offset-1, 1)
	if err != nil || len(en) != 1 {
		t.Fatal(en, err)
	}
	id, m := en[0].PartID, fmt.Sprintf("%d:%d", q, r.Offset)
	// the part's record lost, and its order's (a one-node order holds
	// the part inline in it); the entry, the member and the unit stay
	cl.Del(e.ctx, partKey(id), orderKey("lost-1"))
	if _, err := e.inv.AckRedoLog(e.ctx, "n1", q, r.Offset); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // the entry older than the 1ms max age
	for _, age := range []time.Duration{0, time.Millisecond} {
		if n, err := e.inv.TrimRedoLog(e.ctx, "n1", age, 100); err != nil || n != 0 {
			t.Fatalf("trim (max age %v) of an acknowledged entry whose part is indexed pending, its record lost: %d removed, %v; want none",
				age, n, err)
		}
	}
	time.Sleep(stagedTTL + 1500*time.Millisecond) // the deadline and the part's grace
	n1, _ := e.r.Node("n1")
	due, err := e.inv.DueParts(e.ctx, n1, 100)
	if err != nil || len(due) != 1 || due[0].PartID != id {
		t.Fatalf("due %+v, %v; want part %s (member %s), its record gone", due, err, id, m)
	}
	got, err := e.inv.ResolveExpired(e.ctx, due[0])
	if !Unsettleable(err) {
		t.Fatalf("ResolveExpired(%+v) = %v, %v; want an Unsettleable error", due[0], got, err)
	}
	// as the reconciler does (rollback/pass.go)
	if _, err := e.inv.SetAside(e.ctx, due[0], err.Error(), time.Hour, time.Hour); err != nil {
		t.Fatal(err)
	}
	stuck, err := e.inv.StuckParts(e.ctx, "n1", 10)
	if err != nil || len(stuck) != 1 || stuck[0].PartID != id || stuck[0].State != PartMissing {
		t.Fatalf("stuck %+v, %v; want %s listed, its record missing", stuck, err, id)
	}
	if lvl, err := e.inv.GetStock(e.ctx, "a", "s"); err != nil || lvl.Reserved != 1 {
		t.Errorf("stock %+v, %v; want the part's unit still reserved", lvl, err)
	}
	if n, err := e.inv.TrimRedoLog(e.ctx, "n1", 0, 100); err != nil || n != 1 {
		t.Errorf("trim after the part was set aside: %d removed, %v; want its entry", n, err)
	}
}
