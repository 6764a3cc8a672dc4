package inventory

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A redo-log queue whose first entries are in the layout of the release
// before the segments (all in the queue's own key) and whose later ones
// are in segments reads as one gap-free run (in pages that cross from the
// old entries into the segments, by ReadRedoLog and ReadRedoBatch), counts
// right, is acknowledged and trimmed across the two, and is read from a
// cursor that trimming left behind; the segments stay listpacks of at most
// 100 entries.
func TestRedoLogSegmentsUpgrade(t *testing.T) {
	e := newStagedEnv(t)
	if _, err := e.inv.LoadStock(e.ctx, "a", "r", 1000, 0); err != nil {
		t.Fatal(err)
	}
	cl := e.clients["n1"]
	one := []Item{{Route: "a", SKU: "r", Quantity: 1}}
	var ids []string
	reserve := func(n int) Receipt {
		var last Receipt
		for range n {
			id := fmt.Sprintf("seg-%d", len(ids))
			res, err := e.inv.Reserve(e.ctx, id, one, "", time.Hour)
			if err != nil {
				t.Fatalf("Reserve %s: %v", id, err)
			}
			ids, last = append(ids, id), res.Receipts[0]
		}
		return last
	}
	r := reserve(130)
	queue := invQueue(t, r.RedoLog)
	// the release before: every entry in the queue's own key
	segs := cl.Keys(e.ctx, r.RedoLog+":*").Val()
	if len(segs) != 2 {
		t.Fatalf("130 entries in segments %v, want 2 (offsets 1-99, 100-130)", segs)
	}
	for _, k := range segs {
		for _, z := range cl.ZRangeWithScores(e.ctx, k, 0, -1).Val() {
			cl.ZAdd(e.ctx, r.RedoLog, z)
		}
		cl.Del(e.ctx, k)
	}
	if r = reserve(250); r.Offset != 380 {
		t.Fatalf("last offset %d, want 380", r.Offset)
	}
	for _, k := range cl.Keys(e.ctx, r.RedoLog+":*").Val() {
		if n := cl.ZCard(e.ctx, k).Val(); n > 100 || cl.ObjectEncoding(e.ctx, k).Val() != "listpack" {
			t.Errorf("segment %s: %d entries, encoding %s; want at most 100 in a listpack", k, n, cl.ObjectEncoding(e.ctx, k).Val())
		}
	}
	if n := cl.ZCard(e.ctx, r.RedoLog).Val(); n != 130 {
		t.Fatalf("queue key holds %d entries, want the 130 old ones", n)
	}

	want := func(from int64) {
		t.Helper()
		after := from - 1
		for {
			page, err := e.inv.ReadRedoLog(e.ctx, "n1", queue, after, 7)
			if err != nil {
				t.Fatal(err)
			}
			for _, en := range page {
				if after++; en.Offset != after || !strings.HasPrefix(en.PartID, ids[after-1]+"|") {
					t.Fatalf("entry %+v, want offset %d of order %s", en, after, ids[after-1])
				}
			}
			if len(page) < 7 {
				break
			}
		}
		if after != 380 {
			t.Fatalf("read up to offset %d, want 380", after)
		}
		b, err := e.inv.ReadRedoBatch(e.ctx, "n1", "", []RedoCursor{{Queue: queue, After: from - 1}}, 10000, 0)
		if err != nil || len(b.Queues) != 1 || b.Queues[0].Trimmed != 0 || len(b.Queues[0].Entries) != int(381-from) ||
			b.Queues[0].Entries[0].Offset != from {
			t.Fatalf("ReadRedoBatch from %d: %+v, %v", from, b, err)
		}
		if n, err := e.inv.RedoLogLen(e.ctx, "n1"); err != nil || n != 381-from {
			t.Fatalf("RedoLogLen = %d, %v; want %d", n, err, 381-from)
		}
	}
	want(1)

	for _, id := range ids[:300] {
		if _, err := e.inv.Confirm(e.ctx, id); err != nil {
			t.Fatalf("Confirm %s: %v", id, err)
		}
	}
	// acknowledged up to 250; offsets 120-250 cross the old entries into
	// the segments; the trim goes no further than the acknowledgement
	if _, err := e.inv.AckRedoLog(e.ctx, "n1", queue, 250); err != nil {
		t.Fatal(err)
	}
	for {
		n, err := e.inv.TrimRedoLog(e.ctx, "n1", 0, 60)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	if n := cl.Exists(e.ctx, r.RedoLog).Val(); n != 0 {
		t.Errorf("queue key still holds %d old entries after they were trimmed", cl.ZCard(e.ctx, r.RedoLog).Val())
	}
	want(251)
	// a cursor left behind by the trim: the entries past it are gone
	b, err := e.inv.ReadRedoBatch(e.ctx, "n1", "", []RedoCursor{{Queue: queue, After: 10}}, 5, 0)
	if err != nil || b.Queues[0].Trimmed != 240 || len(b.Queues[0].Entries) != 5 || b.Queues[0].Entries[0].Offset != 251 {
		t.Fatalf("ReadRedoBatch after 10: %+v, %v; want 240 trimmed, then 251…", b, err)
	}
	// the unsettled part at 301 stops the trim, acknowledged or not
	if _, err := e.inv.AckRedoLog(e.ctx, "n1", queue, 380); err != nil {
		t.Fatal(err)
	}
	if n, err := e.inv.TrimRedoLog(e.ctx, "n1", 0, 1000); err != nil || n != 50 {
		t.Fatalf("TrimRedoLog = %d, %v; want 50 (251-300)", n, err)
	}
	want(301)
}

// invQueue is the queue number of a redo-log key.
func invQueue(t *testing.T, key string) int {
	t.Helper()
	q, ok := redoQueueNumber(key)
	if !ok {
		t.Fatalf("redo log %q is not a queue", key)
	}
	n, _ := strconv.Atoi(q)
	return n
}

// The Go and Lua definitions of a segment agree.
func TestRedoSegmentSizeMatchesLua(t *testing.T) {
	if want := fmt.Sprintf("local REDO_SEG = %d\n", redoSegmentSize); !strings.Contains(luaFile("redo_log.lua"), want) {
		t.Fatalf("lua/redo_log.lua does not define %q", want)
	}
}

// redoEntriesOn returns every entry of queue q on node c, read straight
// from the node: the queue's own key and all its segments, by offset.
func redoEntriesOn(t testing.TB, ctx context.Context, c redis.Cmdable, q int) []redis.Z {
	t.Helper()
	keys, err := c.Keys(ctx, RedoLogKey(q)+":*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []redis.Z
	for _, k := range append(keys, RedoLogKey(q)) {
		z, err := c.ZRangeWithScores(ctx, k, 0, -1).Result()
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		out = append(out, z...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Score < out[j].Score })
	return out
}
