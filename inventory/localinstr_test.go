package inventory

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/shardis/shardis/internal/redistest"
)

// TestLocalScriptInstructions counts the instructions the node runs per
// order of the local reserve script, for each variant of localCostCuts,
// in group calls of 20 one-item orders (SHARDIS_CALLGRIND_GROUP sets
// another size: redistest.CallgrindGroup): what TestLocalScriptCost times,
// counted instead. A count hardly moves with the machine's load (two
// runs agree within a few hundred instructions per order for most
// variants, 2,000 at most) where timings on two shared cores move by
// ±10 % or more, so a change of a few percent shows. The node runs under
// valgrind's callgrind (redistest.UnderCallgrind); after 5 warm-up calls
// of each variant, its counters count 40 calls of each, in rounds of 10
// calls of every variant in turn (redistest.CountRounds: what the calls
// leave on the node weighs on every variant alike;
// SHARDIS_CALLGRIND_KEEP=dir keeps each count's dumps there, numbered as
// CountRounds says, for callgrind_annotate). It counts instructions, not
// time: a cache miss costs one. It is a measure, not a check: it runs
// only with SHARDIS_CALLGRIND set and valgrind installed, e.g.
//
//	SHARDIS_CALLGRIND=1 go test -count=1 -run TestLocalScriptInstructions -v ./inventory/
func TestLocalScriptInstructions(t *testing.T) {
	cg := redistest.UnderCallgrind(t)
	e := newGroupEnv(t, 32) // route a on n1 alone, under callgrind
	group := localCostGroups(t, e)
	per, calls := redistest.CallgrindGroup(), 40
	scripts := make([]*luaScript, len(localCostCuts))
	for i, v := range localCostCuts {
		scripts[i] = cutScript(t, localScript, v.cuts...)
	}
	counts := cg.CountRounds(e.ctx, e.admin, len(scripts), redistest.CallgrindRounds, redistest.CallgrindWarm,
		calls/redistest.CallgrindRounds, func(i int) { group(scripts[i], per, localCostCuts[i].general) })
	for i, v := range localCostCuts {
		fmt.Printf("%-55s %7.0f instructions/order\n", v.name, counts[i]/float64(per*calls))
	}
}

// cutPendingZADD and cutRedoZADD cut take_at's queueing of a take's
// pending-index entry and of its redo entry (lua/prelude.lua, and the
// same steps written out in lua/reserve.lua's one part), so flush sends no
// ZADD for it.
var (
	cutPendingZADD = [2]string{"  q = zqueued[PENDING]\n  if q then\n    q[#q + 1] = pdlS\n    q[#q + 1] = member\n  else\n    zqueue(PENDING, pdlS, member)\n  end\n", ""}
	cutRedoZADD    = [2]string{"  local q = zqueued[seg]\n  if q then\n    q[#q + 1] = offS\n    q[#q + 1] = id\n  else\n    zqueue(seg, offS, id)\n  end\n", "  local q\n"}
	// the local script's (lua/local.lua's one part writes take_at's steps
	// out, and its general path calls take_at: the cuts name the first)
	cutLocalPendingZADD = [2]string{cutPendingZADD[0] + "  return times[3]", "  return times[3]"}
	cutLocalRedoZADD    = [2]string{localTaken + cutRedoZADD[0], localTaken + cutRedoZADD[1]}
)

// localTaken is the line before the redo entry's queueing in lua/local.lua.
const localTaken = "  v[4], v[6] = avail - take, resv + take\n  if not v[7] then stock_dirty(ck, v) end\n"

// takeCostCuts are the variants TestTakeScriptInstructions counts: the
// reserve script (reserveScript) taking one stock part in its short
// layout (reserveCall), as the one-round and general paths send it to a
// node other than the order's home, with pieces of its source replaced
// (each cut must match once, as for localCostCuts).
var takeCostCuts = []struct {
	name string
	cuts [][2]string
}{
	{"the script as it is", nil},
	{"without its part record's SET", [][2]string{
		{"if redis.call('SETNX', pk, rec) ~= 1 then", "if false then"}}},
	{"without its pending-index ZADD", [][2]string{
		cutPendingZADD}},
	{"without its redo ZADD", [][2]string{
		cutRedoZADD}},
	{"the plan only (reads, checks; no write)", [][2]string{
		{"  local offS, deadlineS = I(off), Idl(deadline)\n", "  do return 'pending:1:1:0' end\n  local offS, deadlineS = I(off), Idl(deadline)\n"}}},
	{"an empty body (the group's frame)", [][2]string{
		{"local one = #CKEYS == 2\n", "do return 'pending:1:1:0' end\nlocal one = #CKEYS == 2\n"}}},
}

