package inventory

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// lateRetention is the retention of the late-stage tests: short, so a
// test waits it out in seconds.
const lateRetention = 3 * time.Second

// lateStageCase is the start the late-stage tests share (an answer that
// relies on a record, and an attempt R0 of the same order whose stage is
// late): an env whose records keep lateRetention, route b's SKU t loaded
// with some units, the items of one order of 2 units of it, that order's
// id x, homed away from t's node, and the client of x's home.
type lateStageCase struct {
	e     *stagedEnv
	items []Item
	x     string
	hc    *redis.Client
}

// newLateStageCase loads loaded units of b/t and picks the order.
func newLateStageCase(t *testing.T, loaded int64) lateStageCase {
	t.Helper()
	e := newShortRetentionEnv(t, lateRetention)
	if _, err := e.inv.LoadStock(e.ctx, "b", "t", loaded, 0); err != nil {
		t.Fatal(err)
	}
	x := e.awayOrder("x")
	home, _ := e.inv.orderHome(e.inv.topo.cur.Load(), x)
	return lateStageCase{e: e, items: []Item{{Route: "b", SKU: "t", Quantity: 2}}, x: x, hc: e.clients[home.Name()]}
}

// ttl is x's record's remaining TTL.
func (c lateStageCase) ttl() time.Duration { return c.hc.PTTL(c.e.ctx, orderKey(c.x)).Val() }

// waitTTLUnder waits until x's record has at most d left.
func (c lateStageCase) waitTTLUnder(d time.Duration) {
	for c.ttl() > d {
		time.Sleep(20 * time.Millisecond)
	}
}

// landBefore lands r0's stage a second before the retention counted from
// answeredAt runs out: within the retention of the answer (staged.go's
// one assumption), after the record's expiry unless the answer renewed it.
func (c lateStageCase) landBefore(t *testing.T, r0 *heldAttempt, answeredAt time.Time) error {
	t.Helper()
	time.Sleep(time.Until(answeredAt.Add(lateRetention - time.Second)))
	t.Logf("%s's record when R0's stage lands: exists=%v", c.x, c.hc.Exists(c.e.ctx, orderKey(c.x)).Val() == 1)
	return r0.land()
}
