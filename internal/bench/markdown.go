package bench

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/shardis/shardis/config"
)

// Markdown renders the whole report (BENCHMARKS.md): machine, method,
// targets, a reading of the numbers, every table, the causes of the
// misses and the profile of the reserve path. Every figure in it comes
// from the run r but those marked "measured apart by" (apart): the node
// instruction counts and script timings that the floor misses quote
// (floorMisses, coldReading, commitReading), measured by tests run apart
// from any benchmark run (TestLocalScriptInstructions,
// TestFloorScriptInstructions, TestTakeScriptInstructions,
// TestStageScriptInstructions, TestTakeColdScriptInstructions,
// TestLocalScriptCost, TestWorkloadInstructions) or by timed runs of
// another build; the header names the tests whose figures it quotes.
func Markdown(r *Results) string {
	var b strings.Builder
	s := Summarize(r)
	b.WriteString("## Machine\n\n" + MachineTable(r.Machine) + "\n")
	b.WriteString(method(r))
	b.WriteString("\n## Reading the numbers\n\n" + reading(r, s) + "\n")
	b.WriteString("\n" + Tables(r))
	if m := misses(r, s); m != "" {
		b.WriteString("\n## Why the misses\n\n" + m)
	}
	if r.Profile != nil {
		b.WriteString("\n## Reserve path: CPU profile\n\n" + profileSection(r))
	}
	if m := r.Memory; m != nil && len(m.Layouts) > 0 {
		b.WriteString("\n## Record layouts, measured\n\n" + LayoutsTable(m.Layouts))
	}
	b.WriteString(reproduce)
	return header(r, b.String()) + b.String()
}

// header is the report's title and opening paragraph over body: which
// run its figures come from and, when body quotes figures measured apart
// (apart), which tests measured them.
func header(r *Results, body string) string {
	figures := "Every figure below comes from that run: rerun it to refresh them."
	if tests := apartTests(body); len(tests) > 0 {
		figures = fmt.Sprintf("Every figure below comes from that run except those marked *measured apart*: the node instruction counts and script timings that \"Why the misses\" quotes "+
			"to explain a missed floor target, measured by tests run apart from any benchmark run (%s) or, where it says so, by timed runs of another build. "+
			"Rerun the benchmark to refresh the run's figures; the quoted ones change only when those tests run again.", strings.Join(tests, ", "))
	}
	return fmt.Sprintf("# Benchmarks\n\nWritten by `make bench` (`go run ./internal/cmd/bench --out BENCHMARKS.md`) on %s; the run took %v. "+
		"%s `make bench-quick` runs the same measurements, shortened, and prints them with a JSON summary.\n\n",
		r.Machine.Date.Format("2006-01-02 15:04 MST"), r.Took.Round(time.Second), figures)
}

// apart marks figures the report quotes from tests run apart from the run
// (named, as `Test…`) or from other measures (what): a reader tells them
// from the run's own figures by it, and the header names every test it
// marks (apartTests).
func apart(what ...string) string {
	names := make([]string, len(what))
	for i, w := range what {
		names[i] = w
		if strings.HasPrefix(w, "Test") {
			names[i] = "`" + w + "`"
		}
	}
	list := strings.Join(names, ", ")
	if n := len(names); n > 1 {
		list = strings.Join(names[:n-1], ", ") + " and " + names[n-1]
	}
	return "*measured apart by " + list + ", not in this run*"
}

// apartMarks finds apart's marks; apartTest the tests they name.
var (
	apartMarks = regexp.MustCompile(`\*measured apart by ([^*]*), not in this run\*`)
	apartTest  = regexp.MustCompile("`(Test[A-Za-z0-9_]+)`")
)

// apartTests are the tests body's apart marks name, as `Test…`, in the
// order they first appear.
func apartTests(body string) []string {
	var out []string
	for _, m := range apartMarks.FindAllStringSubmatch(body, -1) {
		for _, t := range apartTest.FindAllString(m[1], -1) {
			if !slices.Contains(out, t) {
				out = append(out, t)
			}
		}
	}
	return out
}

