package inventory

import (
	"errors"
	"testing"
	"time"
)

// A position whose entry the max age trimmed before its acknowledgement
// (redo_position.go): the queue still holds it while the landed part's
// record is on the node at that place (reads and acknowledgements go
// on), and no longer once that record is gone, as on a node gone back
// under the position, which never took the part: ReadRedoBatch and
// ReadRedoPageFrom read the queue rewound, AckRedoBatch and AckRedoLogAt
// refuse with ErrRewound and acknowledge nothing. An acknowledgement at or
// past the offset makes the trimmed entry the landed one: it holds then
// without the record. Before, every entry gone read as the landed one.
func TestPositionTrimmedUnacknowledgedHoldsOnlyWithItsPartsRecord(t *testing.T) {
	e := newStagedEnv(t)
	rs := reserveOneEach(t, e, "tp-a", "tp-b")
	for _, id := range []string{"tp-a", "tp-b"} {
		if _, err := e.inv.Confirm(e.ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	nn, q := rs[0].Node, invQueue(t, rs[0].RedoLog)
	p, err := e.inv.ReadRedoPage(e.ctx, nn, q, 0, 10)
	if err != nil || len(p.Entries) != 2 {
		t.Fatalf("ReadRedoPage = %+v, %v; want 2 entries", p, err)
	}
	landed := p.Entries[1]
	time.Sleep(20 * time.Millisecond)
	if n, err := e.inv.TrimRedoLog(e.ctx, nn, time.Millisecond, 100); err != nil || n != 2 {
		t.Fatalf("TrimRedoLog by the max age = %d, %v; want both entries removed", n, err)
	}
	pos := RedoCursor{Queue: q, After: landed.Offset, PartID: landed.PartID}
	rewound := func() (batch, page bool) {
		t.Helper()
		b, err := e.inv.ReadRedoBatch(e.ctx, nn, "", []RedoCursor{pos}, 10, 0)
		if err != nil || len(b.Queues) != 1 {
			t.Fatalf("ReadRedoBatch = %+v, %v", b, err)
		}
		pg, err := e.inv.ReadRedoPageFrom(e.ctx, nn, pos, 10)
		if err != nil {
			t.Fatalf("ReadRedoPageFrom: %v", err)
		}
		return b.Queues[0].Rewound, pg.Rewound
	}
	if b, pg := rewound(); b || pg {
		t.Fatalf("rewound (batch, page) = %v, %v with the landed part's record there; want neither", b, pg)
	}

	// the node goes back under the position: it never took the part
	if err := e.clients[nn].Del(e.ctx, partKey(landed.PartID)).Err(); err != nil {
		t.Fatal(err)
	}
	if b, pg := rewound(); !b || !pg {
		t.Fatalf("rewound (batch, page) = %v, %v with the landed part not on the node; want both", b, pg)
	}
	if _, err := e.inv.AckRedoBatch(e.ctx, nn, p.Incarnation, []RedoCursor{pos}); !errors.Is(err, ErrRewound) {
		t.Fatalf("AckRedoBatch: %v; want ErrRewound", err)
	}
	if _, err := e.inv.AckRedoLogAt(e.ctx, nn, p.Incarnation, pos); !errors.Is(err, ErrRewound) {
		t.Fatalf("AckRedoLogAt: %v; want ErrRewound", err)
	}
	if a, err := e.clients[nn].HGet(e.ctx, keyRedoAcked, rs[0].RedoLog).Result(); err == nil {
		t.Fatalf("acknowledged offset after refused acknowledgements: %s; want none", a)
	}

	// acknowledged at the offset: the entry trimmed was the landed one
	if err := e.clients[nn].HSet(e.ctx, keyRedoAcked, rs[0].RedoLog, landed.Offset).Err(); err != nil {
		t.Fatal(err)
	}
	if b, pg := rewound(); b || pg {
		t.Fatalf("rewound (batch, page) = %v, %v with the offset acknowledged; want neither", b, pg)
	}
}