// TestTakeScriptInstructions counts, as TestLocalScriptInstructions does,
// the instructions the node runs per part of the reserve script taking
// one stock part, in group calls of 20 such takes (or
// SHARDIS_CALLGRIND_GROUP; each a new part of a
// new order), for each variant of takeCostCuts. A measure, not a check:
//
//	SHARDIS_CALLGRIND=1 go test -count=1 -run TestTakeScriptInstructions -v ./inventory/
func TestTakeScriptInstructions(t *testing.T) {
	countTakes(t, "", func(int) string { return "s" })
}

// TestTakeColdScriptInstructions counts what TestTakeScriptInstructions
// does, each take of a SKU no other take of its group call has (one of
// 1,000, each loaded on the node), as the 3-item rows' orders are: each
// reads its counter, its queue's offsets and its segment's type afresh,
// and flush writes each back by itself. A measure, not a check:
//
//	SHARDIS_CALLGRIND=1 go test -count=1 -run TestTakeColdScriptInstructions -v ./inventory/
func TestTakeColdScriptInstructions(t *testing.T) {
	const skus = 1000
	countTakes(t, "cold SKU: ", func(seq int) string { return "s" + strconv.Itoa(seq*7919%skus) })
}

// countTakes runs takeCostCuts as TestTakeScriptInstructions says, the
// takes cycling through the SKUs sku(1) … sku(1000) of route a (each
// loaded first), and prints each variant's count after label.
func countTakes(t *testing.T, label string, sku func(seq int) string) {
	cg := redistest.UnderCallgrind(t)
	e := newGroupEnv(t, 32)
	inv, ctx := e.inv, e.ctx
	loaded := map[string]bool{}
	for seq := 1; seq <= 1000; seq++ {
		if s := sku(seq); !loaded[s] {
			loaded[s] = true
			if _, err := inv.LoadStock(ctx, "a", s, MaxQuantity, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	token := inv.topology(ctx).token
	seq := 0
	group := func(s *luaScript, per int) {
		calls := make([]*groupCall, per)
		for j := range calls {
			seq++
			id, tok := "take-"+strconv.Itoa(seq), newToken()
			items := []Item{{Route: "a", SKU: sku(seq%1000 + 1), Quantity: 1}}
			reqs, ok := inv.localReqs(ctx, nil, e.n, id, tok, items, "")
			if !ok {
				t.Fatal("the order's item is not on the node")
			}
			keys, args, err := reserveCall(id, tok, partDue{hold: time.Minute}, reqs)
			if err != nil {
				t.Fatal(err)
			}
			calls[j] = newGroupCall(s, keys, args)
		}
		inv.sendGroup(ctx, e.n, s, token, calls)
		for _, gc := range calls {
			if gc.err != nil {
				t.Fatal(gc.err)
			}
		}
	}
	per, calls := redistest.CallgrindGroup(), 40
	scripts := make([]*luaScript, len(takeCostCuts))
	for i, v := range takeCostCuts {
		scripts[i] = cutScript(t, reserveScript, v.cuts...)
	}
	counts := cg.CountRounds(ctx, e.admin, len(scripts), redistest.CallgrindRounds, redistest.CallgrindWarm,
		calls/redistest.CallgrindRounds, func(i int) { group(scripts[i], per) })
	for i, v := range takeCostCuts {
		fmt.Printf("%-55s %7.0f instructions/part\n", label+v.name, counts[i]/float64(per*calls))
	}
}

// TestStageScriptInstructions counts, as TestLocalScriptInstructions does,
// the node instructions per order on the home of an order the one-round
// path places with its stock on another node (staged.go): its stage
// (stageTakeScript in its short layout: the staging record, no part), in
// group calls of 20 stages (SHARDIS_CALLGRIND_GROUP); the same groups
// each carrying the commits of the previous group's orders (carry.go:
// their staging records made reserved), which is the order's whole work
// on its home; and the stage's frame (the body only answers). A measure,
// not a check:
//
//	SHARDIS_CALLGRIND=1 go test -count=1 -run TestStageScriptInstructions -v ./inventory/
func TestStageScriptInstructions(t *testing.T) {
	cg := redistest.UnderCallgrind(t)
	e := newGroupEnv(t, 32)
	inv, ctx := e.inv, e.ctx
	items := []Item{{Route: "a", SKU: "s", Quantity: 1}}
	token := inv.topology(ctx).token
	mutation, due := inv.stageDeadline(time.Hour)
	if _, err := inv.LoadStock(ctx, "a", "s", MaxQuantity, 0); err != nil {
		t.Fatal(err)
	}
	per, calls := redistest.CallgrindGroup(), 40
	seq := 0
	// group sends a group of per stages; staged is the variant's last
	// group's orders, which it commits (carried) when commit is set, and
	// then this group's
	group := func(s *luaScript, commit, withPart bool, staged *[]carriedCommit) {
		gcs := make([]*groupCall, per)
		blobs := make([][2]string, per) // id, token
		recs := make([][2]string, per)  // the staging record's pieces
		for j := range gcs {
			seq++
			id, tok := "stage-"+strconv.Itoa(seq), newToken()
			parts := []part{{ID: stockPartID(id, tok, 0), Node: "n2", Kind: PartStock, Item: 0, Route: "a", SKU: "s", Qty: 1,
				Redo: "inv:redo:7"}}
			var reqs []partReq
			if withPart { // the home's part instead
				var ok bool
				if reqs, ok = inv.localReqs(ctx, nil, e.n, id, tok, items, ""); !ok {
					t.Fatal("the order's item is not on the node")
				}
				reqs[0].Redo = reqs[0].queue
				parts = []part{reqs[0].part}
			}
			promised := encodeOrderParts(id, tok, parts)
			keys, args, rec, err := inv.stageTakeCall(id, tok, due, mutation, time.Hour, digestOf(items, ""), "", promised, reqs)
			if err != nil {
				t.Fatal(err)
			}
			gcs[j] = newGroupCall(stageTakeScript, keys, args)
			blobs[j], recs[j] = [2]string{id, tok}, rec
		}
		if commit {
			for _, c := range *staged {
				if !inv.carry(c) {
					t.Fatal("the inventory carries no commit")
				}
			}
		}
		inv.sendGroup(ctx, e.n, s, token, gcs)
		*staged = (*staged)[:0]
		for j, gc := range gcs {
			if gc.err != nil {
				t.Fatal(gc.err)
			}
			nparts := 0
			if withPart {
				nparts = 1
			}
			r, err := decodeStageTake(e.n.Name(), gc.reply, nparts)
			if err != nil {
				t.Fatal(err)
			}
			id, tok := blobs[j][0], blobs[j][1]
			parts := []part{{ID: stockPartID(id, tok, 0), Node: "n2", Kind: PartStock, Item: 0, Route: "a", SKU: "s", Qty: 1,
				Redo: "inv:redo:7", Offset: int64(seq)}}
			blob := encodeOrderParts(id, tok, parts)
			created := r.deadline.UnixMilli() - time.Hour.Milliseconds()
			sv, prefix, crS, err := stagedCommitValues(tok, recs[j], created, packOrderParts(blob, tok))
			if err != nil {
				t.Fatal(err)
			}
			*staged = append(*staged, carriedCommit{ctx: ctx, home: e.n, orderID: id, token: tok, parts: blob, epoch: token,
				staged: sv, prefix: prefix, created: crS})
		}
	}
	variants := []struct {
		name             string
		commit, withPart bool
		cuts             [][2]string
	}{
		{"the stage", false, false, nil},
		{"the stage and the commit of an earlier order", true, false, nil},
		{"the stage of an order with a part on its home", false, true, nil},
		{"the stage's frame (the body only answers)", false, false, [][2]string{
			{"local one, pid, pwant, pa, pb, puser = false\n", "do return 'staged:1' end\nlocal one, pid, pwant, pa, pb, puser = false\n"}}},
	}
	scripts := make([]*luaScript, len(variants))
	for i, v := range variants {
		scripts[i] = cutScript(t, stageTakeScript, v.cuts...)
	}
	staged := make([][]carriedCommit, len(variants)) // each variant's last group's orders
	counts := cg.CountRounds(ctx, e.admin, len(scripts), redistest.CallgrindRounds, redistest.CallgrindWarm,
		calls/redistest.CallgrindRounds, func(i int) { group(scripts[i], variants[i].commit, variants[i].withPart, &staged[i]) })
	for i, v := range variants {
		fmt.Printf("%-55s %7.0f instructions/order\n", v.name, counts[i]/float64(per*calls))
	}
}
