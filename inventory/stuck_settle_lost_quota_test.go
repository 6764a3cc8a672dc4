package inventory

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// lostQuotaPart reserves 2 units of b/lim (a limit of 2 per user, route b
// on n2 alone) for user u, then loses the order's quota part's record on
// n2 (deleted while pending, as lostStuckPart loses a stock part's) and
// ends the order by end (a Cancel, or nothing: it expires). Past the
// deadline it runs the reconciler's steps and the operator's, as the
// docs tell them: the expiry sets the part aside, an explicit retry
// (`shardis parts retry`) and the next pass set it aside again, and
// SettleStuck alone refuses it (its record is gone). It returns the
// quota part's id, order's id and its quota counter.
func lostQuotaPart(t *testing.T, e *stagedEnv, prefix string, end func(order string)) (id, order, counter string) {
	t.Helper()
	if _, err := e.inv.LoadStock(e.ctx, "b", "lim", stagedStock, 2); err != nil {
		t.Fatal(err)
	}
	order = e.awayOrder(prefix)
	if _, err := e.inv.Reserve(e.ctx, order, []Item{{Route: "b", SKU: "lim", Quantity: 2}}, "u", stagedTTL); err != nil {
		t.Fatal(err)
	}
	for pid := range e.partsOf(order) {
		if strings.Contains(pid, "|q|") {
			id = pid
		}
	}
	if id == "" {
		t.Fatalf("order %s has no quota part: %v", order, e.partsOf(order))
	}
	c := e.clients["n2"]
	counter = quotaKey("b", "lim", "u")
	if v := c.Get(e.ctx, counter).Val(); v != "2" {
		t.Fatalf("user u's count %q after the reserve; want 2", v)
	}
	if err := c.Del(e.ctx, partKey(id)).Err(); err != nil {
		t.Fatal(err)
	}
	end(order)
	waitDueListed(t, e.ctx, e.inv, "n2", id) // the deadline and the part's grace
	pass := func(what string) {
		t.Helper()
		n2, _ := e.r.Node("n2")
		due, err := e.inv.DueParts(e.ctx, n2, 100)
		if err != nil {
			t.Fatal(err)
		}
		aside := false
		for _, p := range due {
			_, rerr := e.inv.ResolveExpired(e.ctx, p)
			if p.PartID != id {
				if rerr != nil {
					t.Fatalf("%s: ResolveExpired(%+v) = %v", what, p, rerr)
				}
				continue
			}
			if !Unsettleable(rerr) {
				t.Fatalf("%s: ResolveExpired of the lost quota part = %v; want an Unsettleable error", what, rerr)
			}
			if k, err := e.inv.SetAside(e.ctx, p, rerr.Error(), time.Hour, time.Hour); err != nil || k == 0 {
				t.Fatalf("%s: SetAside = %d, %v", what, k, err)
			}
			aside = true
		}
		if !aside {
			t.Fatalf("%s: the lost quota part %s was not due: %+v", what, id, due)
		}
	}
	pass("the expiry")
	if moved, err := e.inv.RetryStuck(e.ctx, "n2", id); err != nil || !moved {
		t.Fatalf("RetryStuck = %v, %v; want the part moved back", moved, err)
	}
	pass("the pass after the retry")
	stuck, err := e.inv.StuckParts(e.ctx, "n2", 10)
	if err != nil || len(stuck) != 1 || stuck[0].PartID != id || stuck[0].State != PartMissing {
		t.Fatalf("stuck parts %+v, %v; want %s, its record missing", stuck, err, id)
	}
	if _, err := e.inv.SettleStuck(e.ctx, "n2", id, Cancel); !errors.Is(err, ErrPrecondition) || !strings.Contains(err.Error(), "is gone") {
		t.Fatalf("SettleStuck without the part's values = %v; want ErrPrecondition, its record gone", err)
	}
	return id, order, counter
}

