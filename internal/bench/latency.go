package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/inventory"
)

// Single-caller latency variants: the same build and nodes, one goroutine,
// with shardis's auto-pipelining on (the default) and off.
const (
	VarLatGetOn   = "GET, 1 goroutine, auto-pipelining on"
	VarLatGetOff  = "GET, 1 goroutine, auto-pipelining off"
	VarLatResOn   = "1-item reserve, 1 goroutine, auto-pipelining on"
	VarLatResOff  = "1-item reserve, 1 goroutine, auto-pipelining off"
	latencySKU    = "lat-0"
	latencyKeyLen = 1000
)

// LatencyResult holds the single-caller series by variant.
type LatencyResult struct {
	Variants []string
	Series   map[string]*Series
	Rounds   RoundStats
}

// Ratio returns the median over rounds of p50(on)/p50(off) of one op
// ("GET" or "reserve").
func (r *LatencyResult) Ratio(op string) float64 {
	on, off := r.Series[VarLatGetOn], r.Series[VarLatGetOff]
	if op == "reserve" {
		on, off = r.Series[VarLatResOn], r.Series[VarLatResOff]
	}
	var ratios []float64
	for i := range min(len(on.Samples), len(off.Samples)) {
		if d := off.Samples[i].P50; d > 0 {
			ratios = append(ratios, float64(on.Samples[i].P50)/float64(d))
		}
	}
	return medianF(ratios)
}

// Worst returns the larger of the GET and reserve ratios: the cost a lone
// caller pays for auto-pipelining (≤ 1.10 is the target).
func (r *LatencyResult) Worst() float64 { return max(r.Ratio("GET"), r.Ratio("reserve")) }

// RunSingleCaller measures the p50 latency of one goroutine doing GETs and
// 1-item reserves through the pipelined router and through the same build
// with pipelining off, interleaved in rounds.
func RunSingleCaller(ctx context.Context, c *Cluster, p Plan, progress func(string)) (*LatencyResult, error) {
	if c.PlainRouter == nil {
		return nil, errors.New("single-caller latency needs the cluster's baselines")
	}
	if err := c.Reset(ctx); err != nil {
		return nil, err
	}
	keys := kvKeys(latencyKeyLen)
	if err := c.preload(ctx, keys, "v"); err != nil {
		return nil, err
	}
	if _, err := c.Inv.LoadStock(ctx, routeAll, latencySKU, inventory.MaxQuantity, 0); err != nil {
		return nil, fmt.Errorf("load %s: %w", latencySKU, err)
	}
	get := func(r interface {
		Client(server, route, key string) (*redis.Client, error)
	}) Op {
		return func(w *Worker) error {
			key := keys[w.Rng.IntN(len(keys))]
			cl, err := r.Client(kvServer, kvRoute, key)
			if err != nil {
				return err
			}
			if err := cl.Get(ctx, key).Err(); err != nil && !errors.Is(err, redis.Nil) {
				return err
			}
			return nil
		}
	}
	items := []inventory.Item{{Route: routeAll, SKU: latencySKU, Quantity: 1}}
	reserve := func(inv *inventory.Inventory, prefix byte) Op {
		return func(w *Worker) error {
			_, err := inv.Reserve(ctx, orderID(w, prefix), items, "", 0)
			return err
		}
	}
	ops := map[string]Op{
		VarLatGetOn: get(c.Router), VarLatGetOff: get(c.PlainRouter),
		VarLatResOn: reserve(c.Inv, 'l'), VarLatResOff: reserve(c.PlainInv, 'm'),
	}
	variants := []string{VarLatGetOn, VarLatGetOff, VarLatResOn, VarLatResOff}
	res := &LatencyResult{Variants: variants, Series: map[string]*Series{}}
	for _, v := range variants {
		res.Series[v] = &Series{Name: v}
	}
	load := NewLoad(1, 7)
	for _, v := range variants {
		load.Run(p.Warmup, ops[v])
	}
	st, err := runRounds(p, c.Meter, progress, "single caller", func(int) (func(), string, error) {
		got := map[string]Sample{}
		for _, v := range variants {
			got[v] = c.measure(load, p.Round, ops[v])
		}
		commit := func() {
			for v, s := range got {
				res.Series[v].Add(s)
			}
		}
		return commit, fmt.Sprintf("p50 GET on %v off %v, reserve on %v off %v",
			got[VarLatGetOn].P50.Round(time.Microsecond), got[VarLatGetOff].P50.Round(time.Microsecond),
			got[VarLatResOn].P50.Round(time.Microsecond), got[VarLatResOff].P50.Round(time.Microsecond)), nil
	})
	res.Rounds = st
	return res, err
}
