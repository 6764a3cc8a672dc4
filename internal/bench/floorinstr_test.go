package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/internal/redistest"
)

// TestFloorScriptInstructions counts the instructions a node runs per
// entry of the floor script (floorScript), the yardstick beside the local
// reserve's count (inventory's TestLocalScriptInstructions): calls of 20
// (or SHARDIS_CALLGRIND_GROUP) "t" entries, each a record next to the
// stock of the hot SKU (the minted floor row's entry), on a node under
// valgrind's callgrind (redistest.UnderCallgrind), each variant counted
// over 40 calls after 5 warm-up calls, in rounds (redistest.CountRounds).
// It prints the entry as it is and the frame alone (an entry that only
// answers: the call, its keys and arguments, the clock, the loop), then
// the entry again, each of a SKU no other entry of its call has (one of
// 1,000), as the 3-item rows' are. Counts hardly move with the machine's
// load, so the two scripts' difference shows where timings cannot. It is
// a measure, not a check: it runs only with SHARDIS_CALLGRIND set and
// valgrind installed, e.g.
//
//	SHARDIS_CALLGRIND=1 go test -count=1 -run TestFloorScriptInstructions -v ./internal/bench/
func TestFloorScriptInstructions(t *testing.T) {
	cg := redistest.UnderCallgrind(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	const skus = 1000 // the cold SKUs, "0" to "999"
	for _, sku := range append([]string{floorHotSKU}, coldSKUs(skus)...) {
		if err := c.HSet(ctx, floorStock(sku), "available", "1000000000", "reserved", "0").Err(); err != nil {
			t.Fatal(err)
		}
	}
	per, calls := redistest.CallgrindGroup(), 40
	seq := 0
	cold := false
	// call sends one call of per entries of script s: an order id as long
	// as a minted one, its record next to the stock (of the hot SKU, or,
	// when cold, of a SKU no other entry of the call has, as the 3-item
	// rows' are)
	call := func(s *redis.Script) {
		keys := []string{floorPending, floorOffsets}
		args := []any{"600000", "604800"}
		for range per {
			seq++
			id, sku := fmt.Sprintf("n1-%012d%08x", seq, seq), floorHotSKU
			if cold {
				sku = strconv.Itoa(seq * 7919 % skus)
			}
			keys = append(keys, "floor:order:"+id, floorStock(sku), floorRedo(sku))
			args = append(args, "t", id+".0", "reserved|n1:"+sku+":1")
		}
		if err := s.Run(ctx, c, keys, args...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	const loop = "  if mode == 'r' then\n"
	if strings.Count(floorScript, loop) != 1 {
		t.Fatalf("floorScript has not one %q: the frame's cut would measure something else", loop)
	}
	frame := strings.Replace(floorScript, loop, "  if true then\n    out[#out + 1] = 1\n  elseif mode == 'r' then\n", 1)
	variants := []struct {
		name   string
		script *redis.Script
		cold   bool
	}{
		{"the floor's entry (a record next to the stock)", redis.NewScript(floorScript), false},
		{"its frame (the entry only answers)", redis.NewScript(frame), false},
		{"cold SKU: the floor's entry", redis.NewScript(floorScript), true},
	}
	counts := cg.CountRounds(ctx, c, len(variants), redistest.CallgrindRounds, redistest.CallgrindWarm,
		calls/redistest.CallgrindRounds, func(i int) {
			cold = variants[i].cold
			call(variants[i].script)
		})
	for i, v := range variants {
		fmt.Printf("%-55s %7.0f instructions/entry\n", v.name, counts[i]/float64(per*calls))
	}
}

// coldSKUs is SKUs "0" to n-1.
func coldSKUs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = strconv.Itoa(i)
	}
	return out
}
