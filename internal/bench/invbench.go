package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/shardis/shardis/node"
)

// Inventory variants, in the order of the report's table
// (invTableOrder); a round runs them in invRoundOrder.
const (
	VarInv1  = "shardis 1 item (library)"
	VarInv3  = "shardis 3 items on 3 nodes (library)"
	VarSeed3 = "seed baseline 3 items on 3 nodes (EVAL per item)"
	VarHot3  = "hot SKU split over 3 nodes (shardis, 1 item)"
	VarHot1  = "hot SKU on 1 node (shardis, 1 item)"
	// VarHot1Minted is VarHot1 with every order id minted by
	// Inventory.NewOrderID given the order's items (inside the timed
	// call): the record goes to the stock's node, one script per order.
	VarHot1Minted = "hot SKU on 1 node (shardis, 1 item, ids minted with the items)"
	// VarSeedHot1 is the seed baseline's shape on VarHot1's node and
	// workload: one SKU, stock on n1 only, 1-item orders of quantity 1.
	VarSeedHot1 = "seed baseline hot SKU on 1 node (EVAL per item)"
	// VarInv3Alone and VarHot1Alone are VarInv3 and VarHot1 with group
	// commit off (inventory.group_commit 1): one order per script call.
	VarInv3Alone = "shardis 3 items on 3 nodes, group commit off"
	VarHot1Alone = "hot SKU on 1 node (shardis, 1 item), group commit off"
	// VarHotFloor and VarFloor3 are VarSeedHot1's and VarSeed3's
	// workloads written with the least state a reservation that keeps a
	// record per order needs, batched (floor.go): yardsticks for the
	// inventory targets, not shardis. Their records are hashed over the
	// three nodes, as VarHot1's and VarInv3's.
	// VarHotFloorLocal is VarHotFloor with every record on the stock's node
	// (VarHot1Minted's placement): one entry per order.
	VarHotFloor      = "floor: hot SKU on 1 node, a record per order (hashed over 3 nodes) and a part fence, batched"
	VarHotFloorLocal = "floor: hot SKU on 1 node, a record per order next to the stock, batched"
	VarFloor3        = "floor: 3 items on 3 nodes, a record and two part fences per order, batched"
	// VarHotFloorBucket is VarHotFloorLocal with each record one field of
	// its minute's hash instead of a key (floorbucket.go): a yardstick for
	// the records' structure, not a floor row of any target.
	VarHotFloorBucket = "bucketed-record floor: hot SKU on 1 node, a record per order as a field of its minute's hash next to the stock, batched"
	// VarHotFloorLocalNoTTL is VarHotFloorLocal with each record a key
	// without a TTL (floorNoTTLScript), as shardis keeps a reserved
	// order's record: a yardstick beside VarHotFloorBucket, which saves
	// the per-key TTL too, not a floor row of any target.
	VarHotFloorLocalNoTTL = "no-TTL floor: hot SKU on 1 node, a record per order next to the stock, a key without a TTL, batched"
	// VarHotFloorOneRound and VarFloor3OneRound are VarHotFloor and
	// VarFloor3 placed in one round trip (floorOrderOneRound), as
	// shardis's one-round paths place VarHot1's and VarInv3's orders: the
	// record staged beside the fences, then decided by one more write.
	VarHotFloorOneRound = "floor, one round: hot SKU on 1 node, a record per order (hashed over 3 nodes, staged, then decided) and a part fence, batched"
	VarFloor3OneRound   = "floor, one round: 3 items on 3 nodes, a record (staged, then decided) and two part fences per order, batched"
	// VarHotFloorGuarded, VarHotFloorLocalGuarded, VarFloor3Guarded,
	// VarHotFloorOneRoundGuarded and VarFloor3OneRoundGuarded are
	// VarHotFloor, VarHotFloorLocal, VarFloor3 and the two one-round rows
	// on the guarded floor (floorguard.go: the floor with the checks
	// shardis's promises make every reservation pay).
	// TestWorkloadInstructions counts them all; the timed runs run the
	// first three (GuardedFloors).
	VarHotFloorGuarded         = "guarded floor: hot SKU on 1 node, a record per order (hashed over 3 nodes) and a part fence, batched"
	VarHotFloorLocalGuarded    = "guarded floor: hot SKU on 1 node, a record per order next to the stock, batched"
	VarFloor3Guarded           = "guarded floor: 3 items on 3 nodes, a record and two part fences per order, batched"
	VarHotFloorOneRoundGuarded = "guarded floor, one round: hot SKU on 1 node, a record per order (hashed over 3 nodes, staged, then decided) and a part fence, batched"
	VarFloor3OneRoundGuarded   = "guarded floor, one round: 3 items on 3 nodes, a record (staged, then decided) and two part fences per order, batched"
	// VarSoldOut and VarSeedSoldOut are VarHot1's and VarSeedHot1's shape
	// on a SKU with no stock left (soldout.go): every order, each with a
	// distinct id, is refused. VarSoldOut's last unit is reserved and
	// confirmed: nothing is reserved, so a refusal writes nothing.
	// VarSoldOutReserved is VarSoldOut with its last unit reserved, not
	// confirmed, the usual state just after a sell-out: each refusal
	// writes a failed record, a fence (inventory/soldout.go).
	VarSoldOut         = "sold-out SKU on 1 node, its units confirmed (shardis, 1 item, refused)"
	VarSeedSoldOut     = "seed baseline sold-out SKU on 1 node (EVAL, refused)"
	VarSoldOutReserved = "sold-out SKU on 1 node, its last unit reserved, not confirmed (shardis, 1 item, refused behind a fence)"
)

