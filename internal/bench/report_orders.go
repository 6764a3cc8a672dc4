package bench

import (
	"fmt"
	"slices"
	"strings"
)

// RoundTripTable renders the counted sequential round trips of one
// reserve, one row per order shape.
func RoundTripTable(rt *RoundTripResult) string {
	var b strings.Builder
	b.WriteString("\nSequential round trips of one successful reserve, counted: a go-redis hook installed on every node client (`router.Options.Hooks`, outermost, " +
		"so it sees commands whether or not they are auto-pipelined) records when each command or pipeline of the reserve was handed to go-redis and when it returned; " +
		"intervals that overlap ran in parallel, and the count is the longest chain of intervals each starting after the previous one ended. " +
		"One order at a time from one goroutine, nothing else running, auto-pipelining on, after a warm-up (scripts cached, connections open):\n\n")
	b.WriteString("| order | orders | median | max | orders by round trips | commands/order |\n| --- | ---: | ---: | ---: | --- | ---: |\n")
	for _, sh := range rt.Shapes {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %s | %.2f |\n", sh.Name, sh.Orders, sh.Median, sh.Max, histString(sh.Hist), sh.CommandsPerOrder)
	}
	return b.String()
}

// histString formats a round-trips histogram as "1: 63, 3: 138".
func histString(h map[int]int) string {
	var ks []int
	for k := range h {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	parts := make([]string, len(ks))
	for i, k := range ks {
		parts[i] = fmt.Sprintf("%d: %d", k, h[k])
	}
	return strings.Join(parts, ", ")
}

// OutageTable renders the outage section: one row per id kind.
func OutageTable(o *OutageResult) string {
	var b strings.Builder
	b.WriteString("| order ids | orders started while the node was down | succeeded | share | of them started before it was marked DOWN (succeeded) | failed with their home on the dead node | failed: ErrUnavailable / other |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	kinds := []struct {
		name string
		k    *OutageOrders
	}{{"minted by `NewOrderID`", &o.Minted}, {"made up by the caller", &o.Own}}
	for _, x := range kinds {
		k := x.k
		fmt.Fprintf(&b, "| %s | %s | %s | %.3f | %s (%s) | %s | %s / %s |\n", x.name,
			fmtOps(float64(k.Started)), fmtOps(float64(k.OK)), k.Share(), fmtOps(float64(k.StartedBeforeDetect)), fmtOps(float64(k.OKBeforeDetect)),
			fmtOps(float64(k.FailedHomeOnVictim)), fmtOps(float64(k.Unavailable)), fmtOps(float64(k.OtherErrors)))
	}
	fmt.Fprintf(&b, "\nOrders/s before → during (both kinds, succeeded): %s → %s; the node was marked DOWN %s after the kill.\n",
		fmtOps(o.OpsBefore), fmtOps(o.OpsDuring), fmtMs(o.Detect))
	for _, x := range kinds {
		if x.k.HomeErr != "" {
			fmt.Fprintf(&b, "\nAn order with an id %s whose home is the dead node, once it is marked DOWN: `%s`.\n", x.name, x.k.HomeErr)
		}
		if x.k.FirstErr != "" && x.k.FirstErr != x.k.HomeErr {
			fmt.Fprintf(&b, "\nThe first failure of an order with an id %s: `%s`.\n", x.name, x.k.FirstErr)
		}
	}
	return b.String()
}

// ordersReading is the report's reading of the hot-SKU-vs-seed row and of
// the counted round trips.
func ordersReading(ir *InvResult, s Summary) string {
	t := ""
	if h := ir.HotVsSeed(); h > 0 {
		hs, ss := ir.Series[VarHot1], ir.Series[VarSeedHot1]
		nh, _, _ := hs.ServerPerOp()
		ns, _, _ := ss.ServerPerOp()
		ch, sh, _ := hs.CPUPerOp()
		cs, sss, _ := ss.CPUPerOp()
		t += fmt.Sprintf("With every order on one SKU whose stock lives on one node, shardis ran %s orders/s against the seed shape's %s on the same node: %.2f× (target ≥ 2×). "+
			"Per order the nodes ran %.2f script calls for shardis (group commit: orders waiting on a node share one) and shardis spent %s of client and %s of node CPU; the seed ran %.2f and spent %s and %s. ",
			fmtOps(hs.Ops()), fmtOps(ss.Ops()), h, nh, fmtCPU(ch), fmtCPU(sh), ns, fmtCPU(cs), fmtCPU(sss))
		if m := ir.HotMintedVsSeed(); m > 0 {
			ms := ir.Series[VarHot1Minted]
			nm, _, _ := ms.ServerPerOp()
			cm, smn, _ := ms.CPUPerOp()
			t += fmt.Sprintf("Most of those orders' ids hash their record to another node than the stock's, so each runs two scripts on two nodes (stage on its home, take on the stock's node) and its commit rides a later script call on its home (`inventory/carry.go`); with ids minted by `NewOrderID` given the items, every record sits on the stock's node, each order is one script, and shardis ran %s orders/s, %.2f× the seed (%.2f script calls, %s of client and %s of node CPU per order). ",
				fmtOps(ms.Ops()), m, nm, fmtCPU(cm), fmtCPU(smn))
		}
		t += floorReading(ir)
	}
	if rt := ir.RoundTrips; rt != nil {
		var rows []string
		for _, sh := range rt.Shapes {
			rows = append(rows, fmt.Sprintf("%s: median %d, max %d (%s)", sh.Name, sh.Median, sh.Max, histString(sh.Hist)))
		}
		t += "Counted round trips of one reserve, one order at a time: " + strings.Join(rows, "; ") + ". "
		if g := rt.Shape(RTShapeSplit); g != nil && g.Median >= 3 {
			t += fmt.Sprintf("The split row shows the counter can tell: the one-script attempt on the home node, then begin, the item rounds and commit of the general path are %d sequential steps. ", g.Median)
		}
		for _, sh := range rt.Shapes {
			if sh.Max > sh.Median {
				t += "A count above the median means some of one round's parallel scripts did not overlap at all: on two busy cores a node's goroutine can start only after another node's reply came back, and the hook counts what happened, not what was intended. "
				break
			}
		}
	}
	return t
}

// outageReading is the report's reading of the outage section.
func outageReading(o *OutageResult) string {
	m, w := &o.Minted, &o.Own
	return fmt.Sprintf("With %s killed and every SKU stocked on the two healthy nodes as well, %.3f of the %s orders started during the next %v with ids minted by `Inventory.NewOrderID` succeeded (%s failed: %s with their home on the dead node, %s started before it was marked DOWN), "+
		"against %.3f of the %s whose ids the caller made up (%s of their %s failures had their home on the dead node). "+
		"An order's record lives on one node, its home, a function of the id alone: a minted id names a node that was usable when it was minted, any other id is hashed over every inventory node, "+
		"and Reserve refuses with ErrUnavailable while the home is down, wherever the stock is. The node was marked DOWN %s after the kill. ",
		o.Victim, m.Share(), fmtOps(float64(m.Started)), o.Window, fmtOps(float64(m.Started-m.OK)), fmtOps(float64(m.FailedHomeOnVictim)), fmtOps(float64(m.StartedBeforeDetect-m.OKBeforeDetect)),
		w.Share(), fmtOps(float64(w.Started)), fmtOps(float64(w.FailedHomeOnVictim)), fmtOps(float64(w.Started-w.OK)), fmtMs(o.Detect))
}

// ordersMisses explains the missed round-trip, hot-SKU and outage targets
// with the run's own figures.
func ordersMisses(r *Results, s Summary) string {
	var b strings.Builder
	if ir := r.Inventory; ir != nil {
		for _, x := range []struct{ shape, key string }{{RTShape1, "reserve_round_trips_1item==1"}, {RTShape3, "reserve_round_trips_3item==1"}} {
			sh := ir.RoundTrips.Shape(x.shape)
			if ok, present := s.Targets[x.key]; !present || ok || sh == nil {
				continue
			}
			fmt.Fprintf(&b, "- **Round trips, %s** (median %d, target 1). %d of %d orders took one round trip (%s). "+
				"A reserve is one script when its home node can meet the whole order (`inventory/local.go`) and one round when every item's first node can meet its part (`inventory/staged.go`); "+
				"otherwise it is begin on the home node, the item scripts, commit: three sequential round trips or more.\n",
				x.shape, sh.Median, sh.Hist[1], sh.Orders, histString(sh.Hist))
		}
		if ok, present := s.Targets["inventory_hot_sku_vs_seed>=2"]; present && !ok {
			hs, ss := ir.Series[VarHot1], ir.Series[VarSeedHot1]
			nh, eh, kh := hs.ServerPerOp()
			ns, es, ks := ss.ServerPerOp()
			ch, sh, _ := hs.CPUPerOp()
			cs, sss, _ := ss.CPUPerOp()
			fmt.Fprintf(&b, "- **Hot SKU vs the seed** (%.3f, target 2). Every order is one item on one node, so the seed's shape costs it nothing: one `EVAL` per order. "+
				"Per order the nodes ran %.2f script calls for shardis (%.1f commands in them, %s of script time; group commit shares a call between orders) against the seed's %.2f (%.1f, %s), and shardis spent %s + %s of client + node CPU against %s + %s. "+
				"Most orders' home is another node than the one with the stock, so they are staged on the home and taken on the stock's node, two scripts on two nodes, and committed by a later script call on the home that carries the commit (`inventory/carry.go`). "+
				"The order record, part record, pending entry and their Lua are the work the seed does not do; with the calls shared, that per-order work is what is left. %s\n",
				s.InventoryHotVsSeed, nh, kh, fmtCPU(eh), ns, ks, fmtCPU(es), fmtCPU(ch), fmtCPU(sh), fmtCPU(cs), fmtCPU(sss), floorMiss(ir))
		}
	}
	if o := r.Outage; o != nil && o.Minted.Started > 0 && o.Share() < 0.99 {
		m := &o.Minted
		other := m.Started - m.OK - m.FailedHomeOnVictim
		fmt.Fprintf(&b, "- **Orders during an outage** (%.3f with minted ids, target 0.99). %s of the %s failed orders had their record's home on the dead node: their id was minted before the router marked it DOWN (after %s). "+
			"The other %s failed for other reasons (first: `%s`).\n",
			o.Share(), fmtOps(float64(m.FailedHomeOnVictim)), fmtOps(float64(m.Started-m.OK)), fmtMs(o.Detect), fmtOps(float64(other)), m.FirstErr)
	}
	return b.String()
}

// floorReading is the report's reading of the hot-SKU floor yardsticks
// (floor.go), or "" when the run has none.
func floorReading(ir *InvResult) string {
	f, fl := ir.FloorVsSeed(), ir.FloorLocalVsSeed()
	if f <= 0 || fl <= 0 {
		return ""
	}
	fs, fls := ir.Series[VarHotFloor], ir.Series[VarHotFloorLocal]
	cf, sf, _ := fs.CPUPerOp()
	cl, sl, _ := fls.CPUPerOp()
	return fmt.Sprintf("The floor rows are yardsticks, not shardis (`internal/bench/floor.go`): the same orders writing only what a reservation that keeps a record per order must (a record set only if the order id has none, so a retry cannot deduct twice; a part fence set once on the stock's node when the record is elsewhere, written first, the record once it is taken; a deadline and a redo entry; the counter), each node's entries batched up to 32 per script call, no identity stamp, no JSON. "+
		"With the records hashed over the nodes as in the shardis row they ran %s orders/s, %.2f× the seed (%s of client and %s of node CPU per order); with every record next to the stock, as minted ids place them, %s orders/s, %.2f× (%s and %s). ",
		fmtOps(fs.Ops()), f, fmtCPU(cf), fmtCPU(sf), fmtOps(fls.Ops()), fl, fmtCPU(cl), fmtCPU(sl))
}

// floorMiss is the hot-SKU miss's sentence on the floor yardsticks, or ""
// when the run has none.
func floorMiss(ir *InvResult) string {
	f, fl := ir.FloorVsSeed(), ir.FloorLocalVsSeed()
	if f <= 0 || fl <= 0 {
		return ""
	}
	if f >= 2 {
		return fmt.Sprintf("The floor yardstick with the records placed as here (a record and a part fence per order, batched) reached %.2f× the seed in the same rounds (%.2f× with the records next to the stock): 2× is within reach of a layout that writes one value per record and per part.", f, fl)
	}
	t := fmt.Sprintf("The floor yardstick with the records placed as here (a record and a part fence per order, one string each, batched) reached only %.2f× the seed in the same rounds: with the record on another node than the stock, writing a record and a fence per order costs more than the target leaves, whatever the Lua around them. With the records next to the stock (minted ids) the floor reached %.2f×", f, fl)
	if fl < 2 {
		return t + ", also short of 2×: one key per order, with its expiry, costs the node more than the target leaves."
	}
	return t + "."
}

// floor3Reading is the report's reading of the 3-item floor yardstick
// (floor.go), or "" when the run has none.
func floor3Reading(ir *InvResult) string {
	f := ir.Floor3VsSeed()
	if f <= 0 {
		return ""
	}
	fs := ir.Series[VarFloor3]
	cf, sf, _ := fs.CPUPerOp()
	return fmt.Sprintf("The 3-item floor row, a yardstick like the hot-SKU one (`internal/bench/floor.go`), takes the same orders writing only a record on the order's hashed home and a part fence on each other node (each set only if absent), a deadline and a redo entry per part (the fences first, then the record, final at once), each node's entries batched up to 32 per script call: %s orders/s, %.2f× the seed, at %s of client and %s of node CPU per order. ",
		fmtOps(fs.Ops()), f, fmtCPU(cf), fmtCPU(sf))
}

// floor3Miss is the 3-item miss's closing sentence, read against the
// 3-item floor yardstick when the run has one.
func floor3Miss(ir *InvResult) string {
	f := ir.Floor3VsSeed()
	switch {
	case f <= 0:
		return "Reaching 2× needs a compact record layout (one value per part and per order), not fewer calls."
	case f >= 2:
		return fmt.Sprintf("The 3-item floor yardstick (a record and two part fences per order, one string each, batched) reached %.2f× the seed in the same rounds: 2× is within reach of a layout that writes one value per part and per order, not of fewer calls.", f)
	}
	return fmt.Sprintf("The 3-item floor yardstick (a record and two part fences per order, one string each, batched) reached only %.2f× the seed in the same rounds: on this machine writing a record and a fence per part costs more than the target leaves, whatever the Lua around them.", f)
}

// floorMisses explains every missed shardis-over-floor target (VsFloor)
// with the run's own CPU figures: where the µs per order that the floor
// does not spend go, client and nodes apart.
func floorMisses(r *Results, s Summary) string {
	ir := r.Inventory
	if ir == nil {
		return ""
	}
	var b strings.Builder
	for _, f := range VsFloor {
		met, present := s.Targets[f.Key+">=0.8"]
		if !present || met {
			continue
		}
		sh, fl := ir.Series[f.Shardis], ir.Series[f.Floor]
		cs, ss, _ := sh.CPUPerOp()
		cf, sf, _ := fl.CPUPerOp()
		ns, es, ks := sh.ServerPerOp()
		nf, ef, kf := fl.ServerPerOp()
		fmt.Fprintf(&b, "- **%s** (%.3f, target 0.8): per order shardis spent %s of client and %s of node CPU, the floor %s and %s: "+
			"%s more on the client and %s more on the nodes. On the nodes shardis ran %.2f script calls with %.1f commands in them (%s of script time) against the floor's %.2f with %.1f (%s): "+
			"the extra commands are the record's head read (the general path's begin; the local path and the one-round stage set the record only if the id has none, unread), the part key's check before the writes on the general path (a part the local path takes has no key of its own yet; the one-part take and the 3-item stage's part on its home are set only if their key is missing, read only when that or a check fails), the pending index, the node-identity check and, for a part the one-round or the general path takes "+
			"(the local path's are inline: `inventory/inline.go`), its record beside the order record (one packed string each; the floor's order next to its stock is one key). "+
			"Where a one-script order's node work goes ("+apart("TestLocalScriptInstructions", "TestFloorScriptInstructions", "TestTakeScriptInstructions", "TestStageScriptInstructions")+", every count from here to the timings; `TestLocalScriptInstructions`: the local reserve's script in 20-order group calls on one node under valgrind's callgrind, its pieces cut out one at a time and counted in rounds between collections of the Lua heap, `redistest.CountRounds`; two runs agree within a few hundred instructions per order, the whole order's within 2,000): "+
			"an order of one stock part (plan_parts' and take_at's steps for it, written out in its one-part path: lua/local.lua; its part inline) costs the node 51,500 instructions, 102,900 on the general path (plan_parts and write_parts, which orders of several parts take); the floor's entry, counted the same way (`TestFloorScriptInstructions`, before the floor's record and decision entries stopped sending two keys they never used; on one later day that change took 530 instructions off the take's entry, 43,200 to 42,700, and 150 off its frame), 42,200, its frame 11,900; the reserve script's take of one stock part on a node other than the order's home (`TestTakeScriptInstructions`), 51,800, its frame 11,800; on the home of an order placed in one round with its stock elsewhere (`TestStageScriptInstructions`), its stage 27,700 and its commit, carried on a later group, 21,900; a stage that takes the home's part too, as 3-item orders send, 78,200 (all in groups whose calls share one context: a hot SKU's). "+
			"The group call's frame takes 12,100 (each order brings 3 keys and arguments of its own in the call's short layout, `localOneCall`, and a run of orders of one SKU, TTL and quantity shares 5 more, its context, sent once: `inventory/group.go`, \"Contexts\"; each costs the node about 800 instructions, which Redis parses into objects and Lua interns as strings, hashing every byte; the body reads them in place, `inventory/luaflat.go`, and answers one string), "+
			"the plan's reads and checks 7,700 (an inline part's key is not read, nor sent: its attempt's token is new, so the key cannot exist; an EXISTS of it costs 4,400), the order record's SETNX 8,100 (a new key, only if the id has none; SETNX answers an integer, where SET NX answers a status table), "+
			"the pending-index and redo entries 16,000 together (their ZADDs merged per key; a redo segment holds 32 offsets, since Redis walks a listpack sorted set twice per ZADD: `inventory/redolog.go`), and the rest, 7,600, take_at's steps, the part's pending-index member and the reply's string; a part record would add 11,100 (what the inline part saves). "+
			"Integers are formatted and parsed once per call where the orders share them (lua/prelude.lua: memo): a format or a tonumber costs about 1,000 instructions, any Lua call of a C function several hundred, a call of a Lua function about 600 (so the one-part paths of the local reserve, of the reserve script's take and of the 3-item stage write their helpers' steps out: 3,600, 3,900 and 8,100 instructions fewer per order, the stage's with its part's key read only when a check fails). "+
			"Timed ("+apart("TestLocalScriptCost")+": the same calls, medians of 9 rounds; on this machine its runs differ by 20 %%), the order takes 10 to 13 µs of script time, "+
			"and each script call 50 µs of its own in the last such run, which its orders share (17 µs of it the frame: FCALL and its arguments, the stamp check, the node's clock, the per-call state and the epilogue: the scripts run as Redis functions, `inventory/luafunc.go`, so the prelude's definitions are made once per library load, not per call; the rest the shared reads and writes of the stock hash, the redo offsets and the index's type, each once per call), so calls carrying few orders (the staged path's stage and takes) cost more per order. "+
			"The records are encoded by the client and only filled in by the node (`inventory/rectemplate.go`). "+
			"%sOn the client: go-redis writing those arguments and reading the replies, the parts' lists and record templates, and the hand-offs between the callers and their groups' senders.%s\n",
			f.Key, *f.Field(&s), fmtCPU(cs), fmtCPU(ss), fmtCPU(cf), fmtCPU(sf), fmtCPU(cs-cf), fmtCPU(ss-sf),
			ns, ks, fmtCPU(es), nf, kf, fmtCPU(ef), coldReading(f.Shardis)+commitReading(f.Shardis), oneRoundReading(ir, f.Shardis)+guardedReading(ir, f.Shardis))
	}
	return b.String()
}

// mintedSeedMiss explains a missed inventory_hot_sku_minted_vs_seed>=1.5
// by the yardstick run beside it: the floor with every record next to the
// stock (VarHotFloorLocal) over the same seed rows, and shardis over that
// floor. When the floor itself stays under 1.5× the seed, no design that
// keeps a record per order reaches the target on that machine.
func mintedSeedMiss(s Summary) string {
	met, present := s.Targets["inventory_hot_sku_minted_vs_seed>=1.5"]
	if !present || met || s.InventoryHotFloorLocalVsSeed <= 0 {
		return ""
	}
	reading := "the floor reaches the target here, so the distance is shardis's own work per order (its CPU per order in the table against the floor's)"
	if s.InventoryHotFloorLocalVsSeed < 1.5 {
		reading = fmt.Sprintf("so on this machine the target asks shardis for %.2f× its floor, more than the least a reservation that keeps a record per order, each a key, writes", 1.5/s.InventoryHotFloorLocalVsSeed)
	}
	return fmt.Sprintf("- **inventory_hot_sku_minted_vs_seed** (%.3f, target 1.5): the floor yardstick with every record next to the stock (a record per order, set only if the id has none, with the stock's take in the same entry, batched; `internal/bench/floor.go`) ran at %.3f× the seed's EVAL in the same rounds, and shardis at %.3f of that floor: %s.%s\n",
		s.InventoryHotMintedVsSeed, s.InventoryHotFloorLocalVsSeed, s.InventoryHotMintedVsFloor, reading, bucketReading(s))
}

// bucketReading is mintedSeedMiss's sentence on the bucketed-record floor
// (floorbucket.go), or "" when the run has no such row: what making each
// record a hash field instead of a key gained the floor, and how much of
// that floor the target asks of shardis.
func bucketReading(s Summary) string {
	b, f := s.InventoryHotFloorBucketVsSeed, s.InventoryHotFloorLocalVsSeed
	if b <= 0 || f <= 0 {
		return ""
	}
	out := fmt.Sprintf(" The same floor with each record one field of a hash of its minute's records instead of a key with its own retention (`internal/bench/floorbucket.go`; everything else as the floor's) ran at %.3f× the seed, %.2f× the floor",
		b, b/f)
	n := s.InventoryHotFloorNoTTLVsSeed
	switch {
	case n <= 0:
		return out + fmt.Sprintf(": a layout of that kind is where the records could still give, and the target asks shardis for %.2f× even that floor.", 1.5/b)
	case n >= 0.95*b:
		return out + fmt.Sprintf("; with each record a key without a TTL, as shardis keeps a reserved order's record (the no-TTL floor row, `floorNoTTLScript`), it ran at %.3f× the seed, %.2f× the bucketed row: what the bucket saves is the per-key TTL, which shardis's reserved records do not pay, so that layout leaves shardis's minted orders little to take, and the target asks shardis for %.2f× the floor whose records are written as its own are.",
			n, n/b, 1.5/n)
	default:
		return out + fmt.Sprintf("; with each record a key without a TTL, as shardis keeps a reserved order's record (the no-TTL floor row, `floorNoTTLScript`), it ran at %.3f× the seed, %.2f× the bucketed row: a hash field still costs less than a key without a TTL, so a layout of that kind is where the records could still give, and the target asks shardis for %.2f× even the bucketed floor.",
			n, n/b, 1.5/b)
	}
}

// coldReading is a floor miss's sentence on what the parts of shardis row
// v cost when no other order of their script call has their SKU (the
// 3-item rows' orders: each item a SKU drawn from many), or "" for a row
// whose orders share one SKU. The counts are callgrind's, measured apart
// from the run (TestTakeColdScriptInstructions, TestFloorScriptInstructions).
func coldReading(v string) string {
	if v != VarInv3 {
		return ""
	}
	return "The counts above are of groups whose orders share one SKU; each 3-item order's items are SKUs drawn from thousands, so a part has its group call's counter, queue offsets and redo segment to itself, and pays their reads, checks and writes alone " +
		"(" + apart("TestTakeColdScriptInstructions", "TestFloorScriptInstructions") + ", the counts of this sentence and the next: the reserve script's take of such a part costs 128,400 instructions, 72,600 up to the end of its plan's reads and checks, 17,500 of them its frame; the floor's entry of such a SKU, 95,300 (before the same change, which took 700 off it on that later day). Of the 132,600 it cost before its steps were written out, the 7 commands such a part runs (its counter's and its queue's reads, its segment's type check, its part record, and its counter's and queue's writes and its redo entry, which no other part of its call shares) take about 26,000 instructions, and carrying them between Lua and Redis (arguments in, replies out) 17,000 more; inserting into Lua tables takes 11,000, the garbage collector 6,000, formatting integers 5,700 and parsing them 3,900: no one piece is the gap (callgrind's inclusive counts, `SHARDIS_CALLGRIND_KEEP`). " +
		"Four changes took 29,600 off that take (" + apart("TestTakeColdScriptInstructions") + "): its steps written out instead of a dozen Lua calls (5,600; lua/reserve.lua), the redo offsets hash is kept as a hash table, where a field is one lookup instead of a walk of its 100 fields (`inventory/redolog.go`), a counter's field is checked as an integer with two C calls instead of four (lua/prelude.lua: int), and a call's copies of counters and queue offsets and its ZADD queues are made at their size, not grown from empty (1,900; lua/prelude.lua). "
}

// commitReading is a floor miss's sentence on what the carried commit
// costs the orders of shardis row v that are placed in one round with
// their record staged on a home other than their stock's (VarHot1,
// VarInv3), or "" for another row. The counts are callgrind's, measured
// apart from the run (TestWorkloadInstructions on a build whose
// commitStaged returned at once, TestStageScriptInstructions).
func commitReading(v string) string {
	var who, with, without, floor, timed string
	switch v {
	case VarHot1:
		who, with, without, floor, timed = "the two in three of these orders whose home is not the stock's node", "124,000", "96,700", "74,000-74,500", "11"
	case VarInv3:
		who, with, without, floor, timed = "these orders", "425,500", "368,800", "293,500-298,400", "17"
	default:
		return ""
	}
	return fmt.Sprintf("Of the distance to the floor, the largest single piece is the carried commit: %s are placed in one round trip, each record staged on its home beside the takes, so each is made final afterwards by a compare-and-set on its home (`inventory/carry.go`: a `GET` and a `SET`, its key and three arguments riding a later group call; a Confirm may decide the order in between, so the write must compare). "+
		"Counted whole ("+apart("TestWorkloadInstructions")+": medians of three rounds), a build without it (a measure only: its records stay staging) ran %s node instructions per order instead of %s, against the floor's %s (counted before the floor's record-only and decision entries stopped sending two keys they never used: the floor is cheaper now, by an amount not counted); timed in three interleaved pairs of rounds ("+apart("timed runs of that build beside the build it was cut from")+"), its median CPU per order, client and nodes, was %s %% lower. "+
		"One commit counts about 25,600 with four orders to a script call ("+apart("TestStageScriptInstructions")+", `SHARDIS_CALLGRIND_GROUP=4`): its `SET` about 11,600, and carrying it (arguments, loop, flags) 10,400 even when it reads and writes nothing. ",
		who, without, with, floor, timed)
}

// oneRoundReading is a floor miss's sentence on the one-round floor row of
// shardis row v (OneRoundFloors), or "" when v has none or the run lacks
// it: how much of the distance to the floor the one-round shape explains.
func oneRoundReading(ir *InvResult, v string) string {
	over, vs, o, ok := measuredForm(ir, OneRoundFloors, v)
	if !ok {
		return ""
	}
	co, so, _ := o.CPUPerOp()
	_, eo, ko := o.ServerPerOp()
	share := "placing an order in one round costs the floor nothing measurable here, so the distance is shardis's own work per order."
	if over < 0.98 {
		share = fmt.Sprintf("of the %.2f of the floor's orders/s that shardis lacks, the one-round shape accounts for %.2f and shardis's own work per order for the rest.", 1-over*vs, 1-over)
	}
	return fmt.Sprintf(" Shardis answers these orders after one round trip, the floor after two (the fences, then the record). "+
		"The floor placed in one round (the record staged on its home beside the fences, then made final by one more write, batched: `floorOrderOneRound`, the least a one-round reservation whose confirm needs no round of its own writes) "+
		"ran at %.3f× the floor (%s of client and %s of node CPU per order, %.1f commands and %s of script time), and shardis at %.3f× of it: %s",
		over, fmtCPU(co), fmtCPU(so), ko, fmtCPU(eo), vs, share)
}

// guardedReading is a floor miss's sentence on the guarded floor row of
// shardis row v (GuardedFloors), or "" when v has none or the run lacks
// it: how much of the distance to the floor the checks shardis's promises
// make every reservation pay explain.
func guardedReading(ir *InvResult, v string) string {
	over, vs, g, ok := measuredForm(ir, GuardedFloors, v)
	if !ok {
		return ""
	}
	cg, sg, _ := g.CPUPerOp()
	return fmt.Sprintf(" The floor trusts everything it reads; the guarded floor (`internal/bench/floorguard.go`: the same writes and batches with the checks shardis's promises make every reservation pay, "+
		"the node's stamp compared and its write sequence advanced per script call, a canonical-integer check per value read, a type check per sorted set before its first write, each entry in a protected call) "+
		"ran at %.3f× the floor (%s of client and %s of node CPU per order), and shardis at %.3f× of it.",
		over, fmtCPU(cg), fmtCPU(sg), vs)
}
