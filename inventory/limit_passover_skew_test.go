package inventory

import (
	"errors"
	"testing"
	"time"
)

// TestLimitSetBackWithANodeDownAfterAFastClocksChange: a per-user limit
// change that reached one node only, made by an instance whose clock runs
// 3 s ahead, then, a moment later and with that node down, a LoadStock
// setting the limit back to what the other node still holds (limitReaches:
// "unchanged", the down node passed over, its change recorded for the
// reconciler, LoadStock answering success).
//
//  1. The SKU's limit is 1 on n1 and n2.
//  2. The instance 3 s ahead sets it to 5: the call fails on n1
//     (ErrUnavailable), n2 takes 5, and records the change for
//     ConvergeLimits.
//  3. n2 goes down; the operator sets the limit back to 1 on an instance
//     with a right clock: it answers success.
//  4. n2 comes back; the reconcilers' passes run.
//
// The version of a change was this instance's clock, raised above the
// versions the route's usable nodes hold (nextLimitVersion): the down
// node's was not read, so the change of step 3, stamped by the right
// clock, ranked below the one of step 2, stamped 3 s ahead, and the
// reconciler took 5 to n1: a user held 5 units of a SKU whose last
// LoadStock set its limit to 1 and answered success (SECURITY.md, "Clock
// skew": "a change made after another one answered wins whatever the two
// instances' clocks say"). The version now starts at the clocks of the
// route's usable nodes (Redis TIME), not the calling process's.
func TestLimitSetBackWithANodeDownAfterAFastClocksChange(t *testing.T) {
	t.Parallel() // its own nodes; only the fast instance's clock moves
	e := newLimitRouteEnv(t)
	if _, err := e.inv.LoadStock(e.ctx, "d", "t", 0, 1); err != nil {
		t.Fatal(err)
	}
	// 2. the fast instance's change, failing on n1
	fast := e.loadsNeverReach("n1")
	fast.limitClock = func() time.Time { return time.Now().Add(3 * time.Second) }
	_, err := fast.LoadStock(e.ctx, "d", "t", 0, 5)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("LoadStock limit 5 with n1 failing = %v; want ErrUnavailable", err)
	}
	// 3. n2 goes down, the limit is set back to 1
	e.pauseN2()
	_, lerr := e.inv.LoadStock(e.ctx, "d", "t", 0, 1)
	t.Logf("LoadStock(limit 1) with n2 down: err %v", lerr)
	e.srvs[1].Resume()
	waitUsable(t, e, "n2")
	// 4. reconciler passes, every node
	limits := e.convergedLimits(3)
	if limits["n1"] != limits["n2"] {
		t.Errorf("the route keeps two per-user limits: %v", limits)
	}
	if lerr != nil {
		return // refused: the operator knows the limit 1 did not take
	}
	if limits["n1"] != "1" || limits["n2"] != "1" {
		t.Errorf("after the last LoadStock set limit 1 and answered success, and the reconcilers' passes, the route's limits are %v; want 1 everywhere", limits)
	}
	user, got := e.unitsHeldByAUserOnN2("us", 5)
	if got > 1 {
		t.Errorf("user %s holds %d units of d/t, whose per-user limit the last LoadStock set to 1 (answered success)", user, got)
	}
}