// seedHotSKU is the seed's id of the hot SKU (its ids are numbers).
const seedHotSKU = 7777

// InvResult holds the inventory series by variant, and the allocation
// benchmarks of one reserve.
type InvResult struct {
	Conc     int                // concurrent goroutines of the load (Plan.Conc)
	SKUs     int                // SKUs per route the orders pick from (Plan.SKUs)
	Variants []string           // the variants, in the report's table order
	Series   map[string]*Series // each variant's samples over the rounds, by variant name
	Allocs   []AllocResult      // one-goroutine benchmarks of VarInv1, VarInv3 and VarSeed3
	Rounds   RoundStats         // how the rounds went (kept, discarded)
	// RoundTrips is the sequential round trips of one Reserve, counted
	// (roundtrips.go); nil when the plan counts none.
	RoundTrips *RoundTripResult
	// SoldOutKeys is the keys refused orders left on the nodes, per order
	// (soldout.go), VarSoldOut's SKU (its units confirmed); nil when not
	// measured.
	SoldOutKeys *SoldOutKeys `json:",omitempty"`
	// SoldOutReservedKeys is the same for VarSoldOutReserved's SKU (its
	// last unit reserved, not confirmed); nil when not measured.
	SoldOutReservedKeys *SoldOutKeys `json:",omitempty"`
}

// HotVsSeed returns the hot-SKU-on-one-node orders/s of shardis over the
// seed baseline's, paired per round, or 0 when the run has no seed
// hot-SKU series (results saved before it existed).
func (ir *InvResult) HotVsSeed() float64 { return ir.vsSeedHot(VarHot1) }

// vsSeedHot is variant v's orders/s over the seed hot-SKU baseline's,
// paired per round, or 0 when either series is missing.
func (ir *InvResult) vsSeedHot(v string) float64 { return ir.Over(v, VarSeedHot1) }

// GroupGain returns the orders/s of variant v over the same workload with
// group commit off, paired per round, or 0 when the run has no such
// series (results saved before it existed). v is VarInv3 or VarHot1.
func (ir *InvResult) GroupGain(v string) float64 {
	off := map[string]string{VarInv3: VarInv3Alone, VarHot1: VarHot1Alone}[v]
	return ir.Over(v, off)
}

// FloorVsSeed and FloorLocalVsSeed are HotVsSeed for VarHotFloor and
// VarHotFloorLocal: the most orders/s over the seed's that a design
// writing a record per order reached in the run, with the records placed
// as VarHot1's and as VarHot1Minted's (0 when the run has no such series).
func (ir *InvResult) FloorVsSeed() float64 { return ir.vsSeedHot(VarHotFloor) }

