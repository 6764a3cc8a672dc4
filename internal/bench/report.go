package bench

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// fmtOps formats a throughput with thousands separators.
func fmtOps(x float64) string {
	n := int64(x + 0.5)
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// fmtDur formats a latency: µs below 1 ms, ms with one decimal above.
func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "–"
	case d < time.Millisecond:
		return fmt.Sprintf("%d µs", d.Microseconds())
	case d < 10*time.Second:
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	}
	return d.Round(time.Millisecond).String()
}

// fmtCPU formats CPU time per operation in µs.
func fmtCPU(d time.Duration) string {
	if d <= 0 {
		return "0"
	}
	return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond))
}

func fmtMs(d time.Duration) string {
	return fmt.Sprintf("%d ms", d.Round(time.Millisecond).Milliseconds())
}

func yes(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

// MachineTable renders the machine description.
func MachineTable(m Machine) string {
	var b strings.Builder
	b.WriteString("| | |\n| --- | --- |\n")
	fmt.Fprintf(&b, "| date | %s |\n", m.Date.Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&b, "| CPU | %s, %d cores (GOMAXPROCS %d) |\n", m.CPU, m.Cores, m.GOMAXPROCS)
	fmt.Fprintf(&b, "| OS | %s |\n", m.Kernel)
	fmt.Fprintf(&b, "| Go | %s |\n", m.Go)
	fmt.Fprintf(&b, "| Redis | redis-server %s |\n", m.Redis)
	fmt.Fprintf(&b, "| twemproxy | %s |\n", m.Twemproxy)
	return b.String()
}

// TargetsTable renders every target with its measured value.
func TargetsTable(r *Results, s Summary) string {
	var b strings.Builder
	b.WriteString("| target | measured | |\n| --- | --- | --- |\n")
	rendered := map[string]bool{}
	row := func(target, measured, key string) {
		ok, present := s.Targets[key]
		if !present {
			return
		}
		rendered[key] = true
		fmt.Fprintf(&b, "| %s | %s | %s |\n", target, measured, yes(ok))
	}
	row("router ≥ 3 × hand-routed go-redis (GET+SET ops/s)", fmt.Sprintf("%.3f", s.RouterVsDirect), "router_vs_direct>=3.0")
	row("router ≥ 3 × go-redis Ring", fmt.Sprintf("%.3f", s.RouterVsRing), "router_vs_ring>=3.0")
	row("router ≥ 3 × twemproxy", fmt.Sprintf("%.3f", s.RouterVsTwemproxy), "router_vs_twemproxy>=3.0")
	row("router ≥ 0.95 × hand-routed go-redis with AutoPipeline()", fmt.Sprintf("%.3f", s.RouterVsDirectAP), "router_vs_direct_autopipelined>=0.95")
	row("one caller's p50 latency with auto-pipelining ≤ 1.10 × without", fmt.Sprintf("%.3f (worst of GET, 1-item reserve)", s.SingleCallerLatencyRatio), "single_caller_latency_ratio<=1.10")
	row("routing one key < 250 ns, 0 allocs", fmt.Sprintf("%.1f ns, %d allocs", s.RouteLookupNs, s.RouteLookupAllocs), "route_lookup<250ns,0allocs")
	row("3-item orders ≥ 2 × the seed baseline", fmt.Sprintf("%.3f", s.Inventory3ItemVsSeed), "inventory_3item_vs_seed>=2")
	row("hot SKU on one node ≥ 2 × the seed baseline (1-item orders, orders/s)", fmt.Sprintf("%.3f", s.InventoryHotVsSeed), "inventory_hot_sku_vs_seed>=2")
	for _, f := range VsFloor {
		measured := fmt.Sprintf("%.3f", *f.Field(&s))
		if ir := r.Inventory; ir != nil {
			if lo, hi, ok := ir.OverRange(f.Shardis, f.Floor); ok {
				measured += fmt.Sprintf(" (its %d rounds: %.3f to %.3f)", len(ir.Series[f.Shardis].Samples), lo, hi)
			}
		}
		row(f.What+" ≥ 0.8 × its floor row (orders/s, paired per round)", measured, f.Key+">=0.8")
	}
	row("hot SKU on one node, ids minted by `NewOrderID` ≥ 1.5 × the seed baseline", fmt.Sprintf("%.3f", s.InventoryHotMintedVsSeed), "inventory_hot_sku_minted_vs_seed>=1.5")
	row("sold-out SKU, its units confirmed (none reserved): refused orders ≥ 1 × the seed's refusing EVAL (1-item orders, distinct ids, orders/s)", fmt.Sprintf("%.3f", s.InventorySoldOutVsSeed), "inventory_soldout_vs_seed>=1.0")
	if k := r.Inventory; k != nil && k.SoldOutKeys != nil {
		row("sold-out SKU, its units confirmed (none reserved): 0 keys left on the nodes per refused order (DBSIZE before/after, witness hashes left out; with units still reserved each refusal writes its fence: section 3)",
			fmt.Sprintf("%.3f (%d keys after %d refusals)", k.SoldOutKeys.PerRefusal(), k.SoldOutKeys.Keys, k.SoldOutKeys.Refused), "soldout_keys_per_refusal==0")
	}
	if m := r.Memory; m != nil {
		row(fmt.Sprintf("node memory per pending 1-item order ≤ 500 B (used_memory less client buffers, summed over the nodes, slope over %d orders; the median of %d runs)", m.Orders, max(len(m.Rounds), 1)),
			fmt.Sprintf("%.0f B (runs: %s; %s)", m.PerOrder(), m.RoundsPerOrder(), m.Breakdown()), "reserve_bytes_per_order_1item<=500")
	}
	if ir := r.Inventory; ir != nil {
		for _, x := range []struct{ shape, key, what string }{
			{RTShape1, "reserve_round_trips_1item==1", "a 1-item reserve"},
			{RTShape3, "reserve_round_trips_3item==1", "a 3-item reserve"},
			{RTShapeStaged, "reserve_round_trips_3item==1", "a 3-item reserve on three one-node routes"},
		} {
			if sh := ir.RoundTrips.Shape(x.shape); sh != nil {
				row(x.what+" takes 1 sequential round trip",
					fmt.Sprintf("median %d, max %d (%d orders, counted)", sh.Median, sh.Max, sh.Orders), x.key)
			}
		}
	}
	row("1-item reserve through `shardis serve` (Connect) ≥ 0.7 × the library (orders/s)", fmt.Sprintf("%.3f", s.RPCVsLibrary), "rpc_vs_library>=0.7")
	row("the service's CPU per 1-item reserve ≤ 2 × the library caller's", fmt.Sprintf("%.1f µs against %.1f µs", s.RPCServerCPUUs, s.LibraryCPUUs), "rpc_server_cpu_us_1item<=2x_library")
	row("shardis sync keeps up with the full reserve rate (drain ≤ 1 s, lag p99 ≤ 1 s)",
		fmt.Sprintf("%.0f parts/s landed, lag p99 %.0f ms", s.SyncLandedPerSec, s.SyncLagP99Ms), "sync_keeps_up")
	row("failure detected within 1 s (default settings)", fmt.Sprintf("%.0f ms (worst cycle)", s.DetectMs), "detect<=1s")
	row("recovery noticed within 2 s of the node accepting connections", fmt.Sprintf("%.0f ms (worst cycle, default backoff)", s.RecoverMs), "recover<=2s")
	if o := r.Outage; o != nil && o.Minted.Started > 0 {
		row("≥ 99 % of orders started while one node is down succeed (stock on every node; ids minted by `NewOrderID`)",
			fmt.Sprintf("%.3f (%d of %d; ids the caller made up: %.3f)", o.Share(), o.Minted.OK, o.Minted.Started, o.Own.Share()), "orders_ok_during_outage>=0.99")
	}
	// a target without a row above still shows, by its summary key
	for _, key := range slices.Sorted(maps.Keys(s.Targets)) {
		if !rendered[key] {
			row("`"+key+"`", "see the summary line", key)
		}
	}
	return b.String()
}

// LatencyTable renders the single-caller latency section.
func LatencyTable(lr *LatencyResult) string {
	var b strings.Builder
	b.WriteString("| variant | ops/s | p50 | p99 |\n| --- | ---: | ---: | ---: |\n")
	for _, v := range lr.Variants {
		x := lr.Series[v]
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", v, fmtOps(x.Ops()), fmtDur(x.P50()), fmtDur(x.P99()))
	}
	fmt.Fprintf(&b, "\np50 on/off (median of per-round ratios): GET %.3f, 1-item reserve %.3f.\n", lr.Ratio("GET"), lr.Ratio("reserve"))
	if lr.FewRatio(6) > 0 {
		fmt.Fprintf(&b, "GET ops/s on/off (paired per round): 6 goroutines %.3f, 12 goroutines %.3f (`few_callers_throughput_ratio`: the smaller).\n",
			lr.FewRatio(6), lr.FewRatio(12))
		b.WriteString("\nIn the 6- and 12-goroutine rounds, which run after the one-goroutine rounds, o" + roundsNote(lr.FewRounds)[1:])
	}
	return b.String()
}

// RouterTable renders the router-throughput section.
func RouterTable(rr *RouterResult) string {
	var b strings.Builder
	b.WriteString("| client | GET ops/s | GET p50 | GET p99 | SET ops/s | SET p50 | SET p99 | GET+SET vs direct | GET CPU/op: client + redis + proxy | GET allocs/op |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, v := range rr.Variants {
		g, s := rr.Get("GET", v), rr.Get("SET", v)
		cl, sv, px := g.CPUPerOp()
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %.3f | %s + %s + %s | %.1f |\n", v,
			fmtOps(g.Ops()), fmtDur(g.P50()), fmtDur(g.P99()),
			fmtOps(s.Ops()), fmtDur(s.P50()), fmtDur(s.P99()), rr.Ratio(v, VarDirect),
			fmtCPU(cl), fmtCPU(sv), fmtCPU(px), g.AllocsPerOp())
	}
	b.WriteString(failures(func(yield func(string, *Series) bool) {
		for _, op := range []string{"GET", "SET"} {
			for _, v := range rr.Variants {
				if !yield(op+" "+v, rr.Get(op, v)) {
					return
				}
			}
		}
	}))
	fmt.Fprintf(&b, "\nRatios of the router (`Router.Client`), GET+SET ops/s: **b/a = %.3f** (vs hand-routed go-redis), "+
		"**b/c = %.3f** (vs go-redis Ring), **b/d = %.3f** (vs twemproxy).\n",
		rr.Ratio(VarRouter, VarDirect), rr.Ratio(VarRouter, VarRing), rr.Ratio(VarRouter, VarTwemproxy))
	return b.String()
}