func method(r *Results) string {
	p := r.Plan
	var b strings.Builder
	b.WriteString("## Method\n\n")
	fmt.Fprintf(&b, "- Three `redis-server` processes on loopback, without persistence for the throughput sections "+
		"(so the numbers measure clients and routing, not the disk), with AOF (`appendfsync always`, as in `make drill`) for the failover section. "+
		"twemproxy (`nutcracker`, `distribution: ketama`, `redis: true`, one `addr:port:1 name` line per node) runs as a child process over the same nodes.\n")
	fmt.Fprintf(&b, "- Everything shares the machine's %d cores: the %d client goroutines, the three nodes, twemproxy, and for the RPC section the service. "+
		"The loads are closed loops, so throughput is bounded by the CPU every process spends per operation: the tables give that CPU (from `/proc`) per operation.\n",
		r.Machine.Cores, p.Conc)
	fmt.Fprintf(&b, "- Comparisons run interleaved in rounds (A B C D A B C D …; the inventory section's rounds run each pair a target names side by side, odd rounds in reverse: A B C D D C B A …): %d rounds of %v per variant after an unmeasured warm-up; "+
		"tables give the median over the rounds of each round's throughput, p50 and p99; ratios are medians of per-round ratios. "+
		"Before every inventory and RPC run the nodes are emptied (FLUSHALL in a MULTI that keeps their shardis stamp) and the stock reloaded.\n",
		p.Rounds, p.Round)
	fmt.Fprintf(&b, "- The machine is shared with other work. Before each round the benchmark waits (up to %v) until other processes use at most %.0f%% "+
		"of the CPU; a round during which they used more (over the round, or during any one variant's run) is discarded and run again (up to %d times per section). What other processes used during the kept rounds is reported per section.\n",
		p.QuietWait, 100*p.MaxForeign, p.MaxDiscards)
	b.WriteString("- Every baseline client has the options shardis gives its node clients: RESP2 (`Protocol: 2`), `DisableIdentity`, no retries, " +
		"1 s read/write/pool timeouts, go-redis's default pool (10 connections per GOMAXPROCS per node). The single twemproxy client gets three pools' worth " +
		"of connections, so the proxy sees as many concurrent requests as the nodes do otherwise. go-redis v9 opens every connection with `HELLO`, " +
		"which twemproxy does not know (it closes the connection; go-redis issue #2616): the benchmark's dialer answers that one `HELLO` with an error reply, " +
		"as an old Redis would, and go-redis continues in RESP2; later bytes pass through untouched.\n")
	b.WriteString("- (a) picks the node with `router.ConfigRing` (the ring the router builds) over the same members and calls that node's go-redis client; (b) is `Router.Client(server, route, key)` " +
		"(and `Set.Pick` on a held `*Set`); (c) is `redis.NewRing` over the three addresses (its own rendezvous hashing); (d) one go-redis client to twemproxy. " +
		"Every key is preloaded on every node, so every variant's GETs hit 100-byte values whatever its hashing.\n")
	b.WriteString("- Inventory runs through the library (no RPC), quantity 1 per item, no user id (no per-user quota part), every SKU with 10⁹ units. " +
		"3-item orders take one item from each of the routes r1, r2, r3, which live on n1, n2, n3. The seed baseline (`internal/bench/seed.go`) " +
		"reproduces the Java seed's deduction: per item one `EVAL` with the whole script text (no SHA), tried on the route's nodes in order; items one after another; " +
		"on failure one rollback `EVAL` per deducted item, one after another. Its scripts keep the seed's data layout and steps with its bugs fixed " +
		"(stock check, redo-log offset, `ZADD` of the redo entry; the rollback gives the units back and removes the entry), and are checked at the start of every run. It calls the same node clients as shardis (same pools, same hook), so only the shape and the scripts differ. " +
		"The hot-SKU rows put every order on one SKU: shardis's on route r1 (stock on n1 only), the seed's on n1; the shardis rows use made-up order ids (their records hashed over the three nodes) except the one with ids minted by `Inventory.NewOrderID` given the items, inside the measured call (their records on n1, next to the stock). The two \"group commit off\" rows run the 3-item and the hot-SKU workloads through a second inventory over the same router with `inventory.group_commit: 1` (one order per script call). The floor rows are yardsticks, not shardis (`internal/bench/floor.go`): the seed's hot-SKU and 3-item workloads written with the least a reservation that keeps a record per order must write: a record set only if the order id has none, on the order's hashed home (or, in one hot-SKU row, next to the stock), a part fence set only once on each node with an item when that is not the home (the fences first, then the record, final at once: the fewest writes), a deadline and a redo entry per part, the counters; up to 32 waiting entries per script call on each node, every write shared that can be. They bound what such a design reaches here with each record a key of its own (the bucketed-record row below measures another structure). The two one-round floor rows place the hashed-home orders in one round trip, as shardis's one-round paths do: the record, set only if absent, goes to its home at the same time as the fences, staged, and one more write (batched like the rest) makes it final once every fence is taken (`floorOrderOneRound`). The three guarded floor rows are the floor's hashed, next-to-the-stock and 3-item rows with the checks shardis's promises make every reservation pay and nothing else of shardis (`internal/bench/floorguard.go`: the node's stamp compared before any write and its write sequence advanced after, per script call; a canonical-integer check per counter and offset read; a type check per sorted set before its first write; each entry in a protected call of its own). The bucketed-record floor row is the floor next to the stock with each record one field of a hash that holds the records of its minute instead of a key of its own (`internal/bench/floorbucket.go`: set only if the id has none; the hash's retention one EXPIRE per script call; the order id names its minute, so a retry names the same hash): a yardstick for what the records' structure costs, not a floor row of any target. The no-TTL floor row is the floor next to the stock with each record a key set only if absent without a TTL (`floorNoTTLScript`), as shardis keeps a reserved order's record until it is decided: beside the bucketed row, it tells what the bucket saves apart from the per-key TTL.\n")
	fmt.Fprintf(&b, "- The sold-out rows (`internal/bench/soldout.go`) send 1-item orders with distinct ids (made up, their records' homes hashed over the nodes) for a SKU of route r1 whose one unit is sold, in two states, each measured and reported apart: "+
		"its units confirmed (the unit reserved and confirmed in the setup: nothing reserved, so a refusal writes nothing; `inventory_soldout_vs_seed` and `soldout_keys_per_refusal`, whose targets hold for this state only), and "+
		"its last unit reserved, not confirmed (the usual state just after a sell-out: the held unit may be a refused order's own, so each refusal writes its fence, a failed record on the order's home, `inventory/soldout.go`; `inventory_soldout_reserved_vs_seed` and `soldout_reserved_keys_per_refusal`, without targets). "+
		"The seed's row refuses with its EVAL's two reads on n1 (its deduction is final: it has no reserved state) and is the yardstick of both. Keys left are DBSIZE summed over the nodes, each node's witness hash left out, before and after %d refused orders sent after a warm-up of %d.\n", soldOutRefusals, soldOutRefusals/10)
	return b.String()
}