// FloorLocalVsSeed: see FloorVsSeed.
func (ir *InvResult) FloorLocalVsSeed() float64 { return ir.vsSeedHot(VarHotFloorLocal) }

// FloorBucketVsSeed is HotVsSeed for VarHotFloorBucket: FloorLocalVsSeed
// with the records hash fields instead of keys (0 when the run has no
// such series).
func (ir *InvResult) FloorBucketVsSeed() float64 { return ir.vsSeedHot(VarHotFloorBucket) }

// FloorNoTTLVsSeed is HotVsSeed for VarHotFloorLocalNoTTL:
// FloorLocalVsSeed with the records keys without a TTL (0 when the run
// has no such series).
func (ir *InvResult) FloorNoTTLVsSeed() float64 { return ir.vsSeedHot(VarHotFloorLocalNoTTL) }

// Floor3VsSeed is VarFloor3's orders/s over VarSeed3's, paired per round
// (0 when the run has no such series).
func (ir *InvResult) Floor3VsSeed() float64 { return ir.Over(VarFloor3, VarSeed3) }

// HotMintedVsSeed is HotVsSeed for VarHot1Minted (0 when the run has no
// such series).
func (ir *InvResult) HotMintedVsSeed() float64 { return ir.vsSeedHot(VarHot1Minted) }

// Over returns variant a's orders/s over variant b's, paired per round,
// or 0 when either series is missing or their rounds differ (results
// saved before one of them existed).
func (ir *InvResult) Over(a, b string) float64 {
	return medianF(ir.overRounds(a, b))
}

// OverRange returns the lowest and the highest of the per-round ratios
// whose median Over returns (ok false when Over would return 0): how far
// apart the rounds of one run put the same pair.
func (ir *InvResult) OverRange(a, b string) (lo, hi float64, ok bool) {
	r := ir.overRounds(a, b)
	if len(r) == 0 {
		return 0, 0, false
	}
	return slices.Min(r), slices.Max(r), true
}

// overRounds are a's orders/s over b's round by round, none when either
// series is missing or their rounds differ.
func (ir *InvResult) overRounds(a, b string) []float64 {
	x, y := ir.Series[a], ir.Series[b]
	if x == nil || y == nil || len(x.Samples) != len(y.Samples) || len(y.Samples) == 0 {
		return nil
	}
	return pairedRatios([]*Series{x}, []*Series{y})
}

// AllocResult is a sequential (one goroutine) benchmark of one order.
type AllocResult struct {
	Name        string  // the variant benchmarked (Var…)
	NsPerOp     float64 // wall time per order (ns), nodes' round trips included
	AllocsPerOp int64   // this process's heap allocations per order
	BytesPerOp  int64   // this process's heap bytes allocated per order
}

// invWorkload is one inventory variant: how to prepare the nodes and how
// to place one order.
type invWorkload struct {
	name  string
	setup func(ctx context.Context) error
	op    Op
}

// orderID builds a unique order id in the worker's scratch buffer: one
// allocation (the string), the same for every variant.
func orderID(w *Worker, prefix byte) string {
	w.Seq++
	b := append(w.Buf[:0], prefix)
	b = strconv.AppendInt(b, int64(w.ID), 10)
	b = append(b, '-')
	b = strconv.AppendInt(b, w.Seq, 10)
	w.Buf = b
	return string(b)
}

// invTableOrder is the order of the report's table and of
// InvResult.Variants.
var invTableOrder = []string{VarInv1, VarInv3, VarSeed3, VarHot3, VarHot1, VarHot1Minted, VarSeedHot1, VarInv3Alone, VarHot1Alone, VarHotFloor, VarHotFloorLocal, VarHotFloorBucket, VarHotFloorLocalNoTTL, VarFloor3,
	VarHotFloorOneRound, VarFloor3OneRound, VarSoldOut, VarSeedSoldOut, VarSoldOutReserved, VarHotFloorGuarded, VarHotFloorLocalGuarded, VarFloor3Guarded}

