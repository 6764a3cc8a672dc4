package cache

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// counters counts what a Cache did since New.
type counters struct {
	hits, misses, fills, negativeHits, throttled, l1Hits, invalidations atomic.Int64

	reads map[string]*atomic.Int64 // node → values read there; the map is fixed at New
}

// Snapshot is a copy of a Cache's counters.
type Snapshot struct {
	// Hits counts Gets answered by a value read from Redis (L1 misses
	// that found the key there, not-found markers excluded).
	Hits int64
	// Misses counts Gets that found neither a value nor a not-found
	// marker in Redis and so went on to a fill.
	Misses int64
	// Fills counts loader calls, whether from a fill or from the
	// FallbackToLoader path when no copy of the key was usable.
	Fills int64
	// NegativeHits counts Gets answered by a not-found marker read from
	// Redis.
	NegativeHits int64
	// Throttled counts loader calls refused by the loader rate limit
	// (LoaderRate), including those refused because no usable node
	// keeps the bucket or it could not be read (the limit fails closed).
	Throttled int64
	// L1Hits counts Gets answered by the in-process L1 without reading
	// Redis (values and not-found markers alike).
	L1Hits int64
	// Invalidations counts L1 invalidation messages received over pub/sub.
	Invalidations int64
	// NodeReads counts values read from Redis per node.
	NodeReads map[string]int64
}

func (s *counters) nodeReads(name string) {
	if r := s.reads[name]; r != nil {
		r.Add(1)
	}
}

// Stats returns a copy of the counters. Fills counts loader calls.
func (c *Cache) Stats() Snapshot {
	s := &c.stats
	out := Snapshot{Hits: s.hits.Load(), Misses: s.misses.Load(), Fills: s.fills.Load(), NegativeHits: s.negativeHits.Load(),
		Throttled: s.throttled.Load(), L1Hits: s.l1Hits.Load(), Invalidations: s.invalidations.Load(), NodeReads: map[string]int64{}}
	for k, v := range s.reads {
		out.NodeReads[k] = v.Load()
	}
	return out
}

// cacheMetrics are the names (shardis_cache_<name>_total) and help of a
// cache's counters, in the order descs returns them.
var cacheMetrics = [...]struct{ name, help string }{
	{"hits", "Reads answered by Redis with a value."},
	{"misses", "Reads that found nothing in Redis."},
	{"fills", "Loader calls."},
	{"negative_hits", "Reads answered by a not-found marker."},
	{"throttled", "Misses refused by the loader rate limit."},
	{"l1_hits", "Reads answered by the in-process L1."},
	{"invalidations", "L1 invalidations received."},
}

// descs returns the descriptors of the cache's counters, in cacheMetrics'
// order. The label cache=Options.Name is a constant label of each, so the
// collectors of caches with different names are different collectors to
// a registry: each can be registered beside the others (with a variable
// label, their identical descriptors made a second cache's registration
// fail as a duplicate).
func (c *Cache) descs() []*prometheus.Desc {
	out := make([]*prometheus.Desc, len(cacheMetrics))
	for i, m := range cacheMetrics {
		out[i] = prometheus.NewDesc("shardis_cache_"+m.name+"_total", m.help, nil, prometheus.Labels{"cache": c.opts.Name})
	}
	return out
}

// Collector returns a Prometheus collector of the cache's counters,
// labelled cache=Options.Name. Register it where you expose metrics; the
// collectors of caches with different names can share a registry, while
// a second cache of the same name is refused by the registry
// (AlreadyRegisteredError), since their series would collide.
func (c *Cache) Collector() prometheus.Collector { return &collector{c: c, descs: c.descs()} }

type collector struct {
	c     *Cache
	descs []*prometheus.Desc // cacheMetrics' order
}

func (k *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range k.descs {
		ch <- d
	}
}

func (k *collector) Collect(ch chan<- prometheus.Metric) {
	s := k.c.Stats()
	for i, v := range [len(cacheMetrics)]int64{s.Hits, s.Misses, s.Fills, s.NegativeHits, s.Throttled, s.L1Hits, s.Invalidations} {
		ch <- prometheus.MustNewConstMetric(k.descs[i], prometheus.CounterValue, float64(v))
	}
}