// reading is the paragraph that reads the tables.
func reading(r *Results, s Summary) string {
	var parts []string
	if rr := r.Router; rr != nil {
		a, bb, c, d := rr.Get("GET", VarDirect), rr.Get("GET", VarRouter), rr.Get("GET", VarRing), rr.Get("GET", VarTwemproxy)
		ca, sa, _ := a.CPUPerOp()
		cb, sb, _ := bb.CPUPerOp()
		cc, sc, _ := c.CPUPerOp()
		_, sd, pd := d.CPUPerOp()
		t := fmt.Sprintf("Through `Router.Client`, shardis served %s GET/s and %s SET/s with 64 goroutines: %.2f× hand-routed go-redis, %.2f× go-redis Ring and %.2f× twemproxy (GET+SET). ",
			fmtOps(bb.Ops()), fmtOps(rr.Get("SET", VarRouter).Ops()), s.RouterVsDirect, s.RouterVsRing, s.RouterVsTwemproxy)
		predA := float64(ca+sa) / float64(max(cb+sb, 1))
		predC := float64(cc+sc) / float64(max(cb+sb, 1))
		ap := rr.Get("GET", VarDirectAP)
		if ap == nil {
			ap = &Series{Name: VarDirectAP}
		}
		cap_, sap, _ := ap.CPUPerOp()
		t += fmt.Sprintf("Per GET, client plus nodes, the router spent %s of CPU against %s for hand-routed go-redis, %s for Ring and %s for hand-routed go-redis with its own `AutoPipeline()`: "+
			"the saving is the shared round trips (fewer system calls on both sides). What the router adds to go-redis's auto-pipeliner is its node layer: "+
			"the hook that sends a command to one of its node's two pipelines or, when fewer than `pipeline.from` commands of that node are under way, straight to the pool; the state gate and breaker admission once per batch (a go-redis `Limiter`, so the pipeliner's client has no hook); and the route lookup (%.0f ns, no allocation, `Node.Client()` an atomic load); %.1f allocations per GET against %.1f. "+
			"On a machine this saturated, throughput follows CPU per operation, which predicts %.2f× hand-routed go-redis and %.2f× Ring: ",
			fmtCPU(cb+sb), fmtCPU(ca+sa), fmtCPU(cc+sc), fmtCPU(cap_+sap), s.RouteLookupNs, bb.AllocsPerOp(), ap.AllocsPerOp(), predA, predC)
		t += compareClause("hand-routed go-redis", s.RouterVsDirect, predA, 3.0) + "; " + compareClause("Ring", s.RouterVsRing, predC, 3.0) + ". "
		t += fmt.Sprintf("Twemproxy costs %s of its own CPU per GET but makes the nodes cheaper (%s per GET against %s behind direct connections) because it pipelines every client's requests over one connection per node, "+
			"so on a machine where the proxy competes with the nodes for the same cores it loses less than its extra hop suggests; its p50 latency is %s against the router's %s. ",
			fmtCPU(pd), fmtCPU(sd), fmtCPU(sa), fmtDur(d.P50()), fmtDur(bb.P50()))
		parts = append(parts, t)
	}
	if ir := r.Inventory; ir != nil {
		i3, sd := ir.Series[VarInv3], ir.Series[VarSeed3]
		c3, s3, _ := i3.CPUPerOp()
		cs, ss, _ := sd.CPUPerOp()
		n3, e3, k3 := i3.ServerPerOp()
		ns, es, ks := sd.ServerPerOp()
		lead := "Reservations are where shardis loses"
		switch {
		case s.Inventory3ItemVsSeed >= 2:
			lead = "Reservations meet their target"
		case s.Inventory3ItemVsSeed >= 1:
			lead = "Reservations beat the seed baseline but miss their target"
		}
		t := fmt.Sprintf("%s: 3-item orders ran at %s orders/s, %.2f× the seed baseline's %s (target ≥ 2×). ",
			lead, fmtOps(i3.Ops()), s.Inventory3ItemVsSeed, fmtOps(sd.Ops()))
		t += fmt.Sprintf("Per 3-item order the nodes ran %.2f script calls for shardis (%s of script time, %.0f Redis commands inside them; with group commit the orders waiting on a node share one call, so a call carries several orders' scripts) and shardis spent %s of client CPU; the seed ran %.0f (%s, %.0f commands) and spent %s. "+
			"The extra work is what the seed lacks: an order record written before and after the items (idempotent retries, a decision that survives a crash), "+
			"a part record per item as the confirm/cancel fence, a pending-index entry with a deadline so unconfirmed stock comes back, and a node-identity check in every script call. "+
			"With every core busy, throughput follows CPU per order (%s for shardis, %s for the seed, client plus nodes), and sending the seed's script text with every `EVAL` is cheap in Redis 7, which keeps EVAL scripts cached. ",
			n3, fmtCPU(e3), k3, fmtCPU(c3), ns, fmtCPU(es), ks, fmtCPU(cs), fmtCPU(c3+s3), fmtCPU(cs+ss))
		var seqI, seqS time.Duration
		for _, a := range ir.Allocs {
			switch a.Name {
			case VarInv3:
				seqI = time.Duration(a.NsPerOp)
			case VarSeed3:
				seqS = time.Duration(a.NsPerOp)
			}
		}
		if seqI > 0 && seqS > 0 {
			if seqI < seqS {
				t += fmt.Sprintf("One order at a time, shardis's parallel items do pay off: %s per 3-item order against %s. ", fmtDur(seqI), fmtDur(seqS))
			} else {
				t += fmt.Sprintf("Even one order at a time shardis is slower (%s per 3-item order against %s): its one round runs its scripts on the three nodes at once (the home node's also stages the record), and the commit rides a later script call on the home node, but on two cores the scripts and the four processes' CPU do not all overlap, and each script does more than the seed's. ",
					fmtDur(seqI), fmtDur(seqS))
			}
		}
		t += floor3Reading(ir)
		t += fmt.Sprintf("A reserve allocates %d times for 1 item and %d for 3 (the seed: %d for 3). ", s.Reserve1ItemAllocs, s.Reserve3ItemAllocs, seedAllocs(ir))
		h := s.HotSplitVsSingle
		if h >= 1.05 {
			t += fmt.Sprintf("Splitting a hot SKU over three nodes gave %.2f× the throughput of keeping it on one. ", h)
		} else {
			t += fmt.Sprintf("Splitting a hot SKU over three nodes gave %.2f× the throughput of keeping it on one: no gain here, because three redis-servers cannot run in parallel on %d shared cores (and every order's record still goes to any of the three nodes); the split pays when each node has its own CPU, which this machine cannot show. ",
				h, r.Machine.Cores)
		}
		t += ordersReading(ir, s)
		parts = append(parts, t)
	}
	if rp := r.RPC; rp != nil {
		cl, _, _ := rp.Series[VarLib].CPUPerOp()
		cr, _, _ := rp.Series[VarRPC].CPUPerOp()
		sv := rp.Series[VarRPC].ServicePerOp()
		t := fmt.Sprintf("Through `shardis serve` (Connect over cleartext HTTP/2, the service in a process of its own as users run it) a 1-item reserve ran at %.2f× the library's throughput: "+
			"per order the service process spent %s of CPU (the library inside it included) and the Connect client %s, against the library's own %s in the caller's process; on this machine that CPU comes out of the nodes' share. ",
			s.RPCVsLibrary, fmtCPU(sv), fmtCPU(cr), fmtCPU(cl))
		if g := rp.Series[VarGRPC]; g != nil && len(g.Samples) > 0 {
			gc, _, _ := g.CPUPerOp()
			t += fmt.Sprintf("Through the gRPC port (`service.grpc_listen`, grpc-go's transport) from a grpc-go client it ran at %.2f×, the service spending %s and the client %s per order. ",
				s.RPCGRPCVsLibrary, fmtCPU(g.ServicePerOp()), fmtCPU(gc))
		}
		parts = append(parts, t)
	}
	if f := r.Failover; f != nil && len(f.Cycles) > 0 {
		parts = append(parts, failoverReading(f, s))
	}
	if o := r.Outage; o != nil && o.Minted.Started > 0 {
		parts = append(parts, outageReading(o))
	}
	return strings.Join(parts, "")
}

