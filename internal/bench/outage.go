package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/health"
	"github.com/shardis/shardis/internal/redisproc"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/router"
)

// OutageResult is the outcome of the outage section: 1-item orders whose
// SKU has stock on every node, placed by Conc goroutines through the
// library while node Victim is killed with SIGKILL and stays down. Each
// order's id is, by a coin toss, minted by inventory.NewOrderID just
// before its Reserve (Minted) or made up by the caller (Own), so both
// kinds of order see the same load and the same outage.
type OutageResult struct {
	Conc   int    // goroutines placing orders (Plan.Conc)
	Victim string // the name of the node killed
	// Window is how long orders were counted from the kill (the node
	// stays down throughout); Detect is from the kill until the router
	// marked the node DOWN.
	Window, Detect time.Duration
	// Minted and Own count the orders started within the window by the
	// kind of their id.
	Minted, Own OutageOrders
	// OpsBefore is orders/s in the second before the kill, OpsDuring
	// successful orders/s (both kinds) within the window.
	OpsBefore, OpsDuring float64
}

// OutageOrders counts the orders of one id kind started within the
// outage window.
type OutageOrders struct {
	// Started and OK count the orders started within the window and those
	// of them that succeeded. Every one qualifies: its SKU has stock on
	// the two healthy nodes.
	Started, OK int64
	// StartedBeforeDetect and OKBeforeDetect are the part of them started
	// before the router marked the victim DOWN.
	StartedBeforeDetect, OKBeforeDetect int64
	// FailedHomeOnVictim counts the failed orders whose record's home
	// node (inventory.Homes) was the victim.
	FailedHomeOnVictim int64
	// Unavailable and OtherErrors split the failures: wrapping
	// inventory.ErrUnavailable, or anything else.
	Unavailable, OtherErrors int64
	// FirstErr is the first failure's message; "" when none failed.
	FirstErr string
	// HomeErr is the first failure's message of an order whose home was
	// the victim, placed after the victim was marked DOWN; "" when none.
	HomeErr string
}

// Share returns OK / Started (0 with no order started).
func (o *OutageOrders) Share() float64 {
	if o.Started == 0 {
		return 0
	}
	return float64(o.OK) / float64(o.Started)
}

// Share is the share of orders with minted ids that succeeded: the
// figure of the orders_ok_during_outage key (what a caller that mints its
// order ids gets).
func (o *OutageResult) Share() float64 { return o.Minted.Share() }

// openInventory builds a router over cfg with ropts, waits until every
// node is usable and builds an inventory on it. The router, when not nil,
// is the caller's to close (also after an error).
func openInventory(ctx context.Context, cfg *config.Config, ropts router.Options) (*router.Router, *inventory.Inventory, error) {
	ropts.KeepData = cfg.KeepData()
	r, err := router.New(ctx, cfg, ropts)
	if err != nil {
		return nil, nil, err
	}
	if err := waitUsable(r.Nodes(), 15*time.Second); err != nil {
		return r, nil, err
	}
	inv, err := inventory.New(r, inventory.Options{Logger: ropts.Logger})
	return r, inv, err
}

type orderRecord struct {
	at         int64 // start, ns since the load began
	minted     bool  // the id came from inventory.NewOrderID
	ok         bool
	homeVictim bool
	unavail    bool
	err        string // the failure, kept for the first ones of each kind
}

