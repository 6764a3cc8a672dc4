package inventory

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// A part record that exists but cannot be read (a packed record whose
// state code is none, a key of another type) is never read as missing:
// ErrCorrupt's doc ("a retry meets it again until the value is
// repaired"), PartSnapshot's ("PartMissing when the node holds no record
// of the part") and RedoEntry.State's ("expired when its record is
// gone"). part_read mapped an unknown state code to no state, so a settle
// read the part as missing (a Cancel wrote a tombstone over the record,
// its units reserved for good), a trim dropped its redo entry unread,
// PartStates said PartMissing and the redo reads said "expired".

// unreadableParts reserves n one-unit parts of SKU sku on route a (node
// n1), one order each (with a part on route b: an order of one node's
// parts may hold them inline, inline.go, with no record of their own),
// and returns their ids, their queue and offsets.
func unreadableParts(t *testing.T, e *stagedEnv, prefix, sku string, n int) (ids []string, queue int, offs []int64) {
	t.Helper()
	for i := range n {
		items := []Item{{Route: "a", SKU: sku, Quantity: 1}, {Route: "b", SKU: "s", Quantity: 1}}
		res, err := e.inv.Reserve(e.ctx, fmt.Sprintf("%s-%d", prefix, i), items, "", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		r := res.Receipts[0]
		queue = invQueue(t, r.RedoLog)
		es, err := e.inv.ReadRedoLog(e.ctx, "n1", queue, r.Offset-1, 1)
		if err != nil || len(es) != 1 {
			t.Fatalf("ReadRedoLog at %d: %+v, %v", r.Offset, es, err)
		}
		if e.clients["n1"].Exists(e.ctx, partKey(es[0].PartID)).Val() != 1 {
			t.Fatalf("part %s has no record of its own", es[0].PartID)
		}
		ids, offs = append(ids, es[0].PartID), append(offs, r.Offset)
	}
	return ids, queue, offs
}

// garble replaces the state code of part id's packed record on n1 with
// "Z" and returns the record as it was.
func garble(t *testing.T, e *stagedEnv, id string) string {
	t.Helper()
	c := e.clients["n1"]
	v, err := c.Get(e.ctx, partKey(id)).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Set(e.ctx, partKey(id), "Z"+v[1:], 0).Err(); err != nil {
		t.Fatal(err)
	}
	return v
}

// wrongType replaces part id's record on n1 with a list.
func wrongType(t *testing.T, e *stagedEnv, id string) {
	t.Helper()
	c := e.clients["n1"]
	if err := c.Del(e.ctx, partKey(id)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.RPush(e.ctx, partKey(id), "x").Err(); err != nil {
		t.Fatal(err)
	}
}

// TestCorruptStateCodeIsNoMissingPart: a settle of a part whose state code
// is none fails with ErrCorrupt naming the key and the code, changing
// nothing (a Cancel wrote a tombstone over it: the units it holds stayed
// reserved for good; a Confirm answered "missing"); a trim keeps its redo
// entry (it dropped it, as a part gone); PartStates reads it unreadable.
func TestCorruptStateCodeIsNoMissingPart(t *testing.T) {
	e := newStagedEnv(t)
	ids, q, offs := unreadableParts(t, e, "code", "s", 2)
	bad, good := ids[0], ids[1]
	orig := garble(t, e, bad)
	key := partKey(bad)
	for _, a := range []Action{Cancel, Confirm} {
		res, err := e.inv.SettleNow(e.ctx, Settle{Node: "n1", Action: a, OrderID: "code-0", PartIDs: []string{bad}})
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), `"Z"`) {
			t.Errorf("%s of a part whose state code is Z = %v, %v; want ErrCorrupt naming %s and the code", a, res, err, key)
		}
		if v := e.clients["n1"].Get(e.ctx, key).Val(); v != "Z"+orig[1:] {
			t.Errorf("after the %s, the record is %q; want it left as it was", a, v)
		}
	}
	if n, err := e.inv.TrimRedoLog(e.ctx, "n1", time.Millisecond, 100); err != nil || n != 0 {
		t.Errorf("TrimRedoLog = %d, %v; want 0 trimmed: the first entry's record cannot be read", n, err)
	}
	_, states, err := e.inv.PartStates(e.ctx, "n1", []string{bad, good, "gone|tok|0"})
	if err != nil {
		t.Fatal(err)
	}
	if s := states[0]; s.State != PartUnreadable || !strings.Contains(s.Problem, key) || !strings.Contains(s.Problem, `"Z"`) {
		t.Errorf("PartStates of the garbled part = %+v; want PartUnreadable, a Problem naming %s and the code", s, key)
	}
	if states[1].State != PartPending || states[1].Problem != "" || states[2] != (PartSnapshot{}) {
		t.Errorf("PartStates of a good part and a missing one = %+v; want pending and PartMissing", states[1:])
	}
	// repaired: read, settled and trimmed as any part
	if err := e.clients["n1"].Set(e.ctx, key, orig, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if res, err := e.inv.SettleNow(e.ctx, Settle{Node: "n1", Action: Confirm, OrderID: "code-0", PartIDs: []string{bad}}); err != nil || res[0] != "done" {
		t.Errorf("Confirm after the repair = %v, %v; want done", res, err)
	}
	if _, err := e.inv.AckRedoLog(e.ctx, "n1", q, offs[0]); err != nil {
		t.Fatal(err)
	}
	if n, err := e.inv.TrimRedoLog(e.ctx, "n1", 0, 100); err != nil || n != 1 {
		t.Errorf("TrimRedoLog after the repair = %d, %v; want the confirmed, acknowledged entry trimmed", n, err)
	}
}

// TestReadRedoLogNamesUnreadablePart: ReadRedoLog (redo_read.lua) fails
// with ErrCorrupt naming the part's key and its offset when an entry's
// record cannot be read: a garbled state code read as an "expired" entry,
// and a list failed with a WRONGTYPE that named nothing.
func TestReadRedoLogNamesUnreadablePart(t *testing.T) {
	e := newStagedEnv(t)
	ids, q, offs := unreadableParts(t, e, "log", "s", 3)
	garble(t, e, ids[1])
	wrongType(t, e, ids[2])
	if es, err := e.inv.ReadRedoLog(e.ctx, "n1", q, 0, 1); err != nil || len(es) != 1 || es[0].PartID != ids[0] {
		t.Fatalf("ReadRedoLog of the good first entry = %+v, %v", es, err)
	}
	for i := 1; i < 3; i++ {
		es, err := e.inv.ReadRedoLog(e.ctx, "n1", q, offs[i]-1, 10)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), partKey(ids[i])) ||
			!strings.Contains(err.Error(), fmt.Sprintf("offset %d", offs[i])) {
			t.Errorf("ReadRedoLog from entry %d = %+v, %v; want ErrCorrupt naming %s at offset %d", i, es, err, partKey(ids[i]), offs[i])
		}
	}
}