// A quota part whose record was lost counts its units against the user's
// limit until it settles, and only the operator can settle it (nothing
// on the node names its user, order or units, and its order may have
// been confirmed): SettleStuckLost with the route, SKU, quantity and the
// user gives the count back on a cancel (the order ended unpaid) and
// keeps it on a confirm, writes the part's record settled and takes it
// out of the stuck index, once. Before, SettleStuckLost refused a quota
// part's id and nothing else settled it: user u, who held nothing of
// b/lim (limit 2) once the order of 2 was cancelled or expired, was
// refused an order of 1 as over the limit for good.
func TestSettleStuckLostGivesALostQuotaPartsCountBack(t *testing.T) {
	t.Parallel() // its cases have nodes of their own; they mostly wait a deadline out
	for _, tc := range []struct {
		name   string
		end    func(e *stagedEnv, order string)
		action Action
		state  string
		count  string // u's count after the settle
	}{
		{"cancelled-cancel", func(e *stagedEnv, order string) {
			if _, err := e.inv.Cancel(e.ctx, order); err != nil {
				t.Fatal(err)
			}
		}, Cancel, "cancelled", ""},
		{"expired-cancel", func(*stagedEnv, string) {}, Cancel, "cancelled", ""},
		{"paid-confirm", func(*stagedEnv, string) {}, Confirm, "confirmed", "2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // it mostly waits a deadline out
			e := newStagedEnv(t)
			id, order, counter := lostQuotaPart(t, e, "lq-"+tc.name, func(o string) { tc.end(e, o) })
			c := e.clients["n2"]
			if _, err := e.inv.Reserve(e.ctx, order+"-next", []Item{{Route: "b", SKU: "lim", Quantity: 1}}, "u", time.Hour); !errors.Is(err, ErrLimitExceeded) {
				t.Fatalf("an order of 1 while the lost part is aside = %v; want ErrLimitExceeded (its count is still u's)", err)
			}
			u := StuckUnits{Route: "b", SKU: "lim", Quantity: 2, User: "u"}
			res, err := e.inv.SettleStuckLost(e.ctx, "n2", id, tc.action, u)
			if err != nil || res != settleDone {
				t.Fatalf("SettleStuckLost(%s) of the lost quota part = %q, %v; want done", tc.action, res, err)
			}
			if v := c.Get(e.ctx, counter).Val(); v != tc.count {
				t.Errorf("u's count after the settle %q; want %q", v, tc.count)
			}
			if st := partFieldsOn(t, e.ctx, c, id); st["state"] != tc.state || st["kind"] != "q" || st["counter"] != counter {
				t.Errorf("the part's record after the settle %v; want %s, kind q, counter %s", st, tc.state, counter)
			}
			if stuck, err := e.inv.StuckParts(e.ctx, "n2", 10); err != nil || len(stuck) != 0 {
				t.Errorf("stuck parts after the settle %+v, %v; want none", stuck, err)
			}
			snap := e.snapshot()
			if res, err := e.inv.SettleStuckLost(e.ctx, "n2", id, tc.action, u); !errors.Is(err, ErrPrecondition) ||
				!strings.Contains(err.Error(), tc.state) || !strings.Contains(err.Error(), id) {
				t.Errorf("second SettleStuckLost = %q, %v; want ErrPrecondition naming the part and %s", res, err, tc.state)
			}
			e.unchanged(snap, "a second SettleStuckLost of the quota part")
			_, err = e.inv.Reserve(e.ctx, order+"-after", []Item{{Route: "b", SKU: "lim", Quantity: 2}}, "u", time.Hour)
			if tc.action == Cancel && err != nil {
				t.Errorf("an order of 2 (the limit) once the lost part is cancelled = %v; want it reserved", err)
			}
			if tc.action == Confirm && !errors.Is(err, ErrLimitExceeded) {
				t.Errorf("an order of 2 once the lost part is confirmed = %v; want ErrLimitExceeded (u bought the limit)", err)
			}
		})
	}
}

// SettleStuckLost of a lost quota part writes nothing when the values do
// not fit the part: a user's count below the quantity (another user, or
// too many units), a route or SKU the part id does not name, a counter
// that is no integer string; a stock part's id given a user, and a quota
// part's id given none, are refused too.
func TestSettleStuckLostRefusesQuotaValuesThatDoNotFit(t *testing.T) {
	t.Parallel()
	e := newStagedEnv(t)
	id, _, counter := lostQuotaPart(t, e, "lq-refused", func(string) {})
	c := e.clients["n2"]
	if err := c.HSet(e.ctx, quotaKey("b", "lim", "bad"), "x", "1").Err(); err != nil {
		t.Fatal(err)
	}
	ok := StuckUnits{Route: "b", SKU: "lim", Quantity: 2, User: "u"}
	with := func(f func(*StuckUnits)) StuckUnits { u := ok; f(&u); return u }
	before := e.snapshot()
	for _, tc := range []struct {
		what, part string
		u          StuckUnits
		is         error
		says       string
	}{
		{"another user", id, with(func(u *StuckUnits) { u.User = "w" }), ErrInvalid, quotaKey("b", "lim", "w")},
		{"more units than counted", id, with(func(u *StuckUnits) { u.Quantity = 3 }), ErrInvalid, "quantity 3"},
		{"a user's counter that is no string", id, with(func(u *StuckUnits) { u.User = "bad" }), ErrCorrupt, quotaKey("b", "lim", "bad")},
		{"a SKU the part does not name", id, with(func(u *StuckUnits) { u.SKU = "s" }), ErrInvalid, "part_id"},
		{"a route the part does not name", id, with(func(u *StuckUnits) { u.Route = "a" }), ErrInvalid, "part_id"},
		{"no user", id, with(func(u *StuckUnits) { u.User = "" }), ErrInvalid, "user_id"},
		{"an invalid user", id, with(func(u *StuckUnits) { u.User = "a\x00" }), ErrInvalid, "user_id"},
		{"a stock part's id with a user", "lq|t|0", ok, ErrInvalid, "user_id"},
	} {
		res, err := e.inv.SettleStuckLost(e.ctx, "n2", tc.part, Cancel, tc.u)
		if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("SettleStuckLost with %s = %q, %v; want an error wrapping %v saying %q", tc.what, res, err, tc.is, tc.says)
		}
		e.unchanged(before, "SettleStuckLost with "+tc.what)
	}
	if v := c.Get(e.ctx, counter).Val(); v != "2" {
		t.Errorf("u's count after the refusals %q; want 2", v)
	}
}
