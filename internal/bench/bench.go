// Package bench is the benchmark suite behind `make bench` and `make
// bench-quick` (internal/cmd/bench): shardis's router against hand-routed
// go-redis clients, go-redis's Ring and twemproxy over the same three
// redis-server nodes; the cost of routing one key; inventory reservations
// against a baseline shaped like the Java seed's one-EVAL-per-item code;
// the RPC overhead of `shardis serve`; and failure detection and recovery.
//
// Every comparison runs interleaved in rounds (A B C D A B C D …) so that
// drift of the machine hits every variant alike, and reports medians over
// the rounds; ratios are medians of per-round ratios.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Plan sizes a benchmark run.
type Plan struct {
	Name      string        // the plan's name, "full" or "quick", reported as Summary.Plan
	Conc      int           // concurrent goroutines of every load
	Keys      int           // router throughput: keys
	ValueSize int           // router throughput: value bytes
	Rounds    int           // rounds of every interleaved comparison
	Round     time.Duration // one variant's run within a round
	Warmup    time.Duration // one unmeasured run per variant first
	SetPick   bool          // also measure the router through a held *Set
	SKUs      int           // inventory: SKUs per route the orders pick from
	// RoundTripOrders is how many orders of each shape the inventory
	// section counts sequential round trips over (0 = none).
	RoundTripOrders int
	// MaxForeign is the share of the machine's CPU other processes may
	// use during a round before the round is discarded and re-run.
	MaxForeign float64
	// QuietWait bounds the wait for a quiet machine before each round.
	QuietWait time.Duration
	// MaxDiscards bounds the disturbed rounds re-run per section.
	MaxDiscards int

	FailoverKeys   int            // failover: keys written to every node and read by the GET load
	FailoverWarmup time.Duration  // load before the measured window
	FailoverBefore time.Duration  // the "before" window, just before the kill
	Failover       []FailoverSpec // failover: the kill cycles to run, in order
	// OutageWindow is how long the outage section counts orders after
	// killing a node under order load.
	OutageWindow time.Duration

	// ProfileDir, when set, is where a CPU profile of this process during
	// ProfileFor of 3-item reserve load is written and read back.
	ProfileDir string
	// ProfileFor is how long that profile runs; used only with
	// ProfileDir.
	ProfileFor time.Duration
	// RPCProfile, when set, is a file the RPC section's service child
	// writes a CPU profile of its whole run to (bench --rpc-profile).
	RPCProfile string
	// SyncProfile, when set, is a file the sync section's children write a
	// CPU profile of their runs to, each over the one before: the last is
	// the backlog's, the sync landing as fast as it can (bench
	// --sync-profile).
	SyncProfile string

	// SyncFor is how long the sync section reserves at full rate with the
	// sync running; SyncBacklog how long it reserves without, for the
	// backlog the sync then drains.
	SyncFor, SyncBacklog time.Duration
	// SyncRuns is how many times the live measurement runs (each from
	// empty nodes and tables); the run with the median p99 lag is
	// reported. 0 means 1.
	SyncRuns int

	// Sections, when not empty, limits the run to these sections:
	// "lookup", "router", "latency", "inventory", "rpc", "sync", "failover",
	// "outage", "durability", "cache".
	Sections []string
}

func (p Plan) runs(section string) bool {
	return len(p.Sections) == 0 || slices.Contains(p.Sections, section)
}

// FullPlan is `make bench`: a few minutes.
func FullPlan() Plan {
	return Plan{
		Name: "full", Conc: 64, Keys: 100_000, ValueSize: 100,
		Rounds: 5, Round: 2 * time.Second, Warmup: 500 * time.Millisecond, SetPick: true, SKUs: 16,
		RoundTripOrders: 501,
		MaxForeign:      0.10, QuietWait: 20 * time.Second, MaxDiscards: 5,
		ProfileDir: "bin/bench", ProfileFor: 5 * time.Second,
		SyncFor: 10 * time.Second, SyncBacklog: 3 * time.Second, SyncRuns: 3,
		FailoverKeys: 30_000, FailoverWarmup: 500 * time.Millisecond, FailoverBefore: 1500 * time.Millisecond,
		OutageWindow: 3 * time.Second,
		Failover: []FailoverSpec{
			{Load: true, Outage: time.Second},
			{Load: true, Outage: 2 * time.Second},
			{Load: true, Outage: 4 * time.Second},
			{Load: true, Outage: 8 * time.Second},
			{Load: false, Outage: time.Second},
			{Load: false, Outage: time.Second},
			{Load: false, Outage: time.Second},
			// The backoff shardis shipped with before its cap came down to 1.5s:
			// fewer dials to a dead node, slower recovery after long outages.
			{Load: true, Outage: 8 * time.Second, Backoff: []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}},
		},
	}
}

