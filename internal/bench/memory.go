package bench

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/inventory"
)

// Node memory per pending order (issue 25, "Compact records, measured"):
// RunMemory reserves memOrders 1-item orders with distinct ids (hashed
// over the three nodes, stock on every node of the route) through the
// library and reads INFO memory's used_memory (less client buffers) on
// every node every memStep orders; the slope of that sum over the orders
// is one measurement, and reserve_bytes_per_order_1item is the median of
// memRounds of them, each on flushed nodes. One measurement moves by
// about ±20 bytes per order between runs: used_memory also holds memory no
// key owns (about 650–800 KB a node on flushed nodes here, allocations of
// Redis's own that come and go), and its drift over one window lands in
// the slope. A breakdown by key family (MEMORY USAGE of every key of the
// nodes, classified by inventory.ParseKey) says where the bytes go; what
// MEMORY USAGE does not see (the expires dict's entry of a key with a TTL,
// the main dict's growth) is the difference.

// memOrders is how many pending orders are measured, after
// memWarmup orders that load the scripts and create the indexes (their
// growth, the sorted sets' change of encoding and the key space's, is in
// the measure: a real share of what the orders cost, and the same in every
// run).
const (
	memRounds = 3
	memOrders = 3000
	memStep   = 150
	memWarmup = 30
	memSKU    = "mem-1"
	memConc   = 16
)

// MemoryResult is node memory per pending 1-item order.
type MemoryResult struct {
	Orders int // orders measured
	// Bytes is the node memory Orders orders take: INFO used_memory less
	// the client buffers, summed over the nodes, read every memStep orders;
	// the slope of the least-squares line through the readings times
	// Orders; the median of Rounds.
	Bytes int64
	// Rounds are the measurements, in the order they ran (memRounds).
	Rounds []int64 `json:",omitempty"`
	// Families is MEMORY USAGE per key family after the run, over every
	// pending order on the nodes (the warm-up's included: PerOrder
	// divides by Pending).
	Families []FamilyBytes
	Pending  int // pending orders on the nodes when the families were read
	// Layouts is what one record costs in each candidate structure, on
	// one node (layouts.go): the yardstick for a cheaper layout.
	Layouts []LayoutBytes `json:",omitempty"`
}

// FamilyBytes is what one key family holds on the nodes.
type FamilyBytes struct {
	Family string // inventory.KeyKind's name
	Keys   int64  // keys of the family on the nodes
	Bytes  int64  // MEMORY USAGE summed
}

// PerOrder is Bytes per order (0 when none was measured).
func (m *MemoryResult) PerOrder() float64 {
	if m == nil || m.Orders == 0 {
		return 0
	}
	return float64(m.Bytes) / float64(m.Orders)
}

// RoundsPerOrder is each measurement per order, in the order they ran,
// as "504, 498, 512" (Bytes alone when Rounds is empty).
func (m *MemoryResult) RoundsPerOrder() string {
	rounds := m.Rounds
	if len(rounds) == 0 {
		rounds = []int64{m.Bytes}
	}
	per := make([]string, len(rounds))
	for i, b := range rounds {
		per[i] = fmt.Sprintf("%.0f", float64(b)/float64(max(m.Orders, 1)))
	}
	return strings.Join(per, ", ")
}

// FamilyPerOrder is f's bytes per pending order.
func (m *MemoryResult) FamilyPerOrder(f FamilyBytes) float64 {
	if m.Pending == 0 {
		return 0
	}
	return float64(f.Bytes) / float64(m.Pending)
}

// Breakdown is the families as "family N B/order (K keys)", largest
// first.
func (m *MemoryResult) Breakdown() string {
	var parts []string
	for _, f := range m.Families {
		parts = append(parts, fmt.Sprintf("%s %.0f B/order (%d keys)", f.Family, m.FamilyPerOrder(f), f.Keys))
	}
	return strings.Join(parts, ", ")
}

// RunMemory measures node memory per pending 1-item order on c (the
// "memory" section).
func RunMemory(ctx context.Context, c *Cluster, progress func(string)) (*MemoryResult, error) {
	out := &MemoryResult{Orders: memOrders, Pending: memOrders + memWarmup}
	for range memRounds {
		b, err := memRound(ctx, c)
		if err != nil {
			return nil, err
		}
		out.Rounds = append(out.Rounds, b)
	}
	out.Bytes = medianBytes(out.Rounds)
	var err error
	if out.Families, err = keyFamilies(ctx, c.Admin); err != nil { // the last round's
		return nil, err
	}
	progress(fmt.Sprintf("memory: %d pending 1-item orders took %d bytes on the nodes (%.0f per order, the median of %s): %s",
		out.Orders, out.Bytes, out.PerOrder(), out.RoundsPerOrder(), out.Breakdown()))
	if out.Layouts, err = RunLayouts(ctx, c.Admin[0], progress); err != nil {
		return nil, err
	}
	return out, nil
}

