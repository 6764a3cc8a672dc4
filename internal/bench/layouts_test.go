package bench

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
	// Nothing expired while measured (a TTL of a few µs, as a bare
	// integer passed for a time.Duration gives, would empty the keys).
	if err := measureKeysKept(ctx, c); err != nil {
		t.Error(err)
	}
	if n, err := c.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Errorf("DBSIZE after the yardstick: %d, %v; want 0", n, err)
	}
}

// measureKeysKept writes every layout's records and checks that a key
// per record layout's first and last records exist and, in a layout with
// a TTL, expire in more than a minute.
func measureKeysKept(ctx context.Context, c *redis.Client) error {
	for _, l := range layouts {
		p := c.Pipeline()
		for i := range layoutRecords {
			l.write(ctx, p, i)
		}
		if _, err := p.Exec(ctx); err != nil {
			return err
		}
		for _, k := range []string{layoutKey(0), layoutKey(layoutRecords - 1)} {
			if !strings.HasPrefix(l.name, "one key per record") {
				break
			}
			ttl, err := c.PTTL(ctx, k).Result()
			switch {
			case err != nil:
				return err
			case ttl == -2*time.Nanosecond || ttl == -2*time.Millisecond:
				return fmt.Errorf("layout %q: record %s is gone", l.name, k)
			case strings.Contains(l.name, "with a TTL") && ttl < time.Minute:
				return fmt.Errorf("layout %q: record %s expires in %v", l.name, k, ttl)
			}
		}
		if err := dropLayoutKeys(ctx, c); err != nil {
			return err
		}
	}
	return nil
}
