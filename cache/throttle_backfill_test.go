package cache_test

import (
	"context"
	"errors"
	"testing"

	"github.com/shardis/shardis/cache"
)

// With Backfill, a miss throttled because the loader bucket could not be
// read (here WRONGTYPE: the bucket's key is a string) is queued on the
// backfill stream like any other throttled miss (Options.Backfill: "queues
// throttled misses"); it was counted as throttled but not queued, so
// nothing filled it later.
func TestMissThrottledByAnUnreadableBucketIsQueued(t *testing.T) {
	e := newEnv(t, 1)
	c := e.caches(cache.Options{LoaderRate: 100, Backfill: true})[0]
	const bucket = "shardis:cache:default:cache:r:bucket"
	const stream = "shardis:cache:default:cache:r:backfill"
	for _, s := range e.srv {
		if err := s.Client(t).Set(e.ctx, bucket, "not a bucket", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	_, err := c.Get(e.ctx, "miss", func(context.Context, string) ([]byte, error) { return []byte("v"), nil })
	if !errors.Is(err, cache.ErrThrottled) || c.Stats().Throttled != 1 {
		t.Fatalf("Get with an unreadable bucket = %v, %d throttled; want ErrThrottled, 1", err, c.Stats().Throttled)
	}
	var queued []string
	for _, s := range e.srv {
		msgs, err := s.Client(t).XRange(e.ctx, stream, "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			k, _ := m.Values["key"].(string)
			queued = append(queued, k)
		}
	}
	if len(queued) != 1 || queued[0] != "miss" {
		t.Fatalf("backfill streams hold %q, want the throttled miss [miss]", queued)
	}
}
