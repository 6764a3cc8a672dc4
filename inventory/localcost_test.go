package inventory

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// localCostCuts are the variants TestLocalScriptCost times: the local
// reserve script (localScript) with pieces of its source replaced. Each
// cut must match the source exactly once, so a change of the script that
// moves a piece fails the measure instead of timing the wrong thing.
var localCostCuts = []struct {
	name string
	cuts [][2]string
	// general: the orders go in the script's general layout
	// (localGeneralCall), which its general path reads
	general bool
}{
	{"the script as it is", nil, false},
	{"the general path (plan_parts, write_parts)", nil, true},
	{"without its pending-index ZADD", [][2]string{
		cutLocalPendingZADD}, false},
	{"with a part record (the SET its inline part saves)", [][2]string{
		{"  -- take_at's deferred writes, its arguments named as there (its part\n", "  part_new(partPrefix .. ARGV[5], 'p', 'q', want, off, times[2])\n  -- take_at's deferred writes, its arguments named as there (its part\n"}}, false},
	{"with the EXISTS of the part's key (an inline part's, which cannot exist)", [][2]string{
		{"  local v, o = stocks[ck], offtab[REDO_OFFSETS]\n", "  if redis.call('EXISTS', partPrefix .. ARGV[5]) == 1 then return {'existing'} end\n  local v, o = stocks[ck], offtab[REDO_OFFSETS]\n"}}, false},
	{"without both ZADDs", [][2]string{
		cutLocalPendingZADD,
		cutLocalRedoZADD}, false},
	{"with the record's head read first", [][2]string{
		{"  local ck, xk, want = CKEYS[1]", "  if order_kept(key) then return {'existing'} end\n  local ck, xk, want = CKEYS[1]"}}, false},
	{"the plan only (reads, checks; no write)", [][2]string{
		{"  if not zchecked[PENDING] then zset_ok(PENDING) end\n", "  do return 'reserved:1:1' end\n"}}, false},
	{"the plan, then the record SET", [][2]string{
		{"  -- take_at's deferred writes, its arguments named as there (its part\n", "  do return 'reserved:1:1' end\n  -- take_at's deferred writes, its arguments named as there (its part\n"}}, false},
	{"an empty body (the group's frame)", [][2]string{
		{"local key = KEYS[2]\n", "do return 'reserved:1:1' end\nlocal key = KEYS[2]\n"}}, false},
}

