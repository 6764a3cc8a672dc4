package bench

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/router"
)

// Round-trip shapes: the orders whose sequential round trips are counted.
const (
	// RTShape1 is a 1-item order on the route over every node.
	RTShape1 = "1 item, stock on every node"
	// RTShape3 is a 3-item order, three SKUs of the route over every node.
	RTShape3 = "3 items, stock on every node"
	// RTShapeStaged is a 3-item order over the one-node routes r1, r2,
	// r3: no node can meet it alone, so it takes the one-round staged path.
	RTShapeStaged = "3 items on r1, r2, r3 (one node each: one-round staged path)"
	// RTShapeSplit is a 1-item order for more than any node holds: the
	// one-script attempt falls back to the general path, which splits it.
	RTShapeSplit = "1 item more than a node holds (one-script attempt, then the general path splits it)"
)

// Interval is one command or pipeline as a node client's hook saw it:
// when the caller handed it to go-redis and when go-redis returned, in
// nanoseconds from any fixed origin. End ≥ Start.
type Interval struct {
	Start int64 // when the caller handed it to go-redis (ns)
	End   int64 // when go-redis returned (ns)
}

// SequentialRoundTrips returns the length of the longest chain of
// intervals in which each interval starts at or after the previous one
// ended: the round trips that had to happen one after another, since
// intervals that overlap ran in parallel. It is 0 for no interval. The
// input is not modified.
func SequentialRoundTrips(iv []Interval) int {
	s := slices.Clone(iv)
	// The longest chain of pairwise non-overlapping intervals is the
	// largest set of them, which earliest-end-first greedy finds.
	slices.SortFunc(s, func(a, b Interval) int {
		if a.End != b.End {
			return cmpInt64(a.End, b.End)
		}
		return cmpInt64(a.Start, b.Start)
	})
	n := 0
	last := int64(0)
	for _, x := range s {
		if n == 0 || x.Start >= last {
			n++
			last = x.End
		}
	}
	return n
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// RoundTripShape is the count over the orders of one shape.
type RoundTripShape struct {
	Name   string // the shape's description (RTShape…)
	Orders int    // the orders of the shape counted
	// Median (the upper one for an even count) and Max are over the
	// orders of the shape.
	Median, Max int
	// Hist maps sequential round trips to the orders that needed them.
	Hist map[int]int
	// CommandsPerOrder is the mean number of commands and pipelines the
	// hook saw per order (parallel ones included).
	CommandsPerOrder float64
}

// RoundTripResult is the sequential round trips of one Reserve on the
// success path, counted by a go-redis hook on every node client of a
// router with the benchmark's configuration (auto-pipelining on), one
// order at a time from one goroutine with nothing else running.
type RoundTripResult struct {
	Shapes []RoundTripShape // one per shape counted, in the order they ran
}

// Shape returns the named shape, or nil.
func (r *RoundTripResult) Shape(name string) *RoundTripShape {
	if r == nil {
		return nil
	}
	for i := range r.Shapes {
		if r.Shapes[i].Name == name {
			return &r.Shapes[i]
		}
	}
	return nil
}

// rtTraceKey is the context key of the *rtTrace a Reserve's commands are
// recorded into; commands without one (health probes) are not recorded.
type rtTraceKey struct{}

type rtTrace struct {
	mu sync.Mutex
	iv []Interval
}

func (t *rtTrace) add(x Interval) {
	t.mu.Lock()
	t.iv = append(t.iv, x)
	t.mu.Unlock()
}

// rtHook records every command and pipeline whose context carries an
// rtTrace. It is installed outermost (router.Options.Hooks), so it sees
// what the caller sends, auto-pipelined or not, from hand-off to reply.
type rtHook struct{ base time.Time }

func (h rtHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h rtHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		t, _ := ctx.Value(rtTraceKey{}).(*rtTrace)
		if t == nil {
			return next(ctx, cmd)
		}
		start := int64(time.Since(h.base))
		err := next(ctx, cmd)
		t.add(Interval{Start: start, End: int64(time.Since(h.base))})
		return err
	}
}

func (h rtHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		t, _ := ctx.Value(rtTraceKey{}).(*rtTrace)
		if t == nil {
			return next(ctx, cmds)
		}
		start := int64(time.Since(h.base))
		err := next(ctx, cmds)
		t.add(Interval{Start: start, End: int64(time.Since(h.base))})
		return err
	}
}

