package inventory

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLimitChangeReachesADrainedNodeThatFails: a per-user limit change
// (LoadStock with perUserLimit) while one node of the route is drained
// for it (`shardis drain`) and stops answering during the call. A drained
// node takes no stock share but keeps the quota counters of the users it
// owns in the route (quotaNode never skips a drained node), so it must
// take the limit like every node: the change either reaches it or the
// LoadStock fails naming it and records the change for ConvergeLimits
// (limits.go). Before, loadShares skipped a node that was neither a
// target (drained) nor usable any longer when its loop ran, though
// limitReaches had found it usable: LoadStock answered success, nothing
// was recorded, the node kept no limit once it answered again, and a user
// whose quota node it is reserved 3 units of a SKU limited to 1.
func TestLimitChangeReachesADrainedNodeThatFails(t *testing.T) {
	t.Parallel()
	e := newLimitRouteEnv(t)
	if err := e.r.SetRouteEnabled(e.ctx, "n1", "inventory", "d", false); err != nil {
		t.Fatal(err)
	}
	var lerr error
	for try := 0; ; try++ {
		waitUsable(t, e, "n1")
		// n1 stops answering just before the change: still UP when
		// limitReaches looks, DOWN once its limit-version read times out.
		e.srvs[0].Pause()
		_, lerr = e.inv.LoadStock(e.ctx, "d", "t", 0, 1)
		e.srvs[0].Resume()
		// refused before any write (n1 already DOWN when limitReaches
		// looked): not the case under test, try again
		if lerr == nil || !strings.Contains(lerr.Error(), "nothing changed") || try == 5 {
			break
		}
		t.Logf("LoadStock (try %d): %v", try, lerr)
	}
	if lerr != nil && (!errors.Is(lerr, ErrUnavailable) || !strings.Contains(lerr.Error(), "n1")) {
		t.Fatalf("LoadStock: %v; want success or ErrUnavailable naming n1", lerr)
	}
	t.Logf("LoadStock(limit 1) with drained n1 paused: err %v", lerr)
	waitUsable(t, e, "n1")
	for _, n := range []string{"n1", "n2"} {
		left, err := e.inv.ConvergeLimits(e.ctx, n)
		t.Logf("ConvergeLimits(%s) = %d, %v", n, left, err)
	}
	for _, n := range []string{"n1", "n2"} {
		f := e.clients[n].HMGet(e.ctx, stockKey("d", "t"), "limit", "limit_ver").Val()
		t.Logf("%s: limit %v, limit_ver %v", n, f[0], f[1])
	}
	set, _ := e.inv.set(e.ctx, "d")
	user := ""
	for i := 0; ; i++ {
		if u := "u" + strconv.Itoa(i); quotaNode(set, u).Name() == "n1" {
			user = u
			break
		}
	}
	var got int64
	for i := range 3 {
		_, err := e.inv.Reserve(e.ctx, "od"+strconv.Itoa(i), []Item{{Route: "d", SKU: "t", Quantity: 1}}, user, time.Minute)
		switch {
		case err == nil:
			got++
		case errors.Is(err, ErrLimitExceeded):
		default:
			t.Fatalf("Reserve %d: %v", i, err)
		}
	}
	if got > 1 {
		t.Errorf("user %s (quota node n1, drained) holds %d units of d/t after LoadStock answered %v setting its per-user limit to 1", user, got, lerr)
	}
}

// waitUsable waits until the inventory may use node name again.
func waitUsable(t *testing.T, e *stagedEnv, name string) {
	t.Helper()
	n, _ := e.r.Node(name)
	for deadline := time.Now().Add(10 * time.Second); !e.inv.usable(n); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("node %s not usable 10s later", name)
		}
	}
}
