package inventory

import (
	"errors"
	"strconv"
	"testing"
	"time"
)

// TestLimitLoweredAfterAFastClocksChange: two LoadStock limit changes of
// one SKU, one after the other (not racing): an instance whose clock runs
// 3 s ahead sets the per-user limit to 5; a second later an operator on
// another instance, its clock right, lowers it to 1. The version of a
// change was the calling instance's clock (limitVersion), and a node
// keeps the highest version it was sent (load.lua), so the later change,
// stamped 2 s below the earlier one, was dropped on every node while its
// LoadStock answered success: the SKU kept the limit 5 and a user held 5
// units of a SKU whose limit was set to 1 last, as SECURITY.md's racing
// limit changes did before (the shardis process's own clock "decides
// nothing", SECURITY.md "Clock skew"). The instance ahead is played by
// its load scripts as it sends them: the same calls, at its version.
func TestLimitLoweredAfterAFastClocksChange(t *testing.T) {
	t.Parallel()
	e := newLimitRouteEnv(t)
	set, err := e.inv.set(e.ctx, "d")
	if err != nil {
		t.Fatal(err)
	}
	// the instance 3 s ahead: LoadStock(d, t, 0, 5) as it runs there
	ahead := time.Now().Add(3 * time.Second).UnixMilli()
	if took, failed, _, _ := e.inv.loadShares(e.ctx, set, stockKey("d", "t"), map[string]int64{"n1": 0}, 5, ahead, true); len(failed) > 0 || len(took) != 2 {
		t.Fatalf("the fast instance's limit change: took %d, failed %v", len(took), failed)
	}
	time.Sleep(time.Second) // the operator changes it again a second later
	lvl, err := e.inv.LoadStock(e.ctx, "d", "t", 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range lvl.Nodes {
		t.Logf("after LoadStock(limit 1) answered success: %s holds limit %d", ns.Node, ns.Limit)
		if ns.Limit != 1 {
			t.Errorf("%s holds per-user limit %d after the later LoadStock set it to 1 and answered success", ns.Node, ns.Limit)
		}
	}
	user := ""
	for i := 0; user == ""; i++ {
		if u := "u" + strconv.Itoa(i); quotaNode(set, u).Name() == "n1" {
			user = u
		}
	}
	var got int64
	for i := range 5 {
		_, err := e.inv.Reserve(e.ctx, "o"+strconv.Itoa(i), []Item{{Route: "d", SKU: "t", Quantity: 1}}, user, time.Minute)
		if err == nil {
			got++
		} else if !errors.Is(err, ErrLimitExceeded) {
			t.Fatal(err)
		}
	}
	if got > 1 {
		t.Errorf("user %s holds %d units of d/t, whose per-user limit the later LoadStock set to 1", user, got)
	}
}
