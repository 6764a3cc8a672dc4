package inventory

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// A pending stock part's record is lost (deleted, or its node lost
// acknowledged writes) while its redo entry, its pending-index member
// "queue:offset" and its units stay. A trim keeps the entry, whether a
// consumer acknowledged it (max age 0) or it is older than the max age,
// for as long as the node lists the part undecided: the index names the
// part by it, once due the part is set aside, listed stuck with its unit
// reserved, and once its record is repaired a retry puts it back under
// its place, where the expiry finds it by the entry and settles it. The
// reads never report it as expired. Before, the trim read the missing
// record as a part settled long ago and removed the entry (while
// pending, and again once set aside); the member then named no part, the
// expiry dropped it as a stale place, and the unit stayed reserved for
// good, in no index; and the reads gave an "expired" entry and
// PartMissing, which a consumer lands as final.
func TestTrimKeepsTheEntryOfAPartWhoseRecordIsLostWhileListed(t *testing.T) {
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
	keys := []string{partKey(id), orderKey("lost-1")}
	dumps := map[string]string{}
	for _, k := range keys {
		if d, err := cl.Dump(e.ctx, k).Result(); err == nil {
			dumps[k] = d
		}
	}
	cl.Del(e.ctx, keys...)
	if _, err := e.inv.AckRedoLog(e.ctx, "n1", q, r.Offset); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // the entry older than the 1ms max age
	kept := func(when string) {
		t.Helper()
		for _, age := range []time.Duration{0, time.Millisecond} {
			if n, err := e.inv.TrimRedoLog(e.ctx, "n1", age, 100); err != nil || n != 0 {
				t.Fatalf("%s: trim (max age %v) of an acknowledged entry whose part's record is lost: %d removed, %v; want none",
					when, age, n, err)
			}
		}
		// and no read reports the part expired
		if en, err := e.inv.ReadRedoLog(e.ctx, "n1", q, r.Offset-1, 1); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: ReadRedoLog = %+v, %v; want ErrCorrupt naming the part, not an expired entry", when, en, err)
		}
		b, err := e.inv.ReadRedoBatch(e.ctx, "n1", "", []RedoCursor{{Queue: q, After: r.Offset - 1}}, 10, 0)
		if err != nil || len(b.Queues) != 1 || len(b.Queues[0].Entries) != 0 || b.Queues[0].Problem == nil || b.Queues[0].Problem.PartID != id {
			t.Errorf("%s: ReadRedoBatch = %+v, %v; want the queue stopped before the part, a Problem naming it", when, b, err)
		}
		_, st, err := e.inv.PartStatesAt(e.ctx, "n1", []RedoCursor{{Queue: q, After: r.Offset, PartID: id}})
		if err != nil || st[0].State != PartUnreadable || st[0].Problem == "" {
			t.Errorf("%s: PartStatesAt = %+v, %v; want PartUnreadable with why", when, st, err)
		}
	}
	kept("listed pending")
	waitDueListed(t, e.ctx, e.inv, "n1", id) // the deadline and the part's grace
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
	kept("set aside")
	// the records repaired and the part retried: it is due under its
	// place again, which names it, and settles by its order's decision
	// (expired: cancelled)
	for k, d := range dumps {
		if err := cl.Restore(e.ctx, k, 0, d).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := e.inv.RetryStuck(e.ctx, "n1", id); err != nil || !ok {
		t.Fatalf("RetryStuck = %v, %v", ok, err)
	}
	due, err = e.inv.DueParts(e.ctx, n1, 100)
	if err != nil || len(due) != 1 || due[0].PartID != id {
		t.Fatalf("due after the repair %+v, %v; want part %s, read at its place %s", due, err, id, m)
	}
	if _, err := e.inv.ResolveExpired(e.ctx, due[0]); err != nil {
		t.Fatalf("ResolveExpired after the repair: %v", err)
	}
	if lvl, err := e.inv.GetStock(e.ctx, "a", "s"); err != nil || lvl.Reserved != 0 || lvl.Available != lvl.Loaded {
		t.Errorf("stock %+v, %v; want the part's unit back", lvl, err)
	}
	if n, err := e.inv.TrimRedoLog(e.ctx, "n1", 0, 100); err != nil || n != 1 {
		t.Errorf("trim once the part settled: %d removed, %v; want its entry", n, err)
	}
}
