package inventory

import (
	"errors"
	"testing"
	"time"
)

// A failed one-round record whose cancels never landed holds a per-user
// quota part of its attempt (retry_begin_failed_test.go's failedUnsettled,
// for an order with a user): the user is at the SKU's limit only because
// of that dead attempt. A retry of the order id must reserve it (the failed
// record excludes that attempt, so its quota is not the user's any more),
// count the user's quota once (the dead attempt's quota part cancelled,
// the retry's taken), and keep the retry's own quota part pending.

// quotaUser is the user of the quota tests: its quota nodes are the
// routes' only nodes (n1 for a, n2 for b, n3 for c).
const quotaUser = "quota-user"

// quotaCount returns the units user holds of route rt's SKU s on the
// route's only node (its quota counter; 0 when absent).
func (e *stagedEnv) quotaCount(rt, user string) int64 {
	e.t.Helper()
	name := map[string]string{"a": "n1", "b": "n2", "c": "n3"}[rt]
	v, err := e.clients[name].Get(e.ctx, quotaKey(rt, "s", user)).Int64()
	if err != nil && err.Error() != "redis: nil" {
		e.t.Fatal(err)
	}
	return v
}

// failedUnsettledAs is failedUnsettled for an order of user, homed on
// n1, so its route-a parts (stock and quota) are the stage's and held.
func (e *stagedEnv) failedUnsettledAs(id, user string) {
	e.t.Helper()
	point := "staged:some-takes"
	e.faults.point.Store(&point)
	_, err := e.inv.Reserve(e.ctx, id, stagedItems(), user, time.Hour)
	e.faults.point.Store(nil)
	if !errors.Is(err, ErrCrashed) {
		e.t.Fatalf("Reserve stopped after its round: %v, want ErrCrashed", err)
	}
	e.decideFailedDying(id)
}

// TestRetryOverAFailedRecordHoldingTheUsersQuota: route a's SKU has a
// per-user limit of 2; the user holds 1 by another order and 1 by the
// failed attempt's quota part, whose cancel never landed. The retry of the
// order id (its a:1, b:2, c:3 again) is sent by the instance that saw the
// limit (it reads the quotas first: refuseShort), by one that did not (the
// paths alone), and with every settle 200 ms slower than the takes. It
// must reserve the order with the user's quota counted once per live part,
// then a Cancel must bring the user back to the other order's unit.
func TestRetryOverAFailedRecordHoldingTheUsersQuota(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"hinted", "unhinted", "slow-cancels"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			e := newStagedEnv(t)
			if _, err := e.inv.LoadStock(e.ctx, "a", "s", 0, 2); err != nil {
				t.Fatal(err)
			}
			if _, err := e.inv.Reserve(e.ctx, "other-"+how, []Item{{Route: "a", SKU: "s", Quantity: 1}}, quotaUser, time.Hour); err != nil {
				t.Fatalf("the user's other order: %v", err)
			}
			id := e.homedOn("retry-quota-"+how, "n1")
			e.failedUnsettledAs(id, quotaUser)
			if got := e.quotaCount("a", quotaUser); got != 2 {
				t.Fatalf("user holds %d of a/s after the failed attempt, want 2 (its quota part still pending)", got)
			}
			inv := e.inv
			switch how {
			case "unhinted":
				inv = e.faultyInstance(&crashPoint{})
			case "slow-cancels":
				h := callHook(settlesSlow)
				e.faults.call.Store(&h)
			}
			res, err := inv.Reserve(e.ctx, id, stagedItems(), quotaUser, time.Hour)
			e.faults.call.Store(nil)
			if err != nil || len(res.Receipts) != 3 {
				t.Fatalf("Reserve retried over its failed record holding the user's quota: %+v, %v (want the order reserved)", res, err)
			}
			inv.Close()
			e.inv.Close()
			want := map[string]int64{"a": 2, "b": 2, "c": 3}
			for rt, w := range want {
				if got := e.quotaCount(rt, quotaUser); got != w {
					t.Errorf("after the retry the user holds %d of %s/s, want %d (the other order's and the retry's)", got, rt, w)
				}
			}
			e.verify(id, "reserved")
			if out, err := e.inv.Cancel(e.ctx, id); err != nil || out.PendingParts != 0 {
				t.Fatalf("Cancel of the retried order: %+v, %v", out, err)
			}
			for rt, w := range map[string]int64{"a": 1, "b": 0, "c": 0} {
				if got := e.quotaCount(rt, quotaUser); got != w {
					t.Errorf("after the Cancel the user holds %d of %s/s, want %d (the other order's)", got, rt, w)
				}
			}
			e.verify(id, "cancelled")
			e.stock()
		})
	}
}
