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
// (or SHARDIS_CALLGRIND_GROUP) "t" entries, each a record next to the stock of the hot SKU (the minted
// floor row's entry), on a node under valgrind's callgrind
// (redistest.UnderCallgrind), counters zeroed after 5 warm-up calls and
// dumped after 40 more. It prints the entry as it is and the frame alone
// (an entry that only answers: the call, its keys and arguments, the
// clock, the loop), then the entry again, each of a SKU no other entry of
// its call has (one of 1,000), as the 3-item rows' are. Counts hardly
// move with the machine's load, so the two scripts' difference shows
// where timings cannot. It is a measure, not a
// check: it runs only with SHARDIS_CALLGRIND set and valgrind installed,
// e.g.
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
	perEntry := func(s *redis.Script) float64 {
		for range 5 {
			call(s)
		}
		return cg.Count(ctx, c, func() {
			for range calls {
				call(s)
			}
		}) / float64(per*calls)
	}
	const loop = "  if mode == 'r' then\n"
	if strings.Count(floorScript, loop) != 1 {
		t.Fatalf("floorScript has not one %q: the frame's cut would measure something else", loop)
	}
	frame := strings.Replace(floorScript, loop, "  if true then\n    out[#out + 1] = 1\n  elseif mode == 'r' then\n", 1)
	fmt.Printf("%-55s %7.0f instructions/entry\n", "the floor's entry (a record next to the stock)", perEntry(redis.NewScript(floorScript)))
	fmt.Printf("%-55s %7.0f instructions/entry\n", "its frame (the entry only answers)", perEntry(redis.NewScript(frame)))
	cold = true
	fmt.Printf("%-55s %7.0f instructions/entry\n", "cold SKU: the floor's entry", perEntry(redis.NewScript(floorScript)))
}

// coldSKUs is SKUs "0" to n-1.
func coldSKUs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = strconv.Itoa(i)
	}
	return out
}
