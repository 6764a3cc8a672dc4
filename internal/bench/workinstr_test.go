package bench

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
)

// TestWorkloadInstructions counts the instructions the nodes run per
// order in the bench's own workloads: each row that a floor target names
// (inventory_hot_sku_minted_vs_floor, inventory_hot_sku_vs_floor,
// inventory_3item_vs_floor) beside its floor row and the guarded floor's
// (floorguard.go: the floor with the checks shardis's promises make every
// reservation pay), run as the bench runs
// them (invWorkloads: 64 goroutines, group commit, the same stock, ids
// and routes) on the bench's three nodes, all under valgrind's callgrind
// (redistest.UnderCallgrind). A row's count is the three nodes' whole
// processes (the scripts, the commands, the event loop, the network
// reads and writes, the health probes, the Lua heap's collections) over a
// run of WORKLOAD_SECONDS (4 when unset) after a warm-up of a third of
// that, divided by the orders it answered; the rows alternate, in three
// rounds, and a row's figure is its rounds' median (a row's rounds have
// differed by up to 6 %: how many orders a script call carries moves
// with the timing). The scripts' unit
// measures (TestFloorScriptInstructions, inventory's
// Test…ScriptInstructions) price one script call's pieces; this one
// prices what the nodes did for the orders, which a timed run measures
// too but moves by 10-20 % with the machine's load. Two things differ
// from a timed run: the nodes run about 50 times slower, so more orders
// wait per script call (the script calls per order it prints say how
// many; the floor's batches grow alike), and a count prices no cache
// miss. It is a measure, not a check: it runs only with SHARDIS_CALLGRIND
// set and valgrind installed (about five minutes), e.g.
//
//	SHARDIS_CALLGRIND=1 go test -count=1 -run TestWorkloadInstructions -v ./internal/bench/
func TestWorkloadInstructions(t *testing.T) {
	cg := redistest.UnderCallgrind(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	// nodes many times slower: a probe or a group call must not time out
	c, err := startCluster(ctx, false, false, log, func(cfg *config.Config) {
		cfg.Health.Timeout = 10 * time.Second
		cfg.Client.CommandTimeout = 30 * time.Second
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	wl, err := invWorkloads(ctx, c, QuickPlan().SKUs)
	if err != nil {
		t.Fatal(err)
	}
	d := 4 * time.Second
	if s, err := time.ParseDuration(os.Getenv("WORKLOAD_SECONDS") + "s"); err == nil && s > 0 {
		d = s
	}
	// each row, its floor, the guarded floor's, and the guarded floor's
	// one-round form for a row that answers in one round with its record
	// elsewhere ("" for the minted row: its orders are one entry)
	pairs := []struct{ row, floor, guarded, oneRound, key string }{
		{VarHot1Minted, VarHotFloorLocal, VarHotFloorLocalGuarded, "", "inventory_hot_sku_minted_vs_floor"},
		{VarHot1, VarHotFloor, VarHotFloorGuarded, VarHotFloorOneRoundGuarded, "inventory_hot_sku_vs_floor"},
		{VarInv3, VarFloor3, VarFloor3Guarded, VarFloor3OneRoundGuarded, "inventory_3item_vs_floor"},
	}
	var variants []string
	for _, p := range pairs {
		variants = append(variants, p.row, p.floor, p.guarded)
		if p.oneRound != "" {
			variants = append(variants, p.oneRound)
		}
	}
	const rounds = 3
	perOrder := map[string][]float64{}
	calls := map[string][]float64{}
	load := NewLoad(64, 2)
	for range rounds {
		for _, v := range variants {
			if err := c.Reset(ctx); err != nil {
				t.Fatal(err)
			}
			if err := wl[v].setup(ctx); err != nil {
				t.Fatal(err)
			}
			if s := load.Run(d/3, wl[v].op); s.Errors > 0 {
				t.Fatalf("%s: %d orders failed warming up: %s", v, s.Errors, s.FirstErr)
			}
			var s Sample
			counts := cg.CountAll(ctx, c.Admin, func() { s = c.measure(load, d, wl[v].op) })
			if s.Errors > 0 || s.Ops == 0 {
				t.Fatalf("%s: %d orders answered, %d failed: %s", v, s.Ops, s.Errors, s.FirstErr)
			}
			sum := 0.0
			for _, n := range counts {
				sum += n
			}
			perOrder[v] = append(perOrder[v], sum/float64(s.Ops))
			calls[v] = append(calls[v], float64(s.Scripts)/float64(s.Ops))
			t.Logf("%s: %d orders, %.3f script calls per order, %.0f node instructions per order (per node %.0f)",
				v, s.Ops, float64(s.Scripts)/float64(s.Ops), sum/float64(s.Ops), perNode(counts, s.Ops))
		}
	}
	for _, p := range pairs {
		row, floor, guarded := medianF(perOrder[p.row]), medianF(perOrder[p.floor]), medianF(perOrder[p.guarded])
		t.Logf("%s: %.0f node instructions per order (%.3f script calls) against the floor's %.0f (%.3f) and the guarded floor's %.0f (%.3f): the floor's count over shardis's %.3f, over the guarded floor's %.3f; the guarded floor's over shardis's %.3f",
			p.key, row, medianF(calls[p.row]), floor, medianF(calls[p.floor]), guarded, medianF(calls[p.guarded]),
			floor/row, floor/guarded, guarded/row)
		if p.oneRound != "" {
			one := medianF(perOrder[p.oneRound])
			t.Logf("%s: the guarded floor in one round %.0f (%.3f script calls): the floor's count over it %.3f, it over shardis's %.3f",
				p.key, one, medianF(calls[p.oneRound]), floor/one, one/row)
		}
	}
}

// perNode is counts per order, node by node.
func perNode(counts []float64, orders int64) []float64 {
	out := make([]float64, len(counts))
	for i, n := range counts {
		out[i] = n / float64(orders)
	}
	return out
}
