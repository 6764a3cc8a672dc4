package cache_test

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/shardis/shardis/cache"
)

// A LoaderRate that is not a finite number is not a limit: New must refuse it
// (as it refuses a negative one) rather than build a cache whose bucket
// script computes NaN tokens and throttles every miss forever.
func TestReview6LoaderRateNaNIsRefused(t *testing.T) {
	e := newEnv(t, 1)
	for _, rate := range []float64{math.NaN(), math.Inf(1)} {
		c, err := cache.New(e.rtrs[0], "cache", "r", cache.Options{LoaderRate: rate})
		if err != nil {
			continue
		}
		t.Cleanup(c.Close)
		_, gerr := c.Get(e.ctx, "k", func(context.Context, string) ([]byte, error) { return []byte("v"), nil })
		t.Errorf("New accepted LoaderRate %v; a Get then returned %v (throttled: %v)", rate, gerr, errors.Is(gerr, cache.ErrThrottled))
	}
}
