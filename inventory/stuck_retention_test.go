package inventory

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// A part of a confirmed order whose settle was refused (its SKU's counter
// corrupt on its node) is repaired after its order's record lived out
// inventory.retention. Its decision cannot be inferred any more: the
// expire op must not read the missing record as an attempt that never
// landed. What must hold: nothing is written on the order's home, the
// part is not settled (ResolveExpired errs, Unsettleable, saying the
// record is gone and the decision cannot be inferred), its units stay
// reserved and no other order takes them (no oversell). Before, the
// expire op recorded the attempt failed ("no record") and the part was
// cancelled, its units sold again, though Confirm had answered success.
//
// TestStuckPartOutlivingItsRecordStaysAside: the part set aside with a
// backoff longer than the retention (stuck_since).
func TestStuckPartOutlivingItsRecordStaysAside(t *testing.T) { stuckPastRetention(t, time.Hour, true) }

// TestDuePartOutlivingItsRecordStaysPending: the part never set aside (no
// reconciler looked at it) and due more than the retention ago.
func TestDuePartOutlivingItsRecordStaysPending(t *testing.T) { stuckPastRetention(t, 0, false) }

// TestStuckPartRetriedWithinRetentionConfirms: retried within the
// retention (the reconciler's backoff is capped below it,
// rollback.Settings.StuckRetryMax), each retry's expire op relies on the
// order's record again (relied_on) and keeps it alive: the part is
// confirmed after the repair.
func TestStuckPartRetriedWithinRetentionConfirms(t *testing.T) {
	stuckPastRetention(t, 500*time.Millisecond, true)
}

func stuckPastRetention(t *testing.T, backoff time.Duration, aside bool) {
	t.Parallel() // its own nodes; it mostly waits
	const retention = 3 * time.Second
	e := newShortRetentionEnv(t, retention)
	const loaded = 2
	x, items := e.reserveAway(t, loaded, time.Second)
	c2 := e.clients["n2"]
	ck := StockKey("b", "t")
	// an operator's mistake on n2: the counter's reserved field garbled
	if err := c2.HSet(e.ctx, ck, "reserved", "two").Err(); err != nil {
		t.Fatal(err)
	}
	out, err := e.inv.Confirm(e.ctx, x)
	if err != nil || out.Status != StatusConfirmed {
		t.Fatalf("Confirm %s = %+v, %v; want confirmed", x, out, err)
	}
	p := e.dueOf("n2", x)
	if aside {
		// the reconciler: its settle is refused, it is set aside
		if _, err := e.inv.ResolveExpired(e.ctx, p); !Unsettleable(err) {
			t.Fatalf("ResolveExpired of the part on the corrupt counter: %v; want an unsettleable error", err)
		}
		if _, err := e.inv.SetAside(e.ctx, p, "corrupt counter", backoff, backoff); err != nil {
			t.Fatal(err)
		}
	}
	// the order's record lives out its retention meanwhile, unless passes
	// retry the part when its backoff runs out
	home, _ := e.inv.orderHome(e.inv.topo.cur.Load(), x)
	hc := e.clients[home.Name()]
	n2, _ := e.r.Node("n2")
	for deadline := time.Now().Add(8 * time.Second); hc.Exists(e.ctx, orderKey(x)).Val() == 1; {
		if time.Now().After(deadline) {
			break
		}
		if aside {
			if _, err := e.inv.RetryDueStuck(e.ctx, "n2", 100, backoff); err != nil {
				t.Fatal(err)
			}
			due, _ := e.inv.DueParts(e.ctx, n2, 100)
			for _, q := range due {
				if _, err := e.inv.ResolveExpired(e.ctx, q); Unsettleable(err) {
					_, _ = e.inv.SetAside(e.ctx, q, err.Error(), backoff, backoff)
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	kept := hc.Exists(e.ctx, orderKey(x)).Val() == 1
	if kept != (backoff > 0 && backoff < retention) {
		t.Fatalf("order record of %s there after 8s: %v; want it kept only by retries within the retention", x, kept)
	}
	// the counter repaired, the part retried (shardis parts retry)
	if err := c2.HSet(e.ctx, ck, "reserved", "2").Err(); err != nil {
		t.Fatal(err)
	}
	if aside {
		if _, err := e.inv.RetryStuck(e.ctx, "n2", p.PartID); err != nil {
			t.Fatalf("RetryStuck: %v", err)
		}
	}
	p = e.dueOf("n2", x)
	res, err := e.inv.ResolveExpired(e.ctx, p)
	t.Logf("ResolveExpired after the repair: %v, %v", res, err)
	state := partFieldsOn(t, e.ctx, c2, p.PartID)["state"]
	if kept {
		if err != nil || state != "confirmed" {
			t.Fatalf("part of confirmed order %s after the repair: %s (%v, %v); want confirmed", x, state, res, err)
		}
		return
	}
	if !Unsettleable(err) || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "cannot be inferred") {
		t.Errorf("ResolveExpired of a part whose order record is gone = %v, %v; want an unsettleable error saying its decision cannot be inferred", res, err)
	}
	if state != "pending" {
		t.Errorf("part of confirmed order %s settled %s after its record expired; want pending (set aside for an operator)", x, state)
	}
	if hc.Exists(e.ctx, orderKey(x)).Val() != 0 {
		t.Errorf("the expire op wrote a record of %s: %v", x, orderFieldsOn(t, e.ctx, hc, x))
	}
	if _, err := e.inv.SetAside(e.ctx, p, "its order record is gone", time.Second, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := e.inv.Reserve(e.ctx, "y", items, "", time.Second); err == nil {
		if _, err := e.inv.Confirm(e.ctx, "y"); err == nil {
			t.Errorf("oversold: %s (confirmed, 2 units) and y (confirmed, 2 units) of %d loaded", x, loaded)
		}
	} else if !errors.Is(err, ErrInsufficientStock) {
		t.Fatal(err)
	}
}

// reserveAway loads loaded units of b/t (route b: n2) and reserves 2 of
// them for order x, whose id puts its record on another node than n2
// (awayOrder), for hold; it returns the order id and its items.
func (e *stagedEnv) reserveAway(t *testing.T, loaded int64, hold time.Duration) (string, []Item) {
	t.Helper()
	if _, err := e.inv.LoadStock(e.ctx, "b", "t", loaded, 0); err != nil {
		t.Fatal(err)
	}
	items := []Item{{Route: "b", SKU: "t", Quantity: 2}}
	x := e.awayOrder("x")
	if _, err := e.inv.Reserve(e.ctx, x, items, "", hold); err != nil {
		t.Fatal(err)
	}
	return x, items
}