// invRoundOrder is the order in which a round runs the inventory
// variants: the two rows of every ratio a target names side by side
// (TestInvRoundOrder: the 3-item row between its floor row and the seed's;
// the hot-SKU rows as floor, shardis, seed, minted, the floor next to the
// stock; the sold-out rows, both states, beside the seed's), so the two
// runs of a pair are seconds apart, not a whole round, and the yardsticks next to what
// they are read against where that leaves room (the one-round floors
// beside their floor rows, the bucketed and no-TTL floors after the floor
// next to the stock). The machine's speed drifts over tens of seconds
// even in rounds kept as quiet (other processes and the host's steal
// under Plan.MaxForeign): in one full run (2026-12-01, the rows in the
// report's order) the 3-item row over its floor row, run 20 s apart,
// moved 0.54-0.81 from round to round, where over the seed's row, run
// next to it, 0.72-0.81.
var invRoundOrder = []string{
	VarInv1,
	VarInv3Alone, VarFloor3OneRound, VarFloor3, VarInv3, VarSeed3, VarFloor3Guarded,
	VarHot3, VarHotFloorOneRound, VarHotFloor, VarHot1, VarSeedHot1, VarHot1Minted, VarHotFloorLocal, VarHotFloorBucket, VarHotFloorLocalNoTTL,
	VarHotFloorLocalGuarded, VarHotFloorGuarded, VarHot1Alone,
	VarSoldOut, VarSeedSoldOut, VarSoldOutReserved,
}

// roundOrder is the order of round: invRoundOrder in an even round,
// reversed in an odd one, so that each pair runs in both orders and a
// drift within a round favours neither of its rows.
func roundOrder(round int) []string {
	if round%2 == 0 {
		return invRoundOrder
	}
	out := slices.Clone(invRoundOrder)
	slices.Reverse(out)
	return out
}

