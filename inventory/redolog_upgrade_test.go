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
// before the segments (all in the queue's own key), whose next ones are in
// the release before's 100-offset segments and whose later ones are in
// this release's 32-offset segments reads as one gap-free run (in pages
// that cross from each layout into the next, by ReadRedoLog and
// ReadRedoBatch; before this release wrote to the queue too), counts
// right, finds a pending-index member's part in each layout, is
// acknowledged and trimmed across the three (a trim that stops inside the
// old segments leaves the rest readable), and is read from a cursor that
// trimming left behind; the segments stay listpacks of at most 100 and
// 32 entries, and the queue's first offset in the new segments is the
// first one this release handed out.
func TestRedoLogSegmentsUpgrade(t *testing.T) {
	t.Parallel() // its own nodes
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
	firstField := r.RedoLog + RedoFirstSuffix
	if v := cl.HGet(e.ctx, RedoOffsetsKey, firstField).Val(); v != "1" {
		t.Fatalf("%s = %q, want 1 (a new queue)", firstField, v)
	}
	// the releases before: offsets 1-60 in the queue's own key, 61-130 in
	// segments of 100 (61-99, 100-130), no field for the new segments
	segs := cl.Keys(e.ctx, r.RedoLog+":*").Val()
	if len(segs) != 5 {
		t.Fatalf("130 entries in segments %v, want 5 (offsets 1-31, 32-63, 64-95, 96-127, 128-130)", segs)
	}
	for _, k := range segs {
		for _, z := range cl.ZRangeWithScores(e.ctx, k, 0, -1).Val() {
			to := r.RedoLog
			if z.Score > 60 {
				to = redoSegmentKeyV1(r.RedoLog, int64(z.Score))
			}
			cl.ZAdd(e.ctx, to, z)
		}
		cl.Del(e.ctx, k)
	}
	cl.HDel(e.ctx, RedoOffsetsKey, firstField)

	want := func(from, to int64) {
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
		if after != to {
			t.Fatalf("read up to offset %d, want %d", after, to)
		}
		b, err := e.inv.ReadRedoBatch(e.ctx, "n1", "", []RedoCursor{{Queue: queue, After: from - 1}}, 10000, 0)
		if err != nil || len(b.Queues) != 1 || b.Queues[0].Trimmed != 0 || len(b.Queues[0].Entries) != int(to+1-from) ||
			b.Queues[0].Entries[0].Offset != from {
			t.Fatalf("ReadRedoBatch from %d: %+v, %v", from, b, err)
		}
		if n, err := e.inv.RedoLogLen(e.ctx, "n1"); err != nil || n != to+1-from {
			t.Fatalf("RedoLogLen = %d, %v; want %d", n, err, to+1-from)
		}
	}
	want(1, 130) // what this release finds on upgrading, before it writes

	if r = reserve(250); r.Offset != 380 {
		t.Fatalf("last offset %d, want 380", r.Offset)
	}
	if v := cl.HGet(e.ctx, RedoOffsetsKey, firstField).Val(); v != "131" {
		t.Fatalf("%s = %q, want 131 (the first offset this release handed out)", firstField, v)
	}
	for _, k := range cl.Keys(e.ctx, r.RedoLog+":*").Val() {
		limit := int64(redoSegmentSize)
		if !strings.Contains(k, ":s") {
			limit = redoSegmentSizeV1
		}
		if n := cl.ZCard(e.ctx, k).Val(); n > limit || cl.ObjectEncoding(e.ctx, k).Val() != "listpack" {
			t.Errorf("segment %s: %d entries, encoding %s; want at most %d in a listpack", k, n, cl.ObjectEncoding(e.ctx, k).Val(), limit)
		}
	}
	if n := cl.ZCard(e.ctx, r.RedoLog).Val(); n != 60 {
		t.Fatalf("queue key holds %d entries, want the 60 oldest", n)
	}
	if n := cl.ZCard(e.ctx, redoSegmentKeyV1(r.RedoLog, 100)).Val(); n != 31 {
		t.Fatalf("the old segment of offsets 100-130 holds %d entries, want 31", n)
	}
	want(1, 380)
	// the pending index names a stock part by its place: found in each layout
	for _, off := range []int64{7, 75, 130, 131, 380} {
		got, err := PendingPartID(e.ctx, cl, strconv.Itoa(queue)+":"+strconv.FormatInt(off, 10))
		if err != nil || !strings.HasPrefix(got, ids[off-1]+"|") {
			t.Fatalf("PendingPartID at offset %d = %q, %v; want a part of %s", off, got, err, ids[off-1])
		}
	}
	// and so does the scripts' lookup (pend_id, redo_at): made due, they
	// come back as those parts
	n1, _ := e.inv.r.Node("n1")
	for _, off := range []int64{7, 75, 200} {
		m := strconv.Itoa(queue) + ":" + strconv.FormatInt(off, 10)
		if _, err := cl.ZScore(e.ctx, PendingKey, m).Result(); err != nil {
			t.Fatalf("pending index member %s: %v", m, err)
		}
		cl.ZAdd(e.ctx, PendingKey, redis.Z{Score: 1, Member: m})
	}
	due, err := e.inv.DueParts(e.ctx, n1, 10)
	if err != nil || len(due) != 3 {
		t.Fatalf("DueParts = %+v, %v; want the parts at offsets 7, 75 and 200", due, err)
	}
	var got []string
	for _, p := range due {
		got = append(got, p.OrderID+" "+p.PartID)
	}
	sort.Strings(got) // the index's order: by member, the deadlines being equal
	for i, off := range []int64{200, 7, 75} {
		if !strings.HasPrefix(got[i], ids[off-1]+" "+ids[off-1]+"|") {
			t.Fatalf("due parts %q, want those of %s, %s and %s", got, ids[199], ids[6], ids[74])
		}
	}

	for _, id := range ids[:300] {
		if _, err := e.inv.Confirm(e.ctx, id); err != nil {
			t.Fatalf("Confirm %s: %v", id, err)
		}
	}
	trim := func() {
		t.Helper()
		for {
			n, err := e.inv.TrimRedoLog(e.ctx, "n1", 0, 60)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				return
			}
		}
	}
	// acknowledged up to 90: the trim empties the queue key and stops
	// inside the first old segment
	if _, err := e.inv.AckRedoLog(e.ctx, "n1", queue, 90); err != nil {
		t.Fatal(err)
	}
	trim()
	if n := cl.Exists(e.ctx, r.RedoLog).Val(); n != 0 {
		t.Errorf("queue key still holds %d old entries after they were trimmed", cl.ZCard(e.ctx, r.RedoLog).Val())
	}
	want(91, 380)
	// acknowledged up to 250; offsets 91-250 cross the old segments into
	// the new ones; the trim goes no further than the acknowledgement
	if _, err := e.inv.AckRedoLog(e.ctx, "n1", queue, 250); err != nil {
		t.Fatal(err)
	}
	trim()
	if keys := cl.Keys(e.ctx, r.RedoLog+":[0-9]*").Val(); len(keys) != 0 {
		t.Errorf("old segments %v left after their entries were trimmed", keys)
	}
	want(251, 380)
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
	want(301, 380)
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

// The Go and Lua definitions of a segment, and of the field naming a
// queue's first offset in the segments, agree.
func TestRedoSegmentSizeMatchesLua(t *testing.T) {
	if want := fmt.Sprintf("local REDO_SEG, REDO_SEG_V1 = %d, %d\n", redoSegmentSize, redoSegmentSizeV1); !strings.Contains(luaFile("redo_log.lua"), want) {
		t.Fatalf("lua/redo_log.lua does not define %q", want)
	}
	if want := fmt.Sprintf("local function redo_first_field(xk) return xk .. '%s' end\n", RedoFirstSuffix); !strings.Contains(luaFile("prelude.lua"), want) {
		t.Fatalf("lua/prelude.lua does not define %q", want)
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