func seedAllocs(ir *InvResult) int64 {
	for _, a := range ir.Allocs {
		if a.Name == VarSeed3 {
			return a.AllocsPerOp
		}
	}
	return 0
}

func failoverReading(f *FailoverResult, s Summary) string {
	var load, idle []FailoverCycle
	for _, c := range f.Cycles {
		if c.Load && c.Backoff == nil {
			load = append(load, c)
		} else if !c.Load {
			idle = append(idle, c)
		}
	}
	t := ""
	if len(load) > 0 {
		c := load[0]
		for _, x := range load {
			c.Detect = max(c.Detect, x.Detect)
		}
		t += fmt.Sprintf("A kill -9 under load was noticed within %s in every cycle: the first command to fail pulls the node's probe forward. ", fmtMs(c.Detect))
		c = load[0]
		t += fmt.Sprintf("Keys on the healthy nodes were served with %d errors during the outage; their GETs' p99 went from %s before the kill to %s during it (first cycle), "+
			"as the goroutines that drew a key of the dead node got their refusal at once and went on to keys of the healthy nodes (%s → %s healthy-key GETs/s), ",
			c.HealthyErrors, fmtDur(c.P99Before), fmtDur(c.P99During), fmtOps(c.OpsBefore), fmtOps(c.OpsDuring))
		t += fmt.Sprintf("while the dead node's keys failed fast (p99 %s) instead of waiting for a timeout. ", fmtDur(c.VictimFailedSlowP99))
	}
	if len(idle) > 0 {
		var ds []string
		for _, c := range idle {
			ds = append(ds, fmtMs(c.Detect))
		}
		t += fmt.Sprintf("Without load only the heartbeat (every 500 ms) can find it: %s in %d kills at random points of its period (a refused connection fails the probe at once; a hung node would add the 300 ms probe timeout). ",
			strings.Join(ds, ", "), len(idle))
	}
	var rec []string
	for _, c := range f.Cycles {
		if c.Backoff == nil {
			w := ""
			if !c.Load {
				w = ", idle"
			}
			rec = append(rec, fmt.Sprintf("%s after a %v outage%s", fmtMs(c.Recover), c.Outage, w))
		}
	}
	t += "The restarted node was marked UP " + strings.Join(rec, ", ") + " (from the moment it accepted connections). "
	if s.RecoverMs > 2000 {
		t += "Recovery depends on where the restart falls in the reconnect backoff (" + defaultBackoff() + ", the last repeating): a long last delay leaves a restarted node unnoticed until the next probe. "
		for _, c := range f.Cycles {
			if c.Backoff != nil {
				t += fmt.Sprintf("With `health.backoff: %s` the same %v outage was noticed in %s. ", backoffList(c.Backoff), c.Outage, fmtMs(c.Recover))
			}
		}
	}
	return t
}