// LookupTable renders the routing-cost section.
func LookupTable(ls []LookupResult) string {
	var b strings.Builder
	b.WriteString("| lookup (3-node ring, 1024 keys cycled) | ns/op | allocs/op | B/op |\n| --- | ---: | ---: | ---: |\n")
	for _, l := range ls {
		fmt.Fprintf(&b, "| `%s` | %.1f | %d | %d |\n", l.Name, l.NsPerOp, l.AllocsPerOp, l.BytesPerOp)
	}
	return b.String()
}

// InventoryTable renders the inventory section.
func InventoryTable(ir *InvResult) string {
	var b strings.Builder
	b.WriteString("| workload | orders/s | p50 | p99 | CPU/order: client | CPU/order: redis (3 nodes) | script calls/order | script run time/order | commands in scripts/order |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, v := range ir.Variants {
		s := ir.Series[v]
		cl, sv, _ := s.CPUPerOp()
		scripts, exec, cmds := s.ServerPerOp()
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %.2f | %s | %.1f |\n", v, fmtOps(s.Ops()), fmtDur(s.P50()), fmtDur(s.P99()),
			fmtCPU(cl), fmtCPU(sv), scripts, fmtCPU(exec), cmds)
	}
	b.WriteString(failures(seriesOf(ir.Variants, ir.Series)))
	fmt.Fprintf(&b, "\n3-item orders, shardis / seed baseline (paired per round): **%.3f**. "+
		"Hot SKU split over 3 nodes / on 1 node: **%.3f**.\n",
		PairedRatio([]*Series{ir.Series[VarInv3]}, []*Series{ir.Series[VarSeed3]}),
		PairedRatio([]*Series{ir.Series[VarHot3]}, []*Series{ir.Series[VarHot1]}))
	if h := ir.HotVsSeed(); h > 0 {
		fmt.Fprintf(&b, "Hot SKU on 1 node, shardis / seed baseline on the same node (paired per round): **%.3f**.\n", h)
	}
	b.WriteString(soldOutLine("its units confirmed (nothing reserved)", ir.SoldOutVsSeed(), ir.SoldOutKeys))
	b.WriteString(soldOutLine("its last unit reserved, not confirmed (each refusal writes its fence, a failed record)", ir.SoldOutReservedVsSeed(), ir.SoldOutReservedKeys))
	if g3, gh := ir.GroupGain(VarInv3), ir.GroupGain(VarHot1); g3 > 0 && gh > 0 {
		fmt.Fprintf(&b, "Group commit on / off (`inventory.group_commit` 32 / 1, same router, paired per round): 3-item orders **%.3f**, hot SKU on 1 node **%.3f**. With group commit off, one-round commits still ride the next script call on their home node (`inventory/carry.go`, its own setting).\n", g3, gh)
	}
	if len(ir.Allocs) > 0 {
		b.WriteString("\nOne order at a time (one goroutine, `testing.Benchmark`; allocations of the whole call, go-redis included, plus building the order id and items):\n\n")
		b.WriteString("| order | latency | allocs/op | B/op |\n| --- | ---: | ---: | ---: |\n")
		for _, a := range ir.Allocs {
			fmt.Fprintf(&b, "| %s | %s | %d | %d |\n", a.Name, fmtDur(time.Duration(a.NsPerOp)), a.AllocsPerOp, a.BytesPerOp)
		}
	}
	if ir.RoundTrips != nil {
		b.WriteString(RoundTripTable(ir.RoundTrips))
	}
	return b.String()
}