// QuickPlan is `make bench-quick`: the same measurements, shortened to
// take about two minutes.
func QuickPlan() Plan {
	return Plan{
		Name: "quick", Conc: 64, Keys: 100_000, ValueSize: 100,
		Rounds: 3, Round: 700 * time.Millisecond, Warmup: 300 * time.Millisecond, SKUs: 16,
		RoundTripOrders: 201,
		MaxForeign:      0.10, QuietWait: time.Second, MaxDiscards: 1,
		SyncFor: 4 * time.Second, SyncBacklog: 1500 * time.Millisecond,
		FailoverKeys: 30_000, FailoverWarmup: 300 * time.Millisecond, FailoverBefore: time.Second,
		Failover:     []FailoverSpec{{Load: true, Outage: 2 * time.Second}},
		OutageWindow: 2 * time.Second,
	}
}

// Results is everything one run measured.
type Results struct {
	Plan      Plan           // the plan the run followed
	Machine   Machine        // the machine it ran on
	Started   time.Time      // when the run began
	Took      time.Duration  // how long the whole run took
	Lookups   []LookupResult // routing cost (RunLookups); nil when the lookup section did not run
	Router    *RouterResult  // router throughput; nil when the section did not run
	Latency   *LatencyResult // single-caller latency; nil when the section did not run
	Inventory *InvResult     // inventory reservations; nil when the section did not run
	// Memory is node memory per pending 1-item order (memory.go).
	Memory   *MemoryResult   `json:",omitempty"`
	RPC      *RPCResult      // `shardis serve` against the library; nil when the section did not run
	Sync     *SyncResult     // the redo-log sync to PostgreSQL; nil when the section did not run
	Failover *FailoverResult // kill -9 cycles; nil when the section did not run
	// Outage is order success while a node is down (outage.go).
	Outage *OutageResult
	// Profile is the CPU profile of 3-item reserves; nil unless
	// Plan.ProfileDir is set and the inventory section ran.
	Profile *ProfileResult
	// Durability is the cost of inventory.durability replica over a
	// Sentinel group (durability.go).
	Durability *DurabilityResult
	// Cache is the read-path cache against a hand-written fill
	// (cachebench.go).
	Cache *CacheResult
}

// Run runs every section of the plan. progress receives one line per
// finished step.
func Run(ctx context.Context, p Plan, log *slog.Logger, progress func(string)) (*Results, error) {
	res := &Results{Plan: p, Machine: DescribeMachine(), Started: time.Now()}
	defer func() { res.Took = time.Since(res.Started) }()

	c, err := StartCluster(ctx, false, true, log)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	progress(fmt.Sprintf("nodes %v, twemproxy %s (pid %d)", c.Addrs, c.Twemproxy.Addr(), c.Twemproxy.Pid()))

	if p.runs("lookup") {
		res.Lookups = RunLookups(c.Router, c.HandRing)
		for _, l := range res.Lookups {
			progress(fmt.Sprintf("lookup %s: %.1f ns/op, %d allocs/op", l.Name, l.NsPerOp, l.AllocsPerOp))
		}
	}
	if p.runs("router") {
		if res.Router, err = RunRouter(ctx, c, p, progress); err != nil {
			return res, err
		}
	}
	if p.runs("latency") {
		if res.Latency, err = RunSingleCaller(ctx, c, p, progress); err != nil {
			return res, err
		}
	}
	if p.runs("inventory") {
		if res.Inventory, err = RunInventory(ctx, c, p, progress); err != nil {
			return res, err
		}
	}
	if p.runs("inventory") && p.ProfileDir != "" {
		waitQuiet(c.Meter, p.MaxForeign, p.QuietWait, progress)
		if res.Profile, err = ProfileReserve(ctx, c, p, p.ProfileFor, p.ProfileDir); err != nil {
			return res, err
		}
		progress(fmt.Sprintf("profiled the 3-item reserve into %s (%.0f orders/s while profiling)", res.Profile.Path, res.Profile.Orders))
	}
	if p.runs("memory") {
		if res.Memory, err = RunMemory(ctx, c, progress); err != nil {
			return res, err
		}
	}
	if p.runs("rpc") {
		if res.RPC, err = RunRPC(ctx, c, p, progress); err != nil {
			return res, err
		}
	}
	if p.runs("sync") {
		if res.Sync, err = RunSync(ctx, c, p, progress); err != nil {
			return res, err
		}
	}
	// The throughput nodes and twemproxy are done: stop them so the
	// failover nodes have the machine to themselves.
	c.Close()
	if p.runs("failover") {
		if res.Failover, err = RunFailover(ctx, p, log, progress); err != nil {
			return res, err
		}
	}
	if p.runs("outage") {
		if res.Outage, err = RunOutage(ctx, p, log, progress); err != nil {
			return res, err
		}
	}
	if p.runs("durability") {
		if res.Durability, err = RunDurability(ctx, p, log, progress); err != nil {
			return res, err
		}
	}
	if p.runs("cache") {
		if res.Cache, err = RunCache(ctx, p, log, progress); err != nil {
			return res, err
		}
	}
	return res, nil
}

// SaveResults writes r as JSON, so the report can be rendered again
// (RenderResults) without measuring again.
func SaveResults(r *Results, path string) error {
	b, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// LoadResults reads results written by SaveResults.
func LoadResults(path string) (*Results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Results
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}
