package inventory

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
)

// A Confirm answers success, but the settle of one part does not land (its
// node is unreachable at that moment; the deferred settle lived in that
// instance's memory, which restarted). Every pending part has a deadline,
// so the reconciler settles it by its order's decision when it next looks:
// after the part came due (the order's deadline + partGrace), maybe later
// still (passes every Interval, a node lease held by an instance that
// died). A decided record lives the retention from when its parts come
// due, not from the decision (order.lua, final): counted from the Confirm,
// it had expired by then, the expire op read "no record" and recorded
// failed under the part's token ("the attempt's stage or begin never
// landed"), and the part of a confirmed order was cancelled and its units
// sold again (found by a review).
func TestDecidedRecordOutlivesItsDueParts(t *testing.T) {
	t.Parallel() // it mostly waits a retention out
	const retention = 3 * time.Second
	e := newShortRetentionEnv(t, retention)
	const loaded = 2
	if _, err := e.inv.LoadStock(e.ctx, "b", "t", loaded, 0); err != nil {
		t.Fatal(err)
	}
	items := []Item{{Route: "b", SKU: "t", Quantity: 2}}
	x := e.awayOrder("x") // home is not n2; its one part is on n2

	// The confirming instance cannot reach n2 for its settle (the call
	// never reaches the node).
	f := &hookFaults{call: func(ctx context.Context, c ScriptCall, send func() (any, error)) (any, error) {
		if c.Script == "settle" && c.Node == "n2" {
			return nil, errors.New("n2 unreachable (injected: the call never reached the node)")
		}
		return send()
	}}
	conf := e.faultyInstance(f)
	if _, err := e.inv.Reserve(e.ctx, x, items, "", 2*time.Second); err != nil {
		t.Fatalf("Reserve %s: %v", x, err)
	}
	out, err := conf.Confirm(e.ctx, x)
	if err != nil || out.Status != StatusConfirmed {
		t.Fatalf("Confirm %s = %+v, %v; want confirmed", x, out, err)
	}
	t.Logf("Confirm %s answered confirmed, %d part(s) left to settle later", x, out.PendingParts)

	confirmedAt := time.Now()

	// The reconciler looks at the due part a few hundred ms after it came
	// due (one pass of Interval 1s later at most): here, just after the
	// retention counted from the Confirm ran out.
	time.Sleep(time.Until(confirmedAt.Add(retention + 200*time.Millisecond)))
	n2, _ := e.r.Node("n2")
	if due, err := e.inv.DueParts(e.ctx, n2, 100); err == nil {
		for _, p := range due {
			if p.OrderID == x {
				t.Logf("the reconciler looks at %s's part %v after it came due", x, time.Since(p.Deadline).Round(time.Millisecond))
			}
		}
	}
	home, _ := e.inv.orderHome(e.inv.topo.cur.Load(), x)
	t.Logf("%s's record on its home: %v", x, e.clients[home.Name()].Exists(e.ctx, orderKey(x)).Val() == 1)
	res := e.expireOrder(x)
	t.Logf("reconciler on %s's part, its confirmed record expired: %v", x, res)
	for id, st := range e.partsOf(x) {
		if st != "confirmed" {
			t.Errorf("part %s of %s, whose Confirm answered success, is %s; want confirmed", id, x, st)
		}
	}

	// The units of the confirmed order must not be sold again.
	if _, err := e.inv.Reserve(e.ctx, "y", items, "", time.Second); err == nil {
		if _, err := e.inv.Confirm(e.ctx, "y"); err == nil {
			t.Errorf("oversold: %s (confirmed, 2 units) and y (confirmed, 2 units) of %d loaded", x, loaded)
		}
	} else if !errors.Is(err, ErrInsufficientStock) {
		t.Fatal(err)
	}
	lvl, err := e.inv.GetStock(e.ctx, "b", "t")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("b/t: %+v", lvl)
}

// newShortRetentionEnv is a staged env whose records live retention
// (reservations 1s, at most 2s), so a test can wait a retention out.
func newShortRetentionEnv(t *testing.T, retention time.Duration) *stagedEnv {
	return newRetentionEnv(t, retention, 2*time.Second)
}

// newRetentionEnv is newShortRetentionEnv with holds of up to maxHold
// (inventory.max_reservation_ttl; the retention must exceed it).
func newRetentionEnv(t *testing.T, retention, maxHold time.Duration) *stagedEnv {
	return newStagedEnvConfig(t, Options{}, func(c *config.Config) {
		c.Inventory.Retention = retention
		c.Inventory.ReservationTTL = time.Second
		c.Inventory.MaxReservationTTL = maxHold
	})
}

// faultyInstance is a second Inventory on e's router with faults f,
// closed at the test's end.
func (e *stagedEnv) faultyInstance(f Faults) *Inventory {
	e.t.Helper()
	inv, err := New(e.r, Options{Logger: slog.New(slog.DiscardHandler), AttemptLease: stagedLease, Faults: f})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(inv.Close)
	return inv
}

// dueOf waits until a part of order on node name comes due and returns
// it as the reconciler would read it.
func (e *stagedEnv) dueOf(name, order string) PendingPart {
	e.t.Helper()
	n, _ := e.r.Node(name)
	for {
		due, err := e.inv.DueParts(e.ctx, n, 100)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, p := range due {
			if p.OrderID == order {
				return p
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}