func backoffList(ds []time.Duration) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = d.String()
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// misses explains every missed target with the run's own figures.
func misses(r *Results, s Summary) string {
	var b strings.Builder
	if rr := r.Router; rr != nil {
		for _, m := range []struct {
			key, name, variant string
			target, got        float64
		}{
			{"router_vs_direct>=3.0", "hand-routed go-redis", VarDirect, 3, s.RouterVsDirect},
			{"router_vs_ring>=3.0", "go-redis Ring", VarRing, 3, s.RouterVsRing},
			{"router_vs_twemproxy>=3.0", "twemproxy", VarTwemproxy, 3, s.RouterVsTwemproxy},
			{"router_vs_direct_autopipelined>=0.95", "hand-routed go-redis with AutoPipeline()", VarDirectAP, 0.95, s.RouterVsDirectAP},
		} {
			if ok, present := s.Targets[m.key]; !present || ok {
				continue
			}
			a, bb := rr.Get("GET", m.variant), rr.Get("GET", VarRouter)
			ca, sa, pa := a.CPUPerOp()
			cb, sb, _ := bb.CPUPerOp()
			fmt.Fprintf(&b, "- **Router vs %s** (%.3f, target %.2f). Per GET the router spent %s of client CPU and %s on the nodes, %s %s and %s on the nodes (%s in a proxy); "+
				"p50 %s against %s. On two shared cores throughput follows CPU per operation, so the ratio is bounded by what the slower side saves per command.\n",
				m.name, m.got, m.target, fmtCPU(cb), fmtCPU(sb), m.name, fmtCPU(ca), fmtCPU(sa), fmtCPU(pa), fmtDur(bb.P50()), fmtDur(a.P50()))
		}
	}
	if lr := r.Latency; lr != nil && !s.Targets["single_caller_latency_ratio<=1.10"] {
		fmt.Fprintf(&b, "- **Single-caller latency** (%.3f, target 1.10): GET %.3f, 1-item reserve %.3f. A lone command is sent at once; the difference is the in-flight counter and the hook, plus round-to-round noise.\n",
			s.SingleCallerLatencyRatio, lr.Ratio("GET"), lr.Ratio("reserve"))
	}
	if len(r.Lookups) > 0 && !s.Targets["route_lookup<250ns,0allocs"] {
		fmt.Fprintf(&b, "- **Routing cost** (%.1f ns, %d allocs): see the routing table.\n", s.RouteLookupNs, s.RouteLookupAllocs)
	}
	if ir := r.Inventory; ir != nil && !s.Targets["inventory_3item_vs_seed>=2"] {
		i3, sd := ir.Series[VarInv3], ir.Series[VarSeed3]
		c3, s3, _ := i3.CPUPerOp()
		cs, ss, _ := sd.CPUPerOp()
		n3, e3, k3 := i3.ServerPerOp()
		ns, es, ks := sd.ServerPerOp()
		fmt.Fprintf(&b, "- **3-item orders vs the seed** (%.3f, target 2). Per order: shardis %.2f script calls (group commit shares them between orders), %.0f commands in them, %s of script time, %s of node CPU, %s of client CPU; "+
			"the seed %.0f scripts, %.0f commands, %s, %s, %s. The target assumed the seed's shape (full script text per `EVAL`, items one after another) is what costs; "+
			"it is not: Redis 7 caches scripts sent by `EVAL` (it hashes the text and finds the compiled function), and with 64 clients the seed's sequential items are hidden by concurrency. "+
			"What costs is the work per order, and shardis does more of it on purpose:\n"+
			"  - the order record on the order's home node, staged with the home's parts and then committed off the caller's path by a later script call on the home node that carries the commit (`inventory/carry.go`: no call of its own), which makes Reserve idempotent per order id and lets Confirm/Cancel/expiry decide once;\n"+
			"  - per item, a part record (one string packing its fields) and a pending-index entry with a deadline; once per script call (shared by group commit), the node-identity check (`HMGET` of the stamp, `TIME`) and the write sequence;\n"+
			"  - on the client, a goroutine for the stage and per other node (the commit waits in its home node's buffer for a script call to carry it), and the parts' lists (a compact string, `inventory/parts.go`: the promised list, then the taken list); see the profile below.\n"+
			"  Group commit removed what the orders on one node can share (the call, its round trip, the stamp check, the write sequence, type checks, the stock and offsets reads and writes, the `ZADD`s merged per key); what is left is each order's own work: its keys and arguments, its reads and checks, and its writes (the order record, one packed string holding its parts' list, a part record per item, one packed string each, and the index entries). "+
			"%s\n",
			s.Inventory3ItemVsSeed, n3, k3, fmtCPU(e3), fmtCPU(s3), fmtCPU(c3), ns, ks, fmtCPU(es), fmtCPU(ss), fmtCPU(cs), floor3Miss(ir))
	}
	b.WriteString(ordersMisses(r, s))
	b.WriteString(floorMisses(r, s))
	b.WriteString(mintedSeedMiss(s))
	b.WriteString(rpcMisses(r, s))
	if f := r.Failover; f != nil && !s.Targets["detect<=1s"] {
		fmt.Fprintf(&b, "- **Detection** (%.0f ms): see the failover table; the cycle's other processes' CPU share says whether the machine was starved.\n", s.DetectMs)
	}
	if f := r.Failover; f != nil && !s.Targets["recover<=2s"] {
		fmt.Fprintf(&b, "- **Recovery** (worst %.0f ms, target 2 s). A DOWN node is probed on the backoff list `health.backoff` (default %s; the last repeats; ±10 %% jitter), "+
			"so a restarted node waits at most the last delay plus jitter and one probe. See the failover table for the cycles that missed.\n", s.RecoverMs, defaultBackoff())
	}
	return b.String()
}

