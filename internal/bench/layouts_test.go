package bench

import (
	"context"
	"strings"
	"testing"

	"github.com/shardis/shardis/internal/redistest"
)

// On a real node the yardstick orders the layouts as Redis's encodings
// say it must: a packed string under a hash of fields, a listpack bucket
// under a key per record, a bucketed listpack sorted set under one big
// sorted set; and it leaves no key behind.
func TestRunLayoutsOnNode(t *testing.T) {
	c := redistest.Start(t, redistest.Options{}).Client(t)
	ctx := context.Background()
	got, err := RunLayouts(ctx, c, func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]float64{}
	for _, l := range got {
		switch {
		case strings.HasPrefix(l.Layout, "one key per record: a hash"):
			by["hash"] = l.Bytes
		case strings.Contains(l.Layout, "string, with a TTL"):
			by["string"] = l.Bytes
		case strings.Contains(l.Layout, "listpack encoding"):
			by["bucket"] = l.Bytes
		case strings.HasPrefix(l.Layout, "an index entry: one sorted set"):
			by["zset"] = l.Bytes
		case strings.HasPrefix(l.Layout, "an index entry: bucketed"):
			by["zbucket"] = l.Bytes
		}
	}
	if len(by) != 5 {
		t.Fatalf("layouts %+v: want the five this test compares", got)
	}
	for _, lt := range [][2]string{{"string", "hash"}, {"bucket", "string"}, {"zbucket", "zset"}} {
		if by[lt[0]] <= 0 || by[lt[0]] >= by[lt[1]] {
			t.Errorf("%s %.0f B, %s %.0f B: want 0 < %[1]s < %[3]s", lt[0], by[lt[0]], lt[1], by[lt[1]])
		}
	}
	if n, err := c.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Errorf("DBSIZE after the yardstick: %d, %v; want 0", n, err)
	}
}
