package inventory

import (
	"errors"
	"testing"
	"time"
)

// TestLimitUnchangedPassOverKeepsNoSplit: a per-user limit change that
// reached only some nodes, then a LoadStock of the limit the reachable
// nodes still hold while the node that took the partial change is down.
//
//  1. The SKU's limit is 1 on n1 and n2.
//  2. LoadStock(limit 5) fails on n1 during the call (ErrUnavailable): n2
//     took 5 at version v1, and n2 records the change for ConvergeLimits.
//  3. n2 goes down (before a reconciler pass took v1 to n1).
//  4. The operator sets the limit back to 1: limitReaches finds n2 not
//     usable, but every reachable node (n1) holds 1 already, so the
//     change is "unchanged": it answers success, passing n2 over, yet the
//     load still stamps n1 with a new version v2 > v1, and nothing is
//     recorded for n2.
//  5. n2 comes back; ConvergeLimits takes v1 (5) to n1, where v2 is newer:
//     a no-op, and the pending change is dropped as done.
//
// The route keeps two limits for good: n1 1, n2 5. A user whose quota
// node is n2 holds 5 units of a SKU whose last LoadStock set (and
// answered success for) a per-user limit of 1; neither LoadStock's limit
// holds on the whole route.
func TestLimitUnchangedPassOverKeepsNoSplit(t *testing.T) {
	t.Parallel() // its own nodes; it mostly waits
	e := newLimitRouteEnv(t)
	if _, err := e.inv.LoadStock(e.ctx, "d", "t", 0, 1); err != nil {
		t.Fatal(err)
	}
	// 2. an instance whose loads never reach n1 (it fails during the call)
	lossy := e.loadsNeverReach("n1")
	time.Sleep(5 * time.Millisecond)
	if _, err := lossy.LoadStock(e.ctx, "d", "t", 0, 5); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("LoadStock limit 5 with n1 failing = %v; want ErrUnavailable", err)
	} else {
		t.Logf("LoadStock(limit 5), n1 failing: %v", err)
	}
	t.Logf("n2's pending changes: %v", e.clients["n2"].HGetAll(e.ctx, keyLimitsTodo).Val())

	// 3. n2 goes down
	e.pauseN2()
	// 4. the limit set back to 1
	time.Sleep(5 * time.Millisecond)
	_, lerr := e.inv.LoadStock(e.ctx, "d", "t", 0, 1)
	t.Logf("LoadStock(limit 1) with n2 down: err %v", lerr)
	e.srvs[1].Resume()
	waitUsable(t, e, "n2")

	// 5. reconciler passes, every node
	limits := e.convergedLimits(3)
	if lerr == nil && (limits["n1"] != "1" || limits["n2"] != "1") {
		t.Errorf("after the last LoadStock set limit 1 and answered success, and the reconcilers' passes, the route's limits are %v; want 1 everywhere", limits)
	}
	if limits["n1"] != limits["n2"] {
		t.Errorf("the route keeps two per-user limits for good: %v", limits)
	}
	if lerr != nil {
		return // refused: the operator knows the limit 1 did not take
	}
	user, got := e.unitsHeldByAUserOnN2("us", 5)
	if got > 1 {
		t.Errorf("user %s holds %d units of d/t, whose per-user limit the last LoadStock set to 1 (answered success)", user, got)
	}
}
