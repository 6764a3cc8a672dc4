package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/cache"
	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redisproc"
	"github.com/shardis/shardis/router"
)

// Cache variants: a Zipf read workload (s = 1.1 over 10 000 keys, 5 %
// writes) through cache.Get (single flight, hot-key replicas for the 10
// hottest keys), and through the router's plain client with a
// hand-written fill (GET, on a miss load and SET; a write deletes).
const (
	VarCacheGet   = "cache.Get (replicas for hot keys)"
	VarCachePlain = "Router.Client().Get + hand-written fill"
)

// CacheResult is the read-path cache comparison.
type CacheResult struct {
	Conc     int                // concurrent goroutines of the load (Plan.Conc)
	Variants []string           // the variants measured, in the report's order
	Series   map[string]*Series // each variant's samples over the rounds, by variant name
	Rounds   RoundStats         // how the rounds went (kept, discarded)
	// Loads counts loader calls per variant over all rounds.
	Loads map[string]int64
	// NodeShare is each node's share of the hottest key's reads through
	// cache.Get.
	NodeShare map[string]float64
	// HotSpread is max/min of NodeShare (1 is an even spread).
	HotSpread float64
	// StormLoads is the loader calls when 200 goroutines over 3
	// instances Get one missing key at once, per variant.
	StormLoads map[string]int64
}

// RunCache starts three redis-server nodes and measures the variants.
func RunCache(ctx context.Context, p Plan, log *slog.Logger, progress func(string)) (*CacheResult, error) {
	cfg := config.Default()
	cfg.Nodes = map[string]config.Node{}
	var srvs []*redisproc.Server
	defer func() {
		for _, s := range srvs {
			_ = s.Close()
		}
	}()
	names := []string{"c1", "c2", "c3"}
	for _, n := range names {
		s, err := redisproc.Start(redisproc.Options{KillWithParent: true})
		if err != nil {
			return nil, err
		}
		srvs = append(srvs, s)
		cfg.Nodes[n] = config.Node{Addr: s.Addr(), Weight: 1}
	}
	cfg.Servers = map[string]config.Server{"cache": {OnNodeDown: config.OnNodeDownFail, Routes: map[string][]string{"r": names}}}
	if err := cfg.ValidateRouter(); err != nil {
		return nil, err
	}
	var rtrs []*router.Router
	for i := 0; i < 3; i++ {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		r, err := router.New(rctx, &cfg, router.Options{KeepData: cfg.KeepData(), Logger: log})
		cancel()
		if err != nil {
			return nil, err
		}
		defer r.Close()
		rtrs = append(rtrs, r)
	}
	const nKeys = 10000
	hot := map[string]bool{}
	keys := make([]string, nKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("item:%d", i)
		if i < 10 {
			hot[keys[i]] = true
		}
	}
	c, err := cache.New(rtrs[0], "cache", "r", cache.Options{TTL: time.Minute, Logger: log,
		Replicas: func(k string) int {
			if hot[k] {
				return 3
			}
			return 1
		}})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var loads [2]atomic.Int64
	loader := func(i int) cache.Loader {
		return func(ctx context.Context, key string) ([]byte, error) {
			loads[i].Add(1)
			return []byte("value of " + key), nil
		}
	}
	cacheLoad, plainLoad := loader(0), loader(1)
	zipf := func(w *Worker) string {
		// rand.Zipf needs a *rand.Rand of math/rand; draw by inversion of
		// a precomputed CDF instead.
		return keys[zipfIndex(w.Rng.Float64())]
	}
	set, _ := rtrs[0].Set("cache", "r")
	plainGet := func(ctx context.Context, key string) error {
		n, err := set.Pick(key)
		if err != nil {
			return err
		}
		_, err = n.Client().Get(ctx, key).Bytes()
		if err == redis.Nil {
			v, _ := plainLoad(ctx, key)
			return n.Client().Set(ctx, key, v, time.Minute).Err()
		}
		return err
	}
	ops := map[string]Op{
		VarCacheGet: func(w *Worker) error {
			k := zipf(w)
			if w.Rng.IntN(100) < 5 {
				return c.Invalidate(ctx, k)
			}
			_, err := c.Get(ctx, k, cacheLoad)
			return err
		},
		VarCachePlain: func(w *Worker) error {
			k := zipf(w)
			if w.Rng.IntN(100) < 5 {
				n, err := set.Pick(k)
				if err != nil {
					return err
				}
				return n.Client().Del(ctx, k).Err()
			}
			return plainGet(ctx, k)
		},
	}
	variants := []string{VarCachePlain, VarCacheGet}
	res := &CacheResult{Conc: p.Conc, Variants: variants, Series: map[string]*Series{}, Loads: map[string]int64{},
		StormLoads: map[string]int64{}, NodeShare: map[string]float64{}}
	for _, v := range variants {
		res.Series[v] = &Series{Name: v}
	}
	pids := func() []int {
		var out []int
		for _, s := range srvs {
			out = append(out, s.Pid())
		}
		return out
	}
	load := NewLoad(p.Conc, 7)
	for _, v := range variants {
		load.Run(p.Warmup, ops[v])
	}
	loads[0].Store(0)
	loads[1].Store(0)
	st, err := runRounds(p, NewCPUMeter(pids), progress, "cache", func(int) (func(), string, error) {
		got := map[string]Sample{}
		for _, v := range variants {
			got[v] = load.Run(p.Round, ops[v])
		}
		return func() {
			for v, s := range got {
				res.Series[v].Add(s)
			}
		}, fmt.Sprintf("reads/s plain %.0f, cache.Get %.0f", got[VarCachePlain].OpsPerSec(), got[VarCacheGet].OpsPerSec()), nil
	})
	res.Rounds = st
	if err != nil {
		return res, err
	}
	res.Loads[VarCacheGet], res.Loads[VarCachePlain] = loads[0].Load(), loads[1].Load()

	// The hottest key's reads per node, through cache.Get.
	hc, _ := cache.New(rtrs[1], "cache", "r", cache.Options{TTL: time.Minute, Logger: log, Replicas: func(string) int { return 3 }})
	defer hc.Close()
	for i := 0; i < 3000; i++ {
		if _, err := hc.Get(ctx, keys[0], cacheLoad); err != nil {
			return res, err
		}
	}
	hotReads := hc.Stats().NodeReads
	minS, maxS := math.Inf(1), 0.0
	var total int64
	for _, v := range hotReads {
		total += v
	}
	for _, n := range names {
		share := float64(hotReads[n]) / float64(max(total, 1))
		res.NodeShare[n] = share
		minS, maxS = min(minS, share), max(maxS, share)
	}
	if minS > 0 {
		res.HotSpread = maxS / minS
	}

	// Miss storm: 200 concurrent Gets of one missing key over 3 instances.
	var insts []*cache.Cache
	for _, r := range rtrs {
		ci, err := cache.New(r, "cache", "r", cache.Options{Name: "storm", FillWait: 5 * time.Second, Logger: log})
		if err != nil {
			return res, err
		}
		defer ci.Close()
		insts = append(insts, ci)
	}
	var storm [2]atomic.Int64
	slow := func(i int) cache.Loader {
		return func(ctx context.Context, key string) ([]byte, error) {
			storm[i].Add(1)
			time.Sleep(20 * time.Millisecond) // the database
			return []byte("v"), nil
		}
	}
	var wg sync.WaitGroup
	var stormErr atomic.Value
	for i := 0; i < 200; i++ {
		wg.Add(2)
		go func(i int) {
			defer wg.Done()
			if _, err := insts[i%3].Get(ctx, "storm-key", slow(0)); err != nil {
				stormErr.Store(err)
			}
		}(i)
		go func(i int) { // the hand-written fill
			defer wg.Done()
			n, err := set.Pick("storm-plain")
			if err != nil {
				stormErr.Store(err)
				return
			}
			if _, err := n.Client().Get(ctx, "storm-plain").Bytes(); errors.Is(err, redis.Nil) {
				v, _ := slow(1)(ctx, "storm-plain")
				_ = n.Client().Set(ctx, "storm-plain", v, time.Minute).Err()
			}
		}(i)
	}
	wg.Wait()
	if e, _ := stormErr.Load().(error); e != nil {
		return res, e
	}
	res.StormLoads[VarCacheGet], res.StormLoads[VarCachePlain] = storm[0].Load(), storm[1].Load()
	return res, nil
}