// RunOutage starts three redis-server nodes, a router with the
// benchmark's configuration (default health settings) and an inventory,
// loads 10⁹ units of p.SKUs SKUs on the route over every node (split over
// the nodes), puts p.Conc goroutines of 1-item orders on it, kills node
// n1 with SIGKILL after p.FailoverWarmup+p.FailoverBefore and counts the
// orders started in the p.OutageWindow that follows.
func RunOutage(ctx context.Context, p Plan, log *slog.Logger, progress func(string)) (*OutageResult, error) {
	servers, addrs, stopNodes, err := startNodes(redisproc.Options{KillWithParent: true})
	defer stopNodes()
	if err != nil {
		return nil, err
	}
	cfg := BenchConfig(addrs)
	var downAt atomic.Int64
	t0 := time.Now()
	r, inv, err := openInventory(ctx, cfg, router.Options{Logger: log, OnStateChange: func(ev health.Event) {
		if ev.Target == nodeNames[0] && !ev.Up {
			downAt.CompareAndSwap(0, int64(time.Since(t0)))
		}
	}})
	if r != nil {
		defer r.Close()
	}
	if inv != nil {
		defer inv.Close() // before the router's
	}
	if err != nil {
		return nil, err
	}
	skus := make([]string, p.SKUs)
	for k := range skus {
		skus[k] = "o-" + strconv.Itoa(k)
		lvl, err := inv.LoadStock(ctx, routeAll, skus[k], inventory.MaxQuantity, 0)
		if err != nil {
			return nil, err
		}
		with := 0
		for _, ns := range lvl.Nodes {
			if ns.Available > 0 {
				with++
			}
		}
		if with != len(nodeNames) {
			return nil, fmt.Errorf("outage: %s has stock on %d nodes, want every node", skus[k], with)
		}
	}
	// The order homes, as inventory.New places them: to tell which
	// failed orders had their record on the dead node.
	homes, err := inventory.NewHomes(cfg)
	if err != nil {
		return nil, err
	}

	var (
		stop    atomic.Bool
		wg      sync.WaitGroup
		recs    = make([][]orderRecord, p.Conc)
		workers = NewLoad(p.Conc, 13).workers
	)
	for i, w := range workers {
		wg.Add(1)
		go func(i int, w *Worker) {
			defer wg.Done()
			out := make([]orderRecord, 0, 1<<14)
			for !stop.Load() {
				rec := orderRecord{at: int64(time.Since(t0)), minted: w.Rng.IntN(2) == 0}
				id := orderID(w, 'x')
				var err error
				if rec.minted {
					id, err = inv.NewOrderID(ctx)
				}
				if err == nil {
					items := []inventory.Item{{Route: routeAll, SKU: skus[w.Rng.IntN(len(skus))], Quantity: 1}}
					_, err = inv.Reserve(ctx, id, items, "", 0)
				}
				rec.ok = err == nil
				if err != nil {
					rec.homeVictim = id != "" && homes.Home(id) == nodeNames[0]
					rec.unavail = errors.Is(err, inventory.ErrUnavailable)
					rec.err = err.Error()
				}
				out = append(out, rec)
			}
			recs[i] = out
		}(i, w)
	}
	time.Sleep(p.FailoverWarmup + p.FailoverBefore)
	kill := int64(time.Since(t0))
	killErr := servers[0].Kill()
	if killErr == nil {
		time.Sleep(p.OutageWindow)
	}
	stop.Store(true)
	wg.Wait()
	if killErr != nil {
		return nil, killErr
	}
	res := &OutageResult{Conc: p.Conc, Victim: nodeNames[0], Window: p.OutageWindow}
	down := downAt.Load()
	if down == 0 {
		return nil, fmt.Errorf("outage: node %s was not marked DOWN within %v of its kill", nodeNames[0], p.OutageWindow)
	}
	res.Detect = time.Duration(down - kill)
	end := kill + int64(p.OutageWindow)
	var before int64
	for _, rs := range recs {
		for _, o := range rs {
			switch {
			case o.at >= kill-int64(p.FailoverBefore) && o.at < kill && o.ok:
				before++
			case o.at >= kill && o.at < end:
				kind := &res.Own
				if o.minted {
					kind = &res.Minted
				}
				kind.count(o, down)
			}
		}
	}
	res.OpsBefore = float64(before) / p.FailoverBefore.Seconds()
	res.OpsDuring = float64(res.Minted.OK+res.Own.OK) / p.OutageWindow.Seconds()
	progress(fmt.Sprintf("outage: %d of %d orders with minted ids and %d of %d with own ids started while %s was down succeeded (%.3f, %.3f); DOWN after %v",
		res.Minted.OK, res.Minted.Started, res.Own.OK, res.Own.Started, res.Victim, res.Minted.Share(), res.Own.Share(), res.Detect.Round(time.Millisecond)))
	return res, nil
}

// count adds one order started in the window; down is when the victim
// was marked DOWN (ns since the load began).
func (k *OutageOrders) count(o orderRecord, down int64) {
	k.Started++
	if o.at < down {
		k.StartedBeforeDetect++
	}
	if o.ok {
		k.OK++
		if o.at < down {
			k.OKBeforeDetect++
		}
		return
	}
	if k.FirstErr == "" {
		k.FirstErr = o.err
	}
	if o.homeVictim {
		k.FailedHomeOnVictim++
		if k.HomeErr == "" && o.at > down {
			k.HomeErr = o.err
		}
	}
	if o.unavail {
		k.Unavailable++
	} else {
		k.OtherErrors++
	}
}
