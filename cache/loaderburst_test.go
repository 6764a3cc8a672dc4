package cache_test

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/shardis/shardis/cache"
)

// LoaderBurst's default is LoaderRate rounded up, at most 2³¹-1, as its
// doc says: with LoaderRate 1.5 a fresh bucket lets 2 loads through at
// once (the third comes 2/3 s later), and with a huge rate the bucket
// holds 2³¹-1 tokens. Found by a review: the default was int(LoaderRate),
// so 1.5 gave a burst of 1, and
// a rate past int's range overflowed to a burst of 1.
func TestLoaderBurstDefaultIsTheRateRoundedUp(t *testing.T) {
	e := newEnv(t, 1)
	c := e.caches(cache.Options{LoaderRate: 1.5})[0]
	loads, throttled := 0, 0
	for i := 0; i < 3; i++ {
		_, err := c.Get(e.ctx, "sku-"+strconv.Itoa(i), func(context.Context, string) ([]byte, error) { loads++; return []byte("v"), nil })
		if errors.Is(err, cache.ErrThrottled) {
			throttled++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if loads != 2 || throttled != 1 {
		t.Errorf("3 misses at once with LoaderRate 1.5: %d loads, %d throttled; want a burst of 2: 2 and 1", loads, throttled)
	}

	huge := e.caches(cache.Options{Name: "huge", LoaderRate: 1e300})[0]
	if _, err := huge.Get(e.ctx, "sku", func(context.Context, string) ([]byte, error) { return []byte("v"), nil }); err != nil {
		t.Fatal(err)
	}
	const bucket = "shardis:cache:huge:cache:r:bucket"
	set, _ := e.rtrs[0].Set("cache", "r")
	tokens, err := set.Candidates(bucket)[0].Client().HGet(e.ctx, bucket, "tokens").Result()
	if err != nil || tokens != strconv.Itoa(1<<31-2) {
		t.Errorf("the bucket of LoaderRate 1e300 after one load holds %q tokens (%v); want 2³¹-1 less the one taken", tokens, err)
	}
}