// soldOutLine is InventoryTable's sentence on a sold-out row in state:
// its orders/s over the seed's refusing EVAL (h) and the keys its
// refusals left (k), or "" when the run has no such row.
func soldOutLine(state string, h float64, k *SoldOutKeys) string {
	if h <= 0 {
		return ""
	}
	t := fmt.Sprintf("Sold-out SKU on 1 node, every order refused, %s: shardis / the seed's refusing EVAL on the same node (paired per round): **%.3f**", state, h)
	if k != nil {
		t += fmt.Sprintf("; %d refused orders (after a warm-up) left %d keys on the nodes (%.3f per order)", k.Refused, k.Keys, k.PerRefusal())
		if len(k.New) > 0 {
			t += fmt.Sprintf(", e.g. `%s`", strings.Join(k.New, "`, `"))
		}
	}
	return t + ".\n"
}

// RPCTable renders the RPC-overhead section.
func RPCTable(rp *RPCResult) string {
	var b strings.Builder
	b.WriteString("| 1-item reserve | orders/s | p50 | p99 | CPU/order: client | CPU/order: service | CPU/order: redis |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, v := range rp.Variants {
		s := rp.Series[v]
		cl, sv, _ := s.CPUPerOp()
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", v, fmtOps(s.Ops()), fmtDur(s.P50()), fmtDur(s.P99()), fmtCPU(cl), fmtCPU(s.ServicePerOp()), fmtCPU(sv))
	}
	b.WriteString(failures(seriesOf(rp.Variants, rp.Series)))
	fmt.Fprintf(&b, "\nRPC / library (paired per round): **%.3f**.\n",
		PairedRatio([]*Series{rp.Series[VarRPC]}, []*Series{rp.Series[VarLib]}))
	return b.String()
}