// zipfCDF is the cumulative distribution of a Zipf law with s = 1.1 over
// the bench's 10 000 keys.
var zipfCDF = func() []float64 {
	const n, s = 10000, 1.1
	cdf := make([]float64, n)
	sum := 0.0
	for i := range cdf {
		sum += 1 / math.Pow(float64(i+1), s)
		cdf[i] = sum
	}
	for i := range cdf {
		cdf[i] /= sum
	}
	return cdf
}()

func zipfIndex(u float64) int {
	lo, hi := 0, len(zipfCDF)-1
	for lo < hi {
		mid := (lo + hi) / 2
		if zipfCDF[mid] < u {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// CacheTable renders the cache comparison as markdown.
func CacheTable(c *CacheResult) string {
	var b strings.Builder
	b.WriteString("| Zipf reads, 5 % writes | ops/s | p50 | p99 | loader calls |\n| --- | ---: | ---: | ---: | ---: |\n")
	for _, v := range c.Variants {
		s := c.Series[v]
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %d |\n", v, fmtOps(s.Ops()), fmtDur(s.P50()), fmtDur(s.P99()), c.Loads[v])
	}
	b.WriteString(failures(seriesOf(c.Variants, c.Series)))
	fmt.Fprintf(&b, "\nThe hottest key with 3 replicas, 3 000 reads through cache.Get: node shares")
	for _, n := range []string{"c1", "c2", "c3"} {
		fmt.Fprintf(&b, " %s %.1f %%", n, 100*c.NodeShare[n])
	}
	fmt.Fprintf(&b, " (max/min **%.2f**). A miss storm (200 concurrent Gets of one missing key over 3 instances, a 20 ms loader): "+
		"**%d** loader call(s) through cache.Get, %d with the hand-written fill.\n", c.HotSpread, c.StormLoads[VarCacheGet], c.StormLoads[VarCachePlain])
	return b.String()
}
