package inventory

import (
	"fmt"
	"testing"

	"github.com/shardis/shardis/internal/redistest"
)

// TestLocalScriptInstructions counts the instructions the node runs per
// order of the local reserve script, for each variant of localCostCuts,
// in group calls of 20 one-item orders: what TestLocalScriptCost times,
// counted instead. A count hardly moves with the machine's load (two
// runs agree within a few hundred instructions per order, under 0.5 %)
// where timings on two shared cores move by ±10 % or more, so a change of
// a few percent shows. The node runs
// under valgrind's callgrind (redistest.UnderCallgrind); its counters
// are zeroed after 5 warm-up calls and dumped after 40 more. It counts
// instructions, not time: a cache miss costs one. It is a measure, not a
// check: it runs
// only with SHARDIS_CALLGRIND set and valgrind installed, e.g.
//
//	SHARDIS_CALLGRIND=1 go test -count=1 -run TestLocalScriptInstructions -v ./inventory/
func TestLocalScriptInstructions(t *testing.T) {
	cg := redistest.UnderCallgrind(t)
	e := newGroupEnv(t, 32) // route a on n1 alone, under callgrind
	group := localCostGroups(t, e)
	const per, calls = 20, 40
	// perOrder: instructions per order of calls of per orders of s
	perOrder := func(s *luaScript, general bool) float64 {
		for range 5 {
			group(s, per, general)
		}
		return cg.Count(e.ctx, e.admin, func() {
			for range calls {
				group(s, per, general)
			}
		}) / (per * calls)
	}
	for _, v := range localCostCuts {
		fmt.Printf("%-55s %7.0f instructions/order\n", v.name, perOrder(cutScript(t, localScript, v.cuts...), v.general))
	}
}
