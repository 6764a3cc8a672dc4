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
	Hits, Misses, Fills, NegativeHits, Throttled, L1Hits, Invalidations int64
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

var cacheDescs = map[string]*prometheus.Desc{}

func desc(name, help string) *prometheus.Desc {
	d := prometheus.NewDesc("shardis_cache_"+name+"_total", help, []string{"cache"}, nil)
	cacheDescs[name] = d
	return d
}

var (
	descHits          = desc("hits", "Reads answered by Redis with a value.")
	descMisses        = desc("misses", "Reads that found nothing in Redis.")
	descFills         = desc("fills", "Loader calls.")
	descNegativeHits  = desc("negative_hits", "Reads answered by a not-found marker.")
	descThrottled     = desc("throttled", "Misses refused by the loader rate limit.")
	descL1Hits        = desc("l1_hits", "Reads answered by the in-process L1.")
	descInvalidations = desc("invalidations", "L1 invalidations received.")
)

// Collector returns a Prometheus collector of the cache's counters,
// labelled cache=Options.Name. Register it where you expose metrics.
func (c *Cache) Collector() prometheus.Collector { return (*collector)(c) }

type collector Cache

func (k *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range cacheDescs {
		ch <- d
	}
}

func (k *collector) Collect(ch chan<- prometheus.Metric) {
	s := (*Cache)(k).Stats()
	name := k.opts.Name
	for d, v := range map[*prometheus.Desc]int64{descHits: s.Hits, descMisses: s.Misses, descFills: s.Fills,
		descNegativeHits: s.NegativeHits, descThrottled: s.Throttled, descL1Hits: s.L1Hits, descInvalidations: s.Invalidations} {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), name)
	}
}
