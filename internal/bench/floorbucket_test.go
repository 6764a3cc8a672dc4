package bench

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestFloorBucket holds the bucketed-record floor (floorbucket.go) to its
// check on a real node, then runs 100 concurrent one-unit orders of one
// minute against 60 units: exactly 60 are taken, each once, with redo
// offsets 1..60, a deadline entry and a field each in the minute's hash,
// which has the retention; 40 are short; no key per order is written; a
// taken order id is refused when stock is back.
func TestFloorBucket(t *testing.T) {
	nodes, ctx := benchNodes(t)
	f := newFloorBucketBatcher(ctx, nodes[0])
	if err := f.checkBucket(ctx); err != nil {
		t.Fatal(err)
	}
	c := f.n.Client()
	if keys, err := c.Keys(ctx, "floor:*").Result(); err != nil || len(keys) == 0 {
		t.Fatalf("keys after the check: %v (%v)", keys, err)
	} else if err := c.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	if err := f.load(ctx, floorHotSKU, 60); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	take := func(i int) error {
		id, minute := floorBucketID(now, "o"+strconv.Itoa(i))
		return floorBucketOrder(f, id, minute, floorHotSKU)
	}
	errs := takeHot60(t, f, take)
	_, minute := floorBucketID(now, "")
	bk := floorBucketKey(minute)
	recs, err := c.HGetAll(ctx, bk).Result()
	if err != nil || len(recs) != 60 {
		t.Fatalf("%s holds %d records (%v), want 60", bk, len(recs), err)
	}
	for id, v := range recs {
		if !strings.HasPrefix(id, strconv.FormatInt(minute, 10)+".o") || v != "reserved|"+f.n.Name()+":"+floorHotSKU+":1" {
			t.Fatalf("record %q = %q", id, v)
		}
	}
	if ttl, err := c.TTL(ctx, bk).Result(); err != nil || ttl <= 0 {
		t.Fatalf("%s's TTL is %v (%v), want the retention", bk, ttl, err)
	}
	if n, err := c.ZCard(ctx, floorPending).Result(); err != nil || n != 60 {
		t.Fatalf("pending index holds %d (%v), want 60", n, err)
	}
	keys, err := c.Keys(ctx, "floor:*").Result()
	if err != nil || len(keys) != 5 { // the stock, the offsets, the redo queue, the pending index, the minute's hash
		t.Fatalf("keys written: %v (%v), want the stock, the offsets, the redo queue, the pending index and %s", keys, err, bk)
	}
	retakeRefused(t, f, errs, take)
}
