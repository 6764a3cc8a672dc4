package bench

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redisproc"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/router"
)

// Durability variants: the same 1-item reserve over one Sentinel master
// group (a master, one replica, three sentinels), with
// inventory.durability none and replica.
const (
	VarDurNone    = "durability none"
	VarDurReplica = "durability replica (WAIT 1)"
)

// DurabilityResult is the cost of inventory.durability replica: 1-item
// reserves per second and their latency, none and replica interleaved.
type DurabilityResult struct {
	Conc     int                // concurrent goroutines of the load (Plan.Conc)
	Variants []string           // VarDurNone and VarDurReplica
	Series   map[string]*Series // each variant's samples over the rounds, by variant name
	Rounds   RoundStats         // how the rounds went (kept, discarded)
}

// Ratio returns replica's orders/s over none's, paired per round.
func (d *DurabilityResult) Ratio() float64 {
	return PairedRatio([]*Series{d.Series[VarDurReplica]}, []*Series{d.Series[VarDurNone]})
}

// RunDurability starts a Sentinel group and two routers and inventories
// over it, one per durability level, and measures 1-item reserves of
// each, interleaved in rounds. Every reserve of the replica variant runs
// its scripts followed by WAIT 1 on the same connection (begin, reserve,
// commit: three WAITs per order).
func RunDurability(ctx context.Context, p Plan, log *slog.Logger, progress func(string)) (*DurabilityResult, error) {
	g, err := redisproc.StartGroup(redisproc.GroupOptions{Name: "bench", KillWithParent: true})
	if err != nil {
		return nil, err
	}
	defer g.Close()
	pids := func() []int {
		var out []int
		for _, s := range append(append([]*redisproc.Server(nil), g.Data...), g.Sentinels...) {
			out = append(out, s.Pid())
		}
		return out
	}
	meter := NewCPUMeter(pids)
	invs := map[string]*inventory.Inventory{}
	for v, level := range map[string]string{VarDurNone: config.DurabilityNone, VarDurReplica: config.DurabilityReplica} {
		cfg := config.Default()
		cfg.Nodes = map[string]config.Node{"n1": {Weight: 1, Sentinel: config.Sentinel{Master: g.Name, Addrs: g.SentinelAddrs()}}}
		cfg.Servers = map[string]config.Server{invServer: {OnNodeDown: config.OnNodeDownFail, Routes: map[string][]string{routeAll: {"n1"}}}}
		cfg.Inventory.Durability = level
		if err := cfg.Validate(); err != nil {
			return nil, err
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		r, err := router.New(rctx, &cfg, router.Options{KeepData: cfg.KeepData(), Logger: log})
		cancel()
		if err != nil {
			return nil, err
		}
		defer r.Close()
		if err := waitUsable(r.Nodes(), 10*time.Second); err != nil {
			return nil, err
		}
		if invs[v], err = inventory.New(r, inventory.Options{Logger: log}); err != nil {
			return nil, err
		}
		defer invs[v].Close() // before its router's Close (deferred first)
	}
	const skus = 16
	for k := 0; k < skus; k++ {
		if _, err := invs[VarDurNone].LoadStock(ctx, routeAll, fmt.Sprintf("d-%d", k), inventory.MaxQuantity, 0); err != nil {
			return nil, fmt.Errorf("durability: load: %w", err)
		}
	}
	items := make([][]inventory.Item, skus)
	for k := range items {
		items[k] = []inventory.Item{{Route: routeAll, SKU: fmt.Sprintf("d-%d", k), Quantity: 1}}
	}
	op := func(inv *inventory.Inventory, prefix byte) Op {
		return func(w *Worker) error {
			_, err := inv.Reserve(ctx, orderID(w, prefix), items[w.Rng.IntN(skus)], "", 0)
			return err
		}
	}
	ops := map[string]Op{VarDurNone: op(invs[VarDurNone], 'n'), VarDurReplica: op(invs[VarDurReplica], 'r')}
	variants := []string{VarDurNone, VarDurReplica}
	res := &DurabilityResult{Conc: p.Conc, Variants: variants, Series: map[string]*Series{}}
	for _, v := range variants {
		res.Series[v] = &Series{Name: v}
	}
	load := NewLoad(p.Conc, 5)
	for _, v := range variants {
		load.Run(p.Warmup, ops[v])
	}
	st, err := runRounds(p, meter, progress, "durability", func(int) (func(), string, error) {
		got := map[string]Sample{}
		for _, v := range variants {
			got[v] = load.Run(p.Round, ops[v])
		}
		return func() {
				for v, s := range got {
					res.Series[v].Add(s)
				}
			}, fmt.Sprintf("1-item orders/s none %.0f (p99 %v), replica %.0f (p99 %v)",
				got[VarDurNone].OpsPerSec(), got[VarDurNone].P99.Round(time.Microsecond),
				got[VarDurReplica].OpsPerSec(), got[VarDurReplica].P99.Round(time.Microsecond)), nil
	})
	res.Rounds = st
	return res, err
}

// DurabilityTable renders the durability section.
func DurabilityTable(d *DurabilityResult) string {
	var b strings.Builder
	b.WriteString("| 1-item reserve | orders/s | p50 | p99 |\n| --- | ---: | ---: | ---: |\n")
	for _, v := range d.Variants {
		s := d.Series[v]
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", v, fmtOps(s.Ops()), fmtDur(s.P50()), fmtDur(s.P99()))
	}
	b.WriteString(failures(seriesOf(d.Variants, d.Series)))
	fmt.Fprintf(&b, "\nreplica / none orders/s (paired per round): **%.3f**; p99 %s → %s.\n", d.Ratio(),
		fmtDur(d.Series[VarDurNone].P99()), fmtDur(d.Series[VarDurReplica].P99()))
	return b.String()
}
