package cache_test

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/shardis/shardis/cache"
)

// TestReviewMetricsTwoCachesOneRegistry registers the collectors of two
// caches with different Options.Name (what Name is for: caches sharing a
// route) on one registry, as the README's
// prometheus.MustRegister(c.Collector()) does for each cache, and expects
// both caches' series, labelled cache=<Name>, to pass promlint.
func TestReviewMetricsTwoCachesOneRegistry(t *testing.T) {
	e := newEnv(t, 1)
	reg := prometheus.NewRegistry()
	load := func(context.Context, string) ([]byte, error) { return nil, cache.ErrNotFound }
	for _, name := range []string{"product", "price"} {
		c, err := cache.New(e.rtrs[0], "cache", "r", cache.Options{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		if _, err := c.Get(e.ctx, "k", load); !errors.Is(err, cache.ErrNotFound) {
			t.Fatalf("Get: %v, want ErrNotFound", err)
		}
		if err := reg.Register(c.Collector()); err != nil {
			t.Fatalf("registering the collector of cache %q: %v", name, err)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "shardis_cache_fills_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "cache" {
					got[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	if got["product"] != 1 || got["price"] != 1 {
		t.Fatalf("shardis_cache_fills_total by cache = %v, want product 1 and price 1", got)
	}
}
