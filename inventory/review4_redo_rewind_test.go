package inventory

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Gap 2: a cursor's part id catches a queue that went back under the
// consumer to a point at or beyond its offset, as ReadRedoBatch does: the
// entry at after holds another part, so the page is Rewound with no
// entries. The part landed there, a cursor without one, or an entry
// trimmed since (gone: trimming never brings one back) read on; a cursor
// whose entry was trimmed unread (RedoPartTrimmed) finding an entry there
// is rewound. ReadRedoBatch answers the same for every cursor.
func TestReview4ReadRedoPageFromPartID(t *testing.T) {
	e := newStagedEnv(t)
	rs := reserveOneEach(t, e, "r4-a", "r4-b", "r4-c")
	nn, q := rs[0].Node, invQueue(t, rs[0].RedoLog)
	p, err := e.inv.ReadRedoPage(e.ctx, nn, q, 0, 10)
	if err != nil || len(p.Entries) != 3 {
		t.Fatalf("ReadRedoPage = %+v, %v; want 3 entries", p, err)
	}
	landed := p.Entries[1] // the consumer landed up to the second entry
	check := func(what string, c RedoCursor, rewound bool, entries int) {
		t.Helper()
		got, err := e.inv.ReadRedoPageFrom(e.ctx, nn, c, 10)
		if err != nil || got.Rewound != rewound || len(got.Entries) != entries {
			t.Fatalf("%s: ReadRedoPageFrom(%+v) = %+v, %v; want rewound %v, %d entries", what, c, got, err, rewound, entries)
		}
		b, err := e.inv.ReadRedoBatch(e.ctx, nn, "", []RedoCursor{c}, 10, 0)
		if err != nil || b.Queues[0].Rewound != rewound || len(b.Queues[0].Entries) != entries {
			t.Fatalf("%s: ReadRedoBatch(%+v) = %+v, %v; want rewound %v, %d entries (as ReadRedoPageFrom)", what, c, b, err, rewound, entries)
		}
	}
	check("the part landed", RedoCursor{Queue: q, After: landed.Offset, PartID: landed.PartID}, false, 1)
	check("no part id", RedoCursor{Queue: q, After: landed.Offset}, false, 1)
	check("trimmed unread, an entry there", RedoCursor{Queue: q, After: landed.Offset, PartID: RedoPartTrimmed}, true, 0)

	// the node went back and handed offset landed.Offset out again, to
	// another part: the head is where it was, the entry another part's
	seg := handOutAgain(t, e, nn, rs[0].RedoLog, landed, "other|part")
	cl := e.clients[nn]
	check("another part at after", RedoCursor{Queue: q, After: landed.Offset, PartID: landed.PartID}, true, 0)
	if got, err := e.inv.ReadRedoPage(e.ctx, nn, q, landed.Offset, 10); err != nil || got.Rewound || len(got.Entries) != 1 {
		t.Fatalf("ReadRedoPage (no part id) = %+v, %v; want read on: without the part there is nothing to compare", got, err)
	}

	// trimmed since: gone, not another part
	if err := cl.ZRem(e.ctx, redoSegmentKey(rs[0].RedoLog, p.Entries[0].Offset), p.Entries[0].PartID).Err(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ZRem(e.ctx, seg, "other|part").Err(); err != nil {
		t.Fatal(err)
	}
	check("trimmed since", RedoCursor{Queue: q, After: landed.Offset, PartID: landed.PartID}, false, 1)
	check("past the head", RedoCursor{Queue: q, After: rs[2].Offset + 1, PartID: landed.PartID}, true, 0)

	if _, err := e.inv.ReadRedoPageFrom(e.ctx, nn, RedoCursor{Queue: q, After: -1}, 10); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "after") {
		t.Fatalf("ReadRedoPageFrom(after -1): %v; want ErrInvalid naming after", err)
	}
}

// reserveOneEach reserves one unit of a/s for each order id and returns
// their receipts (each order's one part).
func reserveOneEach(t *testing.T, e *stagedEnv, ids ...string) []Receipt {
	t.Helper()
	var rs []Receipt
	for _, id := range ids {
		res, err := e.inv.Reserve(e.ctx, id, []Item{{Route: "a", SKU: "s", Quantity: 1}}, "", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, res.Receipts[0])
	}
	return rs
}

// handOutAgain makes node nn's queue redoLog hold part other at entry's
// offset instead of entry's part, as a node gone back to an older copy
// that handed the offset out again would; it returns the segment key.
func handOutAgain(t *testing.T, e *stagedEnv, nn, redoLog string, entry RedoEntry, other string) string {
	t.Helper()
	seg := redoSegmentKey(redoLog, entry.Offset)
	cl := e.clients[nn]
	if err := cl.ZRem(e.ctx, seg, entry.PartID).Err(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ZAdd(e.ctx, seg, redis.Z{Score: float64(entry.Offset), Member: other}).Err(); err != nil {
		t.Fatal(err)
	}
	return seg
}