// medianBytes is the median of rounds (the upper middle one of an even
// count; 0 for none).
func medianBytes(rounds []int64) int64 {
	if len(rounds) == 0 {
		return 0
	}
	sorted := slices.Clone(rounds)
	slices.Sort(sorted)
	return sorted[len(sorted)/2]
}

// memRound is one measurement on flushed nodes: the bytes memOrders
// pending orders took, as MemoryResult.Bytes says.
func memRound(ctx context.Context, c *Cluster) (int64, error) {
	nodes := c.Router.Nodes()
	if err := retrySetup(nodes, func() error {
		if err := c.Reset(ctx); err != nil {
			return err
		}
		_, err := c.Inv.LoadStock(ctx, routeAll, memSKU, inventory.MaxQuantity, 0)
		return err
	}); err != nil {
		return 0, err
	}
	if err := memReserve(ctx, c, "w", 0, memWarmup); err != nil {
		return 0, err
	}
	// used_memory after every memStep orders; the bytes per order are the
	// slope of the least-squares line through them. The key space's and
	// the indexes' hash tables double at power-of-two sizes, a step of
	// about 16 bytes per key each: one delta over a window catches or
	// misses them by chance (±100 bytes per order between runs), the
	// slope over many points spreads them.
	var xs, ys []float64
	for done := 0; ; done += memStep {
		used, err := usedMemory(ctx, c.Admin)
		if err != nil {
			return 0, err
		}
		xs, ys = append(xs, float64(done)), append(ys, float64(used))
		if done == memOrders {
			break
		}
		if err := memReserve(ctx, c, "m", done, memStep); err != nil {
			return 0, err
		}
	}
	return int64(math.Round(slope(xs, ys) * memOrders)), nil
}

// memReserve reserves n 1-item orders of memSKU, ids prefix+number from
// first on, from memConc goroutines; any error stops it.
func memReserve(ctx context.Context, c *Cluster, prefix string, first, n int) error {
	items := []inventory.Item{{Route: routeAll, SKU: memSKU, Quantity: 1}}
	next := make(chan int, n)
	for i := range n {
		next <- first + i
	}
	close(next)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed error
	)
	for range memConc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if _, err := c.Inv.Reserve(ctx, prefix+strconv.Itoa(i), items, "", time.Hour); err != nil {
					mu.Lock()
					failed = cmpOr(failed, fmt.Errorf("memory: reserve %s%d: %w", prefix, i, err))
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return failed
}

// slope is the least-squares slope of ys over xs (at least two points).
func slope(xs, ys []float64) float64 {
	n := float64(len(xs))
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx, sy = sx+xs[i], sy+ys[i]
		sxx, sxy = sxx+xs[i]*xs[i], sxy+xs[i]*ys[i]
	}
	return (n*sxy - sx*sy) / (n*sxx - sx*sx)
}

// usedMemory is INFO memory's used_memory less the client buffers
// (mem_clients_normal: connections' query and reply buffers, which come
// and go with the load, not with the data), summed over the nodes, read
// once no lazy free is pending (waitLazyFree: a flush frees
// asynchronously).
func usedMemory(ctx context.Context, admin []*redis.Client) (int64, error) {
	var sum int64
	for _, a := range admin {
		if err := waitLazyFree(ctx, a, 30*time.Second); err != nil {
			return 0, err
		}
		info, err := a.InfoMap(ctx, "memory").Result()
		if err != nil {
			return 0, fmt.Errorf("INFO memory: %w", err)
		}
		m := info["Memory"]
		for _, f := range []struct {
			name string
			sign int64
		}{{"used_memory", 1}, {"mem_clients_normal", -1}} {
			n, err := strconv.ParseInt(m[f.name], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("INFO memory %s %q: %w", f.name, m[f.name], err)
			}
			sum += f.sign * n
		}
	}
	return sum, nil
}

// keyFamilies sums MEMORY USAGE (every element: SAMPLES 0) of every key
// of the nodes by inventory.KeyKind, largest first.
func keyFamilies(ctx context.Context, admin []*redis.Client) ([]FamilyBytes, error) {
	by := map[string]*FamilyBytes{}
	for _, a := range admin {
		iter := a.Scan(ctx, 0, "*", 1000).Iterator()
		for iter.Next(ctx) {
			k := iter.Val()
			kind, _ := inventory.ParseKey(k)
			n, err := a.MemoryUsage(ctx, k, 0).Result()
			if err == redis.Nil {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("MEMORY USAGE %s: %w", k, err)
			}
			f := by[kind.String()]
			if f == nil {
				f = &FamilyBytes{Family: kind.String()}
				by[kind.String()] = f
			}
			f.Keys++
			f.Bytes += n
		}
		if err := iter.Err(); err != nil {
			return nil, fmt.Errorf("SCAN: %w", err)
		}
	}
	out := make([]FamilyBytes, 0, len(by))
	for _, f := range by {
		out = append(out, *f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Bytes > out[j].Bytes })
	return out, nil
}