// TestLocalScriptCost measures where a node's time goes in the local
// reserve script (one order of one item on its home node, the minted hot
// SKU's path): it sends group calls of SHARDIS_LOCALCOST orders (e.g. 20,
// what group commit gathers under load) of each variant of
// localCostCuts, in rotating order over 9 rounds (the keyspace grows as
// the rounds go), and prints each variant's median µs of script time per
// order (INFO commandstats' usec_per_call of FCALL over the orders per
// call). The differences between variants are what the pieces cost. The
// script as it is and the empty body also go in calls of one order, from
// which it prints what a script call costs of its own (the stamp check,
// the per-call state, the shared reads and writes: what its orders
// share). Four
// goroutines send the calls, so the node is never idle between them (one
// at a time, each call would meet cold caches and time half again more
// than under load). It is a measure, not a check: it runs only with
// SHARDIS_LOCALCOST set, e.g.
//
//	SHARDIS_LOCALCOST=20 go test -count=1 -run TestLocalScriptCost -v ./inventory/
func TestLocalScriptCost(t *testing.T) {
	per, _ := strconv.Atoi(os.Getenv("SHARDIS_LOCALCOST"))
	if per <= 0 {
		t.Skip("a measure: set SHARDIS_LOCALCOST=<orders per group call> to run it")
	}
	e := newGroupEnv(t, 32) // route a on n1 alone
	c, ctx := e.admin, e.ctx
	group := localCostGroups(t, e)
	variants := make([]*luaScript, len(localCostCuts))
	for i, v := range localCostCuts {
		variants[i] = cutScript(t, localScript, v.cuts...)
	}
	// timed: µs of script time per order of calls of per orders of s, 200
	// calls sent by four goroutines
	timed := func(s *luaScript, per int, general bool) float64 {
		if err := c.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 50 {
					group(s, per, general)
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		us, err := fcallUsecPerCall(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		return us / float64(per)
	}
	// the variants in calls of per orders, then the first and the last
	// (the script as it is, the empty body) in calls of one
	ones := []int{0, len(variants) - 1}
	perOrder := make([][]float64, len(variants)+len(ones))
	for round := range 9 {
		for k := range perOrder {
			i := (k + round) % len(perOrder)
			if i < len(variants) {
				perOrder[i] = append(perOrder[i], timed(variants[i], per, localCostCuts[i].general))
			} else {
				j := ones[i-len(variants)]
				perOrder[i] = append(perOrder[i], timed(variants[j], 1, localCostCuts[j].general))
			}
		}
	}
	med := make([]float64, len(perOrder))
	for i := range perOrder {
		slices.Sort(perOrder[i])
		med[i] = perOrder[i][len(perOrder[i])/2]
	}
	for i, v := range localCostCuts {
		fmt.Printf("%-45s %6.2f µs/order (median of %d rounds)\n", v.name, med[i], len(perOrder[i]))
	}
	if per > 1 {
		// a call of one order costs f + c, a call of per orders f + per·c
		for j, i := range ones {
			one, many := med[len(variants)+j], med[i]*float64(per)
			fmt.Printf("%-45s %6.2f µs/call of its own (one order per call: %.2f µs)\n", localCostCuts[i].name, (float64(per)*one-many)/float64(per-1), one)
		}
	}
}

// fcallUsecPerCall is INFO commandstats' usec_per_call of FCALL.
func fcallUsecPerCall(ctx context.Context, c *redis.Client) (float64, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(l), "cmdstat_fcall:")
		if !ok {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "usec_per_call="); ok {
				return strconv.ParseFloat(v, 64)
			}
		}
	}
	return 0, fmt.Errorf("no FCALL line in INFO commandstats")
}

// localCostGroups loads e's node with stock for the local reserve's
// measures and returns what sends one group call of per orders of script
// s (a variant of localScript) there, each a new one-item order (in the
// script's general layout when general, localGeneralCall, else as
// localCall sends it), failing the test on any call's error.
func localCostGroups(t *testing.T, e *groupEnv) func(s *luaScript, per int, general bool) {
	inv, home, ctx := e.inv, e.n, e.ctx
	if _, err := inv.LoadStock(ctx, "a", "s", MaxQuantity, 0); err != nil {
		t.Fatal(err)
	}
	items := []Item{{Route: "a", SKU: "s", Quantity: 1}}
	if _, err := inv.Reserve(ctx, "warm", items, "", time.Hour); err != nil {
		t.Fatal(err)
	}
	token := inv.topology(ctx).token
	var seq atomic.Int64
	return func(s *luaScript, per int, general bool) {
		calls := make([]*groupCall, per)
		for j := range calls {
			id, tok := "cost-"+strconv.FormatInt(seq.Add(1), 10), newToken()
			reqs, ok := inv.localReqs(ctx, nil, home, id, tok, items, "")
			if !ok {
				t.Error("the order is not local")
				return
			}
			call := inv.localCall
			if general {
				call = localGeneralCall
			}
			keys, args, _, err := call(nil, id, tok, digestOf(items, ""), "", time.Hour, reqs)
			if err != nil {
				t.Error(err)
				return
			}
			calls[j] = newGroupCall(s, keys, args)
		}
		inv.sendGroup(ctx, home, s, token, calls)
		for _, gc := range calls {
			if gc.err != nil {
				t.Error(gc.err)
			}
		}
	}
}