func profileSection(r *Results) string {
	pr := r.Profile
	var b strings.Builder
	fmt.Fprintf(&b, "CPU profile of this process (the client side: library, go-redis, runtime) during %v of the 3-item reserve load with %d goroutines (%s orders/s while profiling), "+
		"saved as `%s` (`go tool pprof` it with the benchmark binary, or reproduce with `go test -run '^$' -bench Reserve3ItemsParallel -cpuprofile cpu.prof ./inventory/`).\n\n",
		pr.Duration, r.Plan.Conc, fmtOps(pr.Orders), pr.Path)
	if pr.Err != "" {
		fmt.Fprintf(&b, "It could not be read back here: %s.\n", pr.Err)
		return b.String()
	}
	b.WriteString("| function | share of samples (cumulative) | what it is |\n| --- | ---: | --- |\n")
	for _, l := range pr.Lines {
		share := fmt.Sprintf("%.1f %%", l.Cum)
		if l.Missing {
			share = "no sample"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", shortName(l.Name), share, l.What)
	}
	b.WriteString("\nTop functions by own time: ")
	var tops []string
	for _, l := range pr.Top {
		tops = append(tops, fmt.Sprintf("`%s` %.1f %%", shortName(l.Name), l.Flat))
	}
	b.WriteString(strings.Join(tops, ", ") + ".\n\n")
	b.WriteString(profileReading(r))
	return b.String()
}

// profileReading reads the profile's shares: where the client's CPU of a
// 3-item order goes, from this run's samples.
func profileReading(r *Results) string {
	pr := r.Profile
	cum := func(name string) float64 {
		for _, l := range pr.Lines {
			if strings.HasSuffix(l.Name, name) {
				return l.Cum
			}
		}
		return 0
	}
	t := fmt.Sprintf("Reading: the script calls (`Inventory.call`: FCALL through go-redis, the network I/O included) take %.1f %% of the client's samples, their socket writes and reads %.1f %% and %.1f %% "+
		"(the round trips, which group commit and auto-pipelining share between orders); allocation takes %.1f %% (go-redis's commands and replies, the parts, "+
		"the groups' argument lists) and goroutine scheduling %.1f %%: a call is handed to its group's sender and to its node's pipeliner, "+
		"and a round's calls to several nodes (the one-round path's stage and takes, the general path's takes) queue on their nodes' groups without a goroutine each "+
		"unless one finds a free slot, which gets a sender of its own (`start`, `inventory/round.go`), and the commit rides a later script call on its home "+
		"(starting goroutines %.1f %%, growing their stacks %.1f %%). The parts' lists (a compact string, `inventory/parts.go`), encoded once per one-round order (the promised list for the stage; the commit's list is that string with the taken offsets written into its holes, `withOffsets`), take %.1f %%. "+
		"The lists are the protocol's (the record names the parts it is decided on); the allocations per call are what could still be trimmed on the client. ",
		cum("inventory.(*Inventory).call"), cum("syscall.write"), cum("syscall.read"), cum("runtime.mallocgc"),
		cum("runtime.schedule"), cum("runtime.newproc"), cum("runtime.copystack"),
		cum("inventory.encodeOrderPartsHoles")+cum("inventory.withOffsets"))
	if ir := r.Inventory; ir != nil {
		c3, s3, _ := ir.Series[VarInv3].CPUPerOp()
		t += fmt.Sprintf("Per 3-item order the client spent %s of CPU and the nodes %s (section 3): ", fmtCPU(c3), fmtCPU(s3))
		if s3 > c3 {
			t += "the nodes' scripts are the larger share."
		} else {
			t += "the client is the larger share."
		}
	}
	return t + "\n"
}

func shortName(n string) string {
	n = strings.TrimPrefix(n, "github.com/shardis/shardis/")
	return strings.TrimPrefix(n, "github.com/redis/go-redis/")
}

const reproduce = `
## Reproduce

` + "```sh" + `
make bench          # router/ and inventory/ Go benchmarks, then the full suite; rewrites BENCHMARKS.md
make bench-quick    # the same suite shortened (about 2 min); last line: JSON summary
go run ./internal/cmd/bench --sections router,inventory --rounds 7 --round 3s   # one section, more rounds
go test -run '^$' -bench Reserve -benchmem ./inventory/          # allocs/op of one reserve
go test -run '^$' -bench 'Lookup|Get' -benchmem ./internal/bench/ # routing cost; one GET per client kind
` + "```" + `
`

// compareClause reads one measured ratio against its target and against
// what CPU per operation predicts.
func compareClause(name string, measured, pred, target float64) string {
	switch {
	case measured >= target:
		return fmt.Sprintf("against %s the router measured %.3f, target %.2f met", name, measured, target)
	case pred < target:
		return fmt.Sprintf("against %s it measured %.3f, below the %.2f target, and the CPU it adds per GET accounts for the miss", name, measured, target)
	}
	return fmt.Sprintf("against %s it measured %.3f, below the %.2f target although CPU per GET predicts %.2f: the rest is round-to-round variation of the shared machine", name, measured, target, pred)
}

// defaultBackoff formats the default reconnect backoff list.
func defaultBackoff() string {
	var parts []string
	for _, d := range config.Default().Health.Backoff {
		parts = append(parts, d.String())
	}
	return strings.Join(parts, ", ")
}
