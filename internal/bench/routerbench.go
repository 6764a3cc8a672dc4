package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Router-throughput variants, in the order they run within a round.
const (
	VarDirect    = "direct go-redis (hand-routed)"
	VarDirectAP  = "direct go-redis AutoPipeline (hand-routed)"
	VarRouter    = "shardis Router.Client"
	VarSetPick   = "shardis Set.Pick"
	VarRing      = "go-redis Ring"
	VarTwemproxy = "go-redis → twemproxy"
)

// RouterResult holds the router-throughput series by op ("GET", "SET") and
// variant.
type RouterResult struct {
	Keys      int                           // keys the load picks from (Plan.Keys)
	ValueSize int                           // bytes per value (Plan.ValueSize)
	Conc      int                           // concurrent goroutines of the load (Plan.Conc)
	Variants  []string                      // the variants measured, in the report's order
	Series    map[string]map[string]*Series // op → variant → series
	Rounds    RoundStats                    // how the rounds went (kept, discarded)
}

// Get returns the series of one op and variant.
func (r *RouterResult) Get(op, variant string) *Series { return r.Series[op][variant] }

// Ratio returns the paired GET+SET throughput ratio num/den.
func (r *RouterResult) Ratio(num, den string) float64 {
	return PairedRatio(
		[]*Series{r.Get("GET", num), r.Get("SET", num)},
		[]*Series{r.Get("GET", den), r.Get("SET", den)})
}

// kvKeys returns n fixed keys, formatted once so the benchmark measures
// routing and I/O, not key formatting.
func kvKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "bench:key:" + strconv.Itoa(i)
	}
	return keys
}

// preload writes every key on every node, so a GET hits whichever node a
// variant's hash picks (go-redis Ring and twemproxy place keys with their
// own hashes): every variant reads the same 100-byte values.
func (c *Cluster) preload(ctx context.Context, keys []string, val string) error {
	for i, a := range c.Admin {
		for start := 0; start < len(keys); start += 1000 {
			end := min(start+1000, len(keys))
			_, err := a.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, k := range keys[start:end] {
					p.Set(ctx, k, val, 0)
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("preload %s: %w", nodeNames[i], err)
			}
		}
	}
	return nil
}

// RunRouter measures GET and SET throughput and latency of every variant,
// interleaved: each round runs GET for every variant, then SET for every
// variant, so drift of the machine hits all of them alike.
func RunRouter(ctx context.Context, c *Cluster, p Plan, progress func(string)) (*RouterResult, error) {
	keys := kvKeys(p.Keys)
	val := strings.Repeat("v", p.ValueSize)
	if err := c.Reset(ctx); err != nil {
		return nil, err
	}
	if err := c.preload(ctx, keys, val); err != nil {
		return nil, err
	}
	set, err := c.Router.Set(kvServer, kvRoute)
	if err != nil {
		return nil, err
	}
	nk := len(keys)
	// pick returns the client of each variant for a key.
	type picker func(key string) (redis.Cmdable, error)
	pickers := map[string]picker{
		VarDirect:   func(key string) (redis.Cmdable, error) { return c.Direct[c.HandRing.Home(key)], nil },
		VarDirectAP: func(key string) (redis.Cmdable, error) { return c.DirectAP[c.HandRing.Home(key)], nil },
		VarRouter:   func(key string) (redis.Cmdable, error) { return c.Router.Client(kvServer, kvRoute, key) },
		VarSetPick: func(key string) (redis.Cmdable, error) {
			n, err := set.Pick(key)
			if err != nil {
				return nil, err
			}
			return n.Client(), nil
		},
		VarRing:      func(string) (redis.Cmdable, error) { return c.Ring, nil },
		VarTwemproxy: func(string) (redis.Cmdable, error) { return c.TwemClient, nil },
	}
	variants := []string{VarDirect, VarDirectAP, VarRouter, VarRing, VarTwemproxy}
	if p.SetPick {
		variants = []string{VarDirect, VarDirectAP, VarRouter, VarSetPick, VarRing, VarTwemproxy}
	}
	ops := map[string]func(pick picker) Op{
		"GET": func(pick picker) Op {
			return func(w *Worker) error {
				key := keys[w.Rng.IntN(nk)]
				cl, err := pick(key)
				if err != nil {
					return err
				}
				if err := cl.Get(ctx, key).Err(); err != nil && !errors.Is(err, redis.Nil) {
					return err
				}
				return nil
			}
		},
		"SET": func(pick picker) Op {
			return func(w *Worker) error {
				key := keys[w.Rng.IntN(nk)]
				cl, err := pick(key)
				if err != nil {
					return err
				}
				return cl.Set(ctx, key, val, 0).Err()
			}
		},
	}
	res := &RouterResult{Keys: p.Keys, ValueSize: p.ValueSize, Conc: p.Conc, Variants: variants,
		Series: map[string]map[string]*Series{}}
	for _, op := range []string{"GET", "SET"} {
		res.Series[op] = map[string]*Series{}
		for _, v := range variants {
			res.Series[op][v] = &Series{Name: v}
		}
	}
	load := NewLoad(p.Conc, 1)
	// Warm-up: open the pools and let every process reach steady state.
	for _, v := range variants {
		load.Run(p.Warmup, ops["GET"](pickers[v]))
	}
	st, err := runRounds(p, c.Meter, progress, "router", func(int) (func(), string, error) {
		got := map[string]map[string]Sample{}
		for _, op := range []string{"GET", "SET"} {
			got[op] = map[string]Sample{}
			for _, v := range variants {
				got[op][v] = c.measure(load, p.Round, ops[op](pickers[v]))
			}
		}
		commit := func() {
			for op, m := range got {
				for v, s := range m {
					res.Series[op][v].Add(s)
				}
			}
		}
		g := got["GET"]
		return commit, fmt.Sprintf("GET ops/s router %.0f, direct %.0f, direct auto-pipelined %.0f, ring %.0f, twemproxy %.0f",
			g[VarRouter].OpsPerSec(), g[VarDirect].OpsPerSec(), g[VarDirectAP].OpsPerSec(), g[VarRing].OpsPerSec(), g[VarTwemproxy].OpsPerSec()), nil
	})
	res.Rounds = st
	if err != nil {
		return res, err
	}
	return res, nil
}