// TestReadRedoBatchStopsQueueAtUnreadablePart: ReadRedoBatch reads each
// queue up to an entry whose record cannot be read and reports it
// (RedoQueueRead.Problem), reading the node's other queues as usual; it
// failed for every queue of the node with a WRONGTYPE naming nothing.
func TestReadRedoBatchStopsQueueAtUnreadablePart(t *testing.T) {
	e := newStagedEnv(t)
	ids, q, offs := unreadableParts(t, e, "batch", "s", 3)
	var other int
	var otherIDs []string
	for i := range 40 { // a SKU of another queue
		sku := fmt.Sprintf("t%d", i)
		if _, err := e.inv.LoadStock(e.ctx, "a", sku, 10, 0); err != nil {
			t.Fatal(err)
		}
		if otherIDs, other, _ = unreadableParts(t, e, "other"+sku, sku, 2); other != q {
			break
		}
	}
	if other == q {
		t.Fatal("no SKU of another queue")
	}
	wrongType(t, e, ids[1])
	cursors := []RedoCursor{{Queue: q}, {Queue: other}}
	b, err := e.inv.ReadRedoBatch(e.ctx, "n1", "", cursors, 100, 0)
	if err != nil {
		t.Fatalf("ReadRedoBatch with one record a list: %v; want the queues read", err)
	}
	bad, rest := b.Queues[0], b.Queues[1]
	if len(bad.Entries) != 1 || bad.Entries[0].PartID != ids[0] || bad.Problem == nil {
		t.Fatalf("the queue with the list = %+v; want its first entry, then the problem", bad)
	}
	if p := *bad.Problem; p.Offset != offs[1] || p.PartID != ids[1] || p.Key != partKey(ids[1]) || p.Why == "" ||
		!strings.Contains(p.String(), partKey(ids[1])) {
		t.Errorf("Problem = %+v; want offset %d, part %s, its key and why", p, offs[1], ids[1])
	}
	if len(rest.Entries) != 2 || rest.Entries[0].PartID != otherIDs[0] || rest.Problem != nil {
		t.Errorf("the other queue = %+v; want its 2 entries", rest)
	}
	// a garbled state code instead: the same; gone while the pending index
	// lists the part (its record lost while pending): the same; gone once
	// it left the index (a record that outlived its retention): read
	// through, expired
	if err := e.clients["n1"].Del(e.ctx, partKey(ids[1])).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.clients["n1"].Set(e.ctx, partKey(ids[1]), "Q\x1fs\x1f1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	b, err = e.inv.ReadRedoBatch(e.ctx, "n1", "", cursors, 100, 0)
	if err != nil || len(b.Queues[0].Entries) != 1 || b.Queues[0].Problem == nil || b.Queues[0].Problem.PartID != ids[1] {
		t.Errorf("ReadRedoBatch with a garbled state code = %+v, %v; want the first entry, then the problem", b, err)
	}
	if err := e.clients["n1"].Del(e.ctx, partKey(ids[1])).Err(); err != nil {
		t.Fatal(err)
	}
	b, err = e.inv.ReadRedoBatch(e.ctx, "n1", "", cursors, 100, 0)
	if err != nil || len(b.Queues[0].Entries) != 1 || b.Queues[0].Problem == nil || b.Queues[0].Problem.PartID != ids[1] {
		t.Errorf("ReadRedoBatch with the record gone, the part indexed pending = %+v, %v; want the first entry, then the problem", b, err)
	}
	if err := e.clients["n1"].ZRem(e.ctx, PendingKey, fmt.Sprintf("%d:%d", q, offs[1]), ids[1]).Err(); err != nil {
		t.Fatal(err)
	}
	b, err = e.inv.ReadRedoBatch(e.ctx, "n1", "", cursors, 100, 0)
	if err != nil || len(b.Queues[0].Entries) != 3 || b.Queues[0].Problem != nil || b.Queues[0].Entries[1].State != "expired" {
		t.Errorf("ReadRedoBatch with the record gone = %+v, %v; want 3 entries, the second expired", b, err)
	}
}

// TestUnknownCounterReferenceIsCorrupt: a part record whose counter field
// names no counter kind (neither s… nor q… nor an =literal) cannot be
// read (partDeref's "not a counter reference"): part_read read it as a
// part without a counter, so a Cancel marked it cancelled and gave
// nothing back (its unit reserved for good) and a Confirm settled it.
// Now a settle fails with ErrCorrupt naming the key and changes nothing.
func TestUnknownCounterReferenceIsCorrupt(t *testing.T) {
	e := newStagedEnv(t)
	ids, _, _ := unreadableParts(t, e, "ctr", "s", 1)
	key := partKey(ids[0])
	c := e.clients["n1"]
	orig, err := c.Get(e.ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Split(orig, "\x1f")
	if len(f) < 7 || (f[5] == "" || (f[5][0] != 's' && f[5][0] != 'q')) {
		t.Fatalf("record %q: want its counter reference as field 6", orig)
	}
	f[5] = "Z" + f[5][1:]
	bad := strings.Join(f, "\x1f")
	if err := c.Set(e.ctx, key, bad, 0).Err(); err != nil {
		t.Fatal(err)
	}
	before, _ := e.inv.GetStock(e.ctx, "a", "s")
	for _, a := range []Action{Cancel, Confirm} {
		res, err := e.inv.SettleNow(e.ctx, Settle{Node: "n1", Action: a, OrderID: "ctr-0", PartIDs: []string{ids[0]}})
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "counter reference") {
			t.Errorf("%s of a part whose counter reference is %q = %v, %v; want ErrCorrupt naming %s and the counter", a, f[5], res, err, key)
		}
		if v := c.Get(e.ctx, key).Val(); v != bad {
			t.Errorf("after the %s, the record is %q; want it left as it was", a, v)
		}
	}
	if after, _ := e.inv.GetStock(e.ctx, "a", "s"); after.Available != before.Available || after.Reserved != before.Reserved || after.Confirmed != before.Confirmed {
		t.Errorf("stock of s went from %+v to %+v; want it unchanged", before, after)
	}
	// repaired: a Cancel gives its unit back
	if err := c.Set(e.ctx, key, orig, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if res, err := e.inv.SettleNow(e.ctx, Settle{Node: "n1", Action: Cancel, OrderID: "ctr-0", PartIDs: []string{ids[0]}}); err != nil || res[0] != "done" {
		t.Errorf("Cancel after the repair = %v, %v; want done", res, err)
	}
	if after, _ := e.inv.GetStock(e.ctx, "a", "s"); after.Available != before.Available+1 || after.Reserved != before.Reserved-1 {
		t.Errorf("stock of s after the Cancel = %+v; want the unit back from %+v", after, before)
	}
}
