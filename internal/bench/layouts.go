package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Record layouts, measured (the memory section's yardstick): what one
// record costs a node in each structure a pending order's records could
// take, on the same node, with values the size of shardis's. It answers
// "what would a cheaper structure save" with figures, before anyone
// rebuilds the protocol around one (issue 25: "retention without a
// key-with-TTL per order where a cheaper structure serves (measure, e.g.,
// a bucketed hash)"). Each layout writes layoutRecords records under
// layoutPrefix and reads used_memory before and after (client buffers
// left out, lazy frees waited for); the records are deleted after.
const (
	layoutRecords = 4000
	layoutBucket  = 100 // records per bucket: under Redis's default *-max-listpack-entries (128)
	// layoutRedoSegment is how many entries a redo-log segment holds
	// (inventory/redolog.go).
	layoutRedoSegment = 32
	layoutPrefix      = "bench:layout:"
	// layoutValue is the size of a packed 1-item order record (status,
	// token, digest, deadline, creation time, one part), layoutSmall one
	// under hash-max-listpack-value (64), layoutMember a part id of a
	// short order id ("m1234|" + 12-hex token + "|0").
	layoutValue  = 74
	layoutSmall  = 60
	layoutMember = 20
	layoutTTL    = time.Hour // the records' TTL: none expires during the measure
)

// LayoutBytes is what one record costs in one layout.
type LayoutBytes struct {
	// Layout describes the candidate structure, e.g. "one key per
	// record: a 74-byte string, with a TTL".
	Layout string
	// Bytes is used_memory's growth per record (client buffers excluded),
	// the structure's own growth (its hash tables, its listpacks) shared
	// over the records.
	Bytes float64
}

// layout is one candidate: write adds record i to the pipeline.
type layout struct {
	name  string
	write func(ctx context.Context, p redis.Pipeliner, i int)
}

func layoutKey(i int) string { return layoutPrefix + "k:" + strconv.Itoa(i) }

func layoutBucketKey(i int) string {
	return layoutPrefix + "b:" + strconv.Itoa(i%(layoutRecords/layoutBucket))
}

func layoutMemberOf(i int) string {
	s := "m" + strconv.Itoa(10000+i) + "|4a12bbfe459f|0"
	return (s + strings.Repeat("x", layoutMember))[:layoutMember]
}

func layoutValueOf(i, n int) string {
	s := strconv.Itoa(i) + "\x1f"
	return (s + strings.Repeat("v", n))[:n]
}

var layouts = []layout{
	{"one key per record: a hash of 6 fields (an order record's layout before issue 25), with a TTL", func(ctx context.Context, p redis.Pipeliner, i int) {
		k := layoutKey(i)
		p.HSet(ctx, k, "status", "reserved", "token", "aaa5cbb80d22", "digest", "fb84914a972aac1a",
			"deadline", "1795790992953", "created", "1795787392953", "parts", "~aaa5cbb80d22s0n1as123")
		p.Expire(ctx, k, layoutTTL)
	}},
	{fmt.Sprintf("one key per record: a %d-byte string, with a TTL", layoutValue), func(ctx context.Context, p redis.Pipeliner, i int) {
		p.Set(ctx, layoutKey(i), layoutValueOf(i, layoutValue), layoutTTL)
	}},
	{fmt.Sprintf("one key per record: a %d-byte string, no TTL", layoutValue), func(ctx context.Context, p redis.Pipeliner, i int) {
		p.Set(ctx, layoutKey(i), layoutValueOf(i, layoutValue), 0)
	}},
	{fmt.Sprintf("a field of a bucketed hash (%d per bucket), %d-byte value: hash table encoding (> 64 bytes)", layoutBucket, layoutValue), func(ctx context.Context, p redis.Pipeliner, i int) {
		p.HSet(ctx, layoutBucketKey(i), "m"+strconv.Itoa(10000+i), layoutValueOf(i, layoutValue))
	}},
	{fmt.Sprintf("a field of a bucketed hash (%d per bucket), %d-byte value: listpack encoding", layoutBucket, layoutSmall), func(ctx context.Context, p redis.Pipeliner, i int) {
		p.HSet(ctx, layoutBucketKey(i), "m"+strconv.Itoa(10000+i), layoutValueOf(i, layoutSmall))
	}},
	{fmt.Sprintf("an index entry: one sorted set (skiplist), %d-byte member (the pending index; a redo-log queue before its segments)", layoutMember), func(ctx context.Context, p redis.Pipeliner, i int) {
		p.ZAdd(ctx, layoutPrefix+"z", redis.Z{Score: float64(1795790993947 + i), Member: layoutMemberOf(i)})
	}},
	{fmt.Sprintf("an index entry: bucketed sorted sets (%d per bucket, listpack), %d-byte member (a redo-log queue's segments of the release before)", layoutBucket, layoutMember), func(ctx context.Context, p redis.Pipeliner, i int) {
		// consecutive records share a bucket, as a log's offsets or a
		// deadline's time slice would
		p.ZAdd(ctx, layoutPrefix+"zb:"+strconv.Itoa(i/layoutBucket), redis.Z{Score: float64(1795790993947 + i), Member: layoutMemberOf(i)})
	}},
	{fmt.Sprintf("an index entry: bucketed sorted sets (%d per bucket, listpack), %d-byte member (a redo-log queue's segments)", layoutRedoSegment, layoutMember), func(ctx context.Context, p redis.Pipeliner, i int) {
		p.ZAdd(ctx, layoutPrefix+"zs:"+strconv.Itoa(i/layoutRedoSegment), redis.Z{Score: float64(1795790993947 + i), Member: layoutMemberOf(i)})
	}},
}

// RunLayouts measures every layout on the node of admin.
func RunLayouts(ctx context.Context, admin *redis.Client, progress func(string)) ([]LayoutBytes, error) {
	out := make([]LayoutBytes, 0, len(layouts))
	for _, l := range layouts {
		b, err := measureLayout(ctx, admin, l)
		if err != nil {
			return nil, fmt.Errorf("layout %q: %w", l.name, err)
		}
		out = append(out, LayoutBytes{Layout: l.name, Bytes: b})
		progress(fmt.Sprintf("layout: %.0f B per record: %s", b, l.name))
	}
	return out, nil
}

// measureLayout writes layoutRecords records of l and returns used_memory's
// growth per record; it deletes them before it returns.
func measureLayout(ctx context.Context, admin *redis.Client, l layout) (float64, error) {
	if err := dropLayoutKeys(ctx, admin); err != nil {
		return 0, err
	}
	before, err := usedMemory(ctx, []*redis.Client{admin})
	if err != nil {
		return 0, err
	}
	for first := 0; first < layoutRecords; first += 500 {
		p := admin.Pipeline()
		for i := first; i < min(first+500, layoutRecords); i++ {
			l.write(ctx, p, i)
		}
		if _, err := p.Exec(ctx); err != nil {
			return 0, err
		}
	}
	after, err := usedMemory(ctx, []*redis.Client{admin})
	if err != nil {
		return 0, err
	}
	return float64(after-before) / layoutRecords, dropLayoutKeys(ctx, admin)
}

// dropLayoutKeys deletes every key under layoutPrefix.
func dropLayoutKeys(ctx context.Context, admin *redis.Client) error {
	iter := admin.Scan(ctx, 0, layoutPrefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return fmt.Errorf("SCAN: %w", err)
	}
	for len(keys) > 0 {
		n := min(len(keys), 1000)
		if err := admin.Del(ctx, keys[:n]...).Err(); err != nil {
			return err
		}
		keys = keys[n:]
	}
	return nil
}

// LayoutsTable renders the layouts' figures with what they are for.
func LayoutsTable(ls []LayoutBytes) string {
	var b strings.Builder
	fmt.Fprintf(&b, "What one record costs a node in each structure a pending order's records could take "+
		"(used_memory's growth over %d records on one node, values the size of shardis's, `internal/bench/layouts.go`). "+
		"A yardstick for the next layout, not a measure of shardis: the per-order figure above is.\n\n", layoutRecords)
	b.WriteString("| layout | bytes per record |\n| --- | ---: |\n")
	for _, l := range ls {
		fmt.Fprintf(&b, "| %s | %.0f |\n", l.Layout, l.Bytes)
	}
	return b.String()
}