// FailoverTable renders the failover section.
func FailoverTable(f *FailoverResult) string {
	var b strings.Builder
	b.WriteString("| cycle | marked DOWN after kill -9 | marked UP after it accepted connections | healthy-key GET p99 before → during | p50 before → during | healthy-key GETs/s before → during | healthy-key errors | dead-node GETs refused (p99) | healthy-node state changes | other processes' CPU |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, c := range f.Cycles {
		if !c.Load {
			fmt.Fprintf(&b, "| %s | %s | %s | – | – | – | – | – | %d | %.0f%% |\n", c.Label(), fmtMs(c.Detect), fmtMs(c.Recover), c.OtherEvents, 100*c.Foreign)
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s → %s | %s → %s | %s → %s | %d | %s (%s) | %d | %.0f%% |\n", c.Label(),
			fmtMs(c.Detect), fmtMs(c.Recover), fmtDur(c.P99Before), fmtDur(c.P99During),
			fmtDur(c.P50Before), fmtDur(c.P50During), fmtOps(c.OpsBefore), fmtOps(c.OpsDuring),
			c.HealthyErrors, fmtOps(float64(c.VictimFailed)), fmtDur(c.VictimFailedSlowP99), c.OtherEvents, 100*c.Foreign)
	}
	return b.String()
}