// RunInventory measures orders/s and latency of every inventory variant,
// in rounds (invRoundOrder, roundOrder). Before every run the nodes are
// emptied and the variant's stock loaded, so every run starts from the
// same state.
func RunInventory(ctx context.Context, c *Cluster, p Plan, progress func(string)) (*InvResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := c.Reset(ctx); err != nil {
		return nil, err
	}
	var nodes []*node.Node
	for _, route := range singleRoutes {
		set, _ := c.Router.Set(invServer, route)
		nodes = append(nodes, set.Nodes()[0])
	}
	if err := retrySetup(c.Router.Nodes(), func() error {
		if err := c.Reset(ctx); err != nil {
			return err
		}
		return checkSeed(ctx, nodes)
	}); err != nil {
		return nil, err
	}
	wl, err := invWorkloads(ctx, c, p.SKUs)
	if err != nil {
		return nil, err
	}
	res := &InvResult{Conc: p.Conc, SKUs: p.SKUs, Variants: invTableOrder, Series: map[string]*Series{}}
	for _, v := range invTableOrder {
		res.Series[v] = &Series{Name: v}
	}
	load := NewLoad(p.Conc, 2)
	nodesAll := c.Router.Nodes()
	run := func(v string, d time.Duration) (Sample, error) {
		err := retrySetup(nodesAll, func() error {
			if err := c.Reset(ctx); err != nil {
				return err
			}
			return wl[v].setup(ctx)
		})
		if err != nil {
			return Sample{}, err
		}
		return c.measure(load, d, wl[v].op), nil
	}
	for _, v := range roundOrder(0) {
		if _, err := run(v, p.Warmup); err != nil {
			return nil, err
		}
	}
	st, err := runRounds(p, c.Meter, progress, "inventory", func(round int) (func(), string, error) {
		got := map[string]Sample{}
		for _, v := range roundOrder(round) {
			s, err := run(v, p.Round)
			if err != nil {
				return nil, "", err
			}
			got[v] = s
		}
		return func() {
				for v, s := range got {
					res.Series[v].Add(s)
				}
			}, fmt.Sprintf("orders/s 1 item %.0f, 3 items %.0f, seed 3 items %.0f, hot 3 nodes %.0f, hot 1 node %.0f (minted ids %.0f), seed hot 1 node %.0f; group commit off: 3 items %.0f, hot 1 node %.0f; floor: hot %.0f (next to the stock %.0f, bucketed records %.0f), 3 items %.0f; one round: hot %.0f, 3 items %.0f; sold out: refused %.0f (last unit reserved %.0f), seed %.0f; guarded floor: hot %.0f (next to the stock %.0f), 3 items %.0f",
				got[VarInv1].OpsPerSec(), got[VarInv3].OpsPerSec(), got[VarSeed3].OpsPerSec(),
				got[VarHot3].OpsPerSec(), got[VarHot1].OpsPerSec(), got[VarHot1Minted].OpsPerSec(), got[VarSeedHot1].OpsPerSec(),
				got[VarInv3Alone].OpsPerSec(), got[VarHot1Alone].OpsPerSec(), got[VarHotFloor].OpsPerSec(), got[VarHotFloorLocal].OpsPerSec(), got[VarHotFloorBucket].OpsPerSec(), got[VarFloor3].OpsPerSec(),
				got[VarHotFloorOneRound].OpsPerSec(), got[VarFloor3OneRound].OpsPerSec(),
				got[VarSoldOut].OpsPerSec(), got[VarSoldOutReserved].OpsPerSec(), got[VarSeedSoldOut].OpsPerSec(),
				got[VarHotFloorGuarded].OpsPerSec(), got[VarHotFloorLocalGuarded].OpsPerSec(), got[VarFloor3Guarded].OpsPerSec()), nil
	})
	res.Rounds = st
	if err != nil {
		return res, err
	}

	// Keys refused orders leave on the nodes, in both sold-out states.
	for _, k := range []struct {
		v, state string
		out      **SoldOutKeys
	}{{VarSoldOut, "its units confirmed", &res.SoldOutKeys}, {VarSoldOutReserved, "its last unit reserved", &res.SoldOutReservedKeys}} {
		waitQuiet(c.Meter, p.MaxForeign, p.QuietWait, progress)
		if *k.out, err = measureSoldOutKeys(ctx, c, wl[k.v], p.Conc); err != nil {
			return res, err
		}
		progress(fmt.Sprintf("sold-out SKU, %s: %d refused orders left %d keys on the nodes (%.3f per order)",
			k.state, (*k.out).Refused, (*k.out).Keys, (*k.out).PerRefusal()))
	}

	// Allocations and sequential latency of one order (one goroutine).
	for _, v := range []string{VarInv1, VarInv3, VarSeed3} {
		waitQuiet(c.Meter, p.MaxForeign, p.QuietWait, progress)
		err := retrySetup(nodesAll, func() error {
			if err := c.Reset(ctx); err != nil {
				return err
			}
			return wl[v].setup(ctx)
		})
		if err != nil {
			return nil, err
		}
		w := NewLoad(1, 3).workers[0]
		var opErr error
		br := testing.Benchmark(func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := wl[v].op(w); err != nil {
					opErr = err
					b.SkipNow()
				}
			}
		})
		if opErr != nil {
			return nil, fmt.Errorf("allocation benchmark %s: %w", v, opErr)
		}
		res.Allocs = append(res.Allocs, AllocResult{Name: v,
			NsPerOp:     float64(br.T.Nanoseconds()) / float64(max(br.N, 1)),
			AllocsPerOp: br.AllocsPerOp(), BytesPerOp: br.AllocedBytesPerOp()})
	}

	// Sequential round trips of one reserve, counted by a hook.
	if p.RoundTripOrders > 0 {
		waitQuiet(c.Meter, p.MaxForeign, p.QuietWait, progress)
		if res.RoundTrips, err = RunRoundTrips(ctx, c, p.RoundTripOrders, c.Log); err != nil {
			return res, err
		}
		for _, sh := range res.RoundTrips.Shapes {
			progress(fmt.Sprintf("round trips of one reserve, %s: median %d, max %d over %d orders (%v)",
				sh.Name, sh.Median, sh.Max, sh.Orders, sh.Hist))
		}
	}
	return res, nil
}