// RunRoundTrips counts the sequential round trips of n successful
// reserves of every shape. It builds its own router and inventory over
// c's nodes with the hook installed, empties the nodes and loads the
// shapes' stock (10⁹ units per SKU), warms every node's scripts and
// connections, then places the orders one at a time. A failed order or
// one in which the hook saw no command is an error.
func RunRoundTrips(ctx context.Context, c *Cluster, n int, log *slog.Logger) (*RoundTripResult, error) {
	r, inv, err := openInventory(ctx, c.Cfg, router.Options{Logger: log, Hooks: []redis.Hook{rtHook{base: time.Now()}}})
	if r != nil {
		defer r.Close()
	}
	if err != nil {
		return nil, err
	}
	const nSKU = 16
	sku := func(prefix string, k int) string { return prefix + strconv.Itoa(k) }
	err = retrySetup(c.Router.Nodes(), func() error {
		if err := c.Reset(ctx); err != nil {
			return err
		}
		for k := range nSKU {
			if _, err := inv.LoadStock(ctx, routeAll, sku("rt-", k), inventory.MaxQuantity, 0); err != nil {
				return err
			}
			for ri, route := range singleRoutes {
				if _, err := inv.LoadStock(ctx, route, sku("rt"+strconv.Itoa(ri+1)+"-", k), inventory.MaxQuantity, 0); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// The split SKU holds splitPer units on each node; each split order
	// wants one more and is cancelled once counted, so the stock stays.
	const splitPer = 10
	if _, err := inv.LoadStock(ctx, routeAll, "rt-split", splitPer*int64(len(c.Router.Nodes())), 0); err != nil {
		return nil, err
	}
	w := NewLoad(1, 11).workers[0]
	shapes := []struct {
		name  string
		items func() []inventory.Item
	}{
		{RTShape1, func() []inventory.Item {
			return []inventory.Item{{Route: routeAll, SKU: sku("rt-", w.Rng.IntN(nSKU)), Quantity: 1}}
		}},
		{RTShape3, func() []inventory.Item {
			p := w.Rng.Perm(nSKU)
			out := make([]inventory.Item, 3)
			for i := range out {
				out[i] = inventory.Item{Route: routeAll, SKU: sku("rt-", p[i]), Quantity: 1}
			}
			return out
		}},
		{RTShapeStaged, func() []inventory.Item {
			out := make([]inventory.Item, len(singleRoutes))
			for ri, route := range singleRoutes {
				out[ri] = inventory.Item{Route: route, SKU: sku("rt"+strconv.Itoa(ri+1)+"-", w.Rng.IntN(nSKU)), Quantity: 1}
			}
			return out
		}},
		{RTShapeSplit, func() []inventory.Item {
			return []inventory.Item{{Route: routeAll, SKU: "rt-split", Quantity: splitPer + 1}}
		}},
	}
	// Warm-up: every shape's orders until each script's function is
	// loaded and each pool has a connection on every node (a first FCALL
	// answered "Function not found", or a dial, is not the steady state
	// this counts).
	for _, sh := range shapes {
		for range 30 {
			id := orderID(w, 'w')
			if _, err := inv.Reserve(ctx, id, sh.items(), "", 0); err != nil {
				return nil, fmt.Errorf("round trips warm-up (%s): %w", sh.name, err)
			}
			if _, err := inv.Cancel(ctx, id); err != nil {
				return nil, fmt.Errorf("round trips warm-up (%s): %w", sh.name, err)
			}
		}
	}
	res := &RoundTripResult{}
	for _, sh := range shapes {
		out := RoundTripShape{Name: sh.name, Orders: n, Hist: map[int]int{}}
		counts := make([]int, 0, n)
		cmds := 0
		for range n {
			items := sh.items()
			t := &rtTrace{}
			id := orderID(w, 't')
			if _, err := inv.Reserve(context.WithValue(ctx, rtTraceKey{}, t), id, items, "", 0); err != nil {
				return nil, fmt.Errorf("round trips (%s): %w", sh.name, err)
			}
			t.mu.Lock()
			k := SequentialRoundTrips(t.iv)
			cmds += len(t.iv)
			t.mu.Unlock()
			if _, err := inv.Cancel(ctx, id); err != nil { // returns the stock (not counted)
				return nil, fmt.Errorf("round trips (%s): %w", sh.name, err)
			}
			if k == 0 {
				return nil, fmt.Errorf("round trips (%s): the hook saw no command of a successful Reserve", sh.name)
			}
			counts = append(counts, k)
			out.Hist[k]++
		}
		slices.Sort(counts)
		out.Median, out.Max = counts[len(counts)/2], counts[len(counts)-1]
		out.CommandsPerOrder = float64(cmds) / float64(n)
		res.Shapes = append(res.Shapes, out)
	}
	return res, nil
}