// Tables renders every section that ran, for the terminal and the report.
func Tables(r *Results) string {
	var b strings.Builder
	s := Summarize(r)
	b.WriteString("## Targets\n\n" + TargetsTable(r, s))
	if r.Router != nil {
		fmt.Fprintf(&b, "\n## 1. Router throughput\n\n%d goroutines, %s keys, %d-byte values, GET and SET of random keys; "+
			"medians of %d rounds of %v per variant.\n\n", r.Router.Conc, fmtOps(float64(r.Router.Keys)), r.Router.ValueSize,
			r.Plan.Rounds, r.Plan.Round)
		b.WriteString(roundsNote(r.Router.Rounds) + "\n" + RouterTable(r.Router))
	}
	if r.Latency != nil {
		fmt.Fprintf(&b, "\n## 1b. One caller and a few: auto-pipelining on and off\n\nOne goroutine (latency), then 6 and 12 goroutines (GET throughput, 2 and 4 callers per node); "+
			"the same build and nodes, `pipeline.enabled` true and false; medians of %d rounds of %v.\n\n", r.Plan.Rounds, r.Plan.Round)
		b.WriteString(roundsNote(r.Latency.Rounds) + "\n" + LatencyTable(r.Latency))
	}
	if len(r.Lookups) > 0 {
		b.WriteString("\n## 2. Routing cost\n\n" + LookupTable(r.Lookups))
	}
	if r.Inventory != nil {
		fmt.Fprintf(&b, "\n## 3. Inventory\n\n%d concurrent clients, each SKU with 10⁹ units, quantity 1 per item, no user (no per-user quota part); "+
			"orders pick from %d SKUs per route (except the hot-SKU runs); medians of %d rounds of %v.\n\n",
			r.Inventory.Conc, r.Inventory.SKUs, r.Plan.Rounds, r.Plan.Round)
		b.WriteString(roundsNote(r.Inventory.Rounds) + "\n" + InventoryTable(r.Inventory))
	}
	if r.RPC != nil {
		fmt.Fprintf(&b, "\n## 4. RPC overhead\n\n%d concurrent clients; medians of %d rounds of %v.\n\n", r.RPC.Conc, r.Plan.Rounds, r.Plan.Round)
		b.WriteString(roundsNote(r.RPC.Rounds) + "\n" + RPCTable(r.RPC))
	}
	if r.Sync != nil {
		fmt.Fprintf(&b, "\n## 4b. Database sync\n\n`shardis sync` (package pgsync, shipped settings: batch 1000, poll 100ms; in a process of its own, as users run it) landing the redo log in a local PostgreSQL "+
			"(fsync on) while %d clients reserve 1-item orders at full rate for %v; lag is from the deduction to its landing transaction; "+
			"then a backlog reserved with no sync running is landed.%s\n\n", r.Sync.Conc, r.Sync.Window, syncRunsNote(r.Sync))
		b.WriteString(SyncTable(r.Sync))
	}
	if r.Failover != nil {
		fmt.Fprintf(&b, "\n## 5. Failover\n\nkill -9 of %s (AOF nodes), %d goroutines of GETs through `Router.Client` when under load; "+
			"health settings are the defaults (heartbeat 500ms, timeout 300ms, backoff %s) unless the cycle says otherwise.\n\n",
			r.Failover.Victim, r.Failover.Conc, defaultBackoff())
		b.WriteString(FailoverTable(r.Failover))
	}
	if o := r.Outage; o != nil {
		fmt.Fprintf(&b, "\n## 5b. Orders during an outage\n\nThree redis-server nodes (no persistence), %d goroutines of 1-item reserves through the library, "+
			"each SKU's 10⁹ units split over all three nodes (so every order can be met by the healthy two); kill -9 of %s, which stays down; "+
			"orders started in the %v after the kill are counted. Each order's id is, by a coin toss, minted by `Inventory.NewOrderID` just before its Reserve (without items) or made up by the client. Default health settings.\n\n", o.Conc, o.Victim, o.Window)
		b.WriteString(OutageTable(o))
	}
	if d := r.Durability; d != nil {
		fmt.Fprintf(&b, "\n## 6. Durability replica\n\nOne Sentinel group (a master, one replica, three sentinels, no persistence), "+
			"%d goroutines of 1-item reserves through the library, `inventory.durability` none and replica (every write script followed by "+
			"`WAIT 1` on its connection: three per order); medians of %d rounds of %v.\n\n", d.Conc, r.Plan.Rounds, r.Plan.Round)
		b.WriteString(roundsNote(d.Rounds) + "\n" + DurabilityTable(d))
	}
	if c := r.Cache; c != nil {
		fmt.Fprintf(&b, "\n## 7. Read-path cache\n\nThree redis-server nodes, one route; %d goroutines reading 10 000 keys with a Zipf law "+
			"(s = 1.1), 5 %% of operations writes (cache.Invalidate, or DEL for the hand-written fill); the 10 hottest keys keep 3 replicas "+
			"through cache.Get; medians of %d rounds of %v.\n\n", c.Conc, r.Plan.Rounds, r.Plan.Round)
		b.WriteString(roundsNote(c.Rounds) + "\n" + CacheTable(c))
	}
	return b.String()
}

func seriesOf(variants []string, m map[string]*Series) func(func(string, *Series) bool) {
	return func(yield func(string, *Series) bool) {
		for _, v := range variants {
			if !yield(v, m[v]) {
				return
			}
		}
	}
}

// failures lists the series that had failed operations (they count in no
// throughput or latency figure), or says there were none.
func failures(all func(func(string, *Series) bool)) string {
	var b strings.Builder
	for name, s := range all {
		if n, first := s.Errors(); n > 0 {
			fmt.Fprintf(&b, "- %s: %d failed (first: %s)\n", name, n, first)
		}
	}
	if b.Len() == 0 {
		return "\nFailed operations: none.\n"
	}
	return "\nFailed operations (not counted in throughput or latency):\n\n" + b.String()
}

func roundsNote(st RoundStats) string {
	s := fmt.Sprintf("Other processes on the machine used a median %.0f%% of its CPU during the kept rounds (each round counted by its most disturbed run)", 100*st.MedianForeign())
	if st.Discarded > 0 {
		s += fmt.Sprintf("; %d round(s) in which they used more than %.0f%% were discarded and re-run", st.Discarded, 100*st.MaxForeign)
	}
	return s + ".\n"
}
