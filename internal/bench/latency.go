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

// Few-callers variants: GET throughput of the same build with
// auto-pipelining on and off from a handful of goroutines (2 and 4 per
// node), where pipelining must not cost what it saves at 64.
const (
	VarFew6On   = "GET, 6 goroutines, auto-pipelining on"
	VarFew6Off  = "GET, 6 goroutines, auto-pipelining off"
	VarFew12On  = "GET, 12 goroutines, auto-pipelining on"
	VarFew12Off = "GET, 12 goroutines, auto-pipelining off"
)

// fewConc is each few-callers variant's number of goroutines.
var fewConc = map[string]int{VarFew6On: 6, VarFew6Off: 6, VarFew12On: 12, VarFew12Off: 12}

// LatencyResult holds the single-caller series by variant.
type LatencyResult struct {
	Variants  []string           // the one-goroutine variants, then the few-callers ones
	Series    map[string]*Series // each variant's samples over the rounds, by variant name
	Rounds    RoundStats         // of the one-goroutine rounds
	FewRounds RoundStats         // of the few-callers rounds, which run after them
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

// FewRatio returns GET ops/s with auto-pipelining on / off from conc (6
// or 12) goroutines, paired per round; 0 when not measured.
func (r *LatencyResult) FewRatio(conc int) float64 {
	on, off := r.Series[VarFew6On], r.Series[VarFew6Off]
	if conc == 12 {
		on, off = r.Series[VarFew12On], r.Series[VarFew12Off]
	}
	if on == nil || off == nil || len(on.Samples) == 0 {
		return 0
	}
	return PairedRatio([]*Series{on}, []*Series{off})
}

// FewWorst returns the smaller of FewRatio(6) and FewRatio(12): what a
// service with a few callers per node keeps of plain go-redis's
// throughput with auto-pipelining on.
func (r *LatencyResult) FewWorst() float64 { return min(r.FewRatio(6), r.FewRatio(12)) }

// RunSingleCaller measures the p50 latency of one goroutine doing GETs and
// 1-item reserves, and the GET throughput of 6 and 12 goroutines, through
// the pipelined router and through the same build with pipelining off,
// interleaved in rounds.
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
		VarFew6On: get(c.Router), VarFew6Off: get(c.PlainRouter),
		VarFew12On: get(c.Router), VarFew12Off: get(c.PlainRouter),
	}
	one := []string{VarLatGetOn, VarLatGetOff, VarLatResOn, VarLatResOff}
	few := []string{VarFew6On, VarFew6Off, VarFew12On, VarFew12Off}
	res := &LatencyResult{Variants: append(append([]string{}, one...), few...), Series: map[string]*Series{}}
	for _, v := range res.Variants {
		res.Series[v] = &Series{Name: v}
	}
	loads := map[int]*Load{1: NewLoad(1, 7), 6: NewLoad(6, 7), 12: NewLoad(12, 7)}
	loadOf := func(v string) *Load { return loads[max(1, fewConc[v])] }
	for _, v := range append(append([]string{}, few...), one...) { // the lone caller's last
		loadOf(v).Run(p.Warmup, ops[v])
	}
	// The one-goroutine rounds run first, apart from the few-callers
	// ones: a variant measured right after a 12-goroutine run pays for the
	// runtime's and the servers' clean-up of that run, and the lone
	// caller's p50 is too small a figure to absorb that.
	round := func(name string, variants []string, line func(map[string]Sample) string) (RoundStats, error) {
		return runRounds(p, c.Meter, progress, name, func(int) (func(), string, error) {
			got := map[string]Sample{}
			for _, v := range variants {
				got[v] = c.measure(loadOf(v), p.Round, ops[v])
			}
			commit := func() {
				for v, s := range got {
					res.Series[v].Add(s)
				}
			}
			return commit, line(got), nil
		})
	}
	st, err := round("single caller", one, func(got map[string]Sample) string {
		return fmt.Sprintf("p50 GET on %v off %v, reserve on %v off %v",
			got[VarLatGetOn].P50.Round(time.Microsecond), got[VarLatGetOff].P50.Round(time.Microsecond),
			got[VarLatResOn].P50.Round(time.Microsecond), got[VarLatResOff].P50.Round(time.Microsecond))
	})
	res.Rounds = st
	if err != nil {
		return res, err
	}
	st, err = round("few callers", few, func(got map[string]Sample) string {
		return fmt.Sprintf("GET ops/s 6 goroutines on %.0f off %.0f, 12 on %.0f off %.0f",
			got[VarFew6On].OpsPerSec(), got[VarFew6Off].OpsPerSec(), got[VarFew12On].OpsPerSec(), got[VarFew12Off].OpsPerSec())
	})
	res.FewRounds = st
	return res, err
}
