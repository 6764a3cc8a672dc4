package explore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/rollback"
)

// The set-aside actor (Options.Aside, with the operator actor): it makes
// the parts the record-loss actor cannot, those set aside with their own
// record intact, and the records of their orders live out their
// retention while they wait (SECURITY.md: the rows on a counter deleted
// by hand and on a part reached after its order's record expired).
//
//   - In phase 1, after drawn picks, one scheduled step hides the stock
//     hash of route a's or b's SKU on its one node (RENAME to a key no
//     script reads, as a key deleted by hand): Confirm's and Cancel's
//     settles of its parts are refused (ErrStockMissing: left to the
//     reconciler), and the phase-2 reconcilers set its due parts aside
//     ("stock hash … is missing") with their records and their orders'
//     records intact. In half the schedules the actor reserves an order
//     of its own first (one unit of the route, homed off the hash's
//     node, so its part is no inline one) and confirms it right after
//     the hide: a paid order whose part the Confirm leaves aside.
//   - In phase 2, once the reconcilers' passes ended (bounded) and
//     drawn picks more, in seven schedules of ten it expires the decided
//     records of the orders whose every pending part is set aside:
//     deleted, as the retention running out while no retry read them
//     does (a reserved record has no TTL and is never expired; an order
//     with an inline part, which lives in its record, is left alone).
//     The system of record keeps each one's decision (observed.expired:
//     the record's token, and whether it was confirmed), which is what
//     the operator decides by.
//   - Then it repairs the hash (RENAMENX back) and runs, through a
//     scheduled instance, `shardis parts retry --sku` of it (as README
//     tells one to after a repair) and one reconciler pass: a part whose
//     record and order's record are there settles by its order's
//     decision; one whose order's record expired meets none, and the
//     expiry's 'gone' verdict sets it aside again for the operator
//     ("the order's decision cannot be inferred"), whose SettleStuck
//     settles it by the system of record (the order-gone verdict). An
//     operator round in between meets parts whose order's record exists:
//     SettleStuck is refused and it runs `parts retry` (RetryStuck).
//
// The checks: an expired order's record is gone by design, so its
// per-order checks are excused as a lost record's are (its record's
// retention ran out: nothing is left to hold them to), and instead every
// part of its attempt is held to the system of record's decision,
// whoever settled it (expired-decision: confirmed exactly when the order
// was paid), which nothing excuses; the node-level checks hold as ever.
// MutationStuckGoneCancel (the expiry cancelling such a part as an
// attempt that never landed) fails that check on a paid order.

// asidePlan is the set-aside actor's draws: the route whose hash it
// hides (on the route's one node of T0: a and b stay on theirs at every
// topology), whether it has an order of its own (reserved before the
// hide, confirmed after it, through the instance inst: a paid order
// whose part waits set aside), the picks before the hide, before the
// expiry and between the expiry and the repair, and whether it expires
// records.
type asidePlan struct {
	route               string
	hide, wait, between int
	expire, own         bool
	inst                int
}

// drawAside draws a set-aside plan.
func drawAside(s *Scheduler) asidePlan {
	p := asidePlan{route: []string{"a", "b"}[s.Intn(2)], hide: s.Intn(30), wait: s.Intn(12), between: s.Intn(6), expire: s.Chance(0.7)}
	if p.own = s.Chance(0.5); p.own {
		p.hide %= 4 // its order's Confirm within its TTL
	}
	p.inst = s.Intn(2)
	return p
}

// asideState is what the set-aside actor hid, for its phase-2 half:
// the node, the hash's key and where it lies hidden.
type asideState struct {
	plan            asidePlan
	node, key, side string
}

// expiredOrder is the system of record's account of an order whose
// record the set-aside actor expired: the record's attempt and whether
// it was confirmed (paid).
type expiredOrder struct {
	token     string
	confirmed bool
}

// ownTTL is the set-aside actor's order's reservation: longer than the
// others', so that its Confirm after the hide mostly comes in time.
const ownTTL = 400 * time.Millisecond

// stuckIndex is the nodes' index of parts set aside (inventory/keys.go).
const stuckIndex = "inv:stuck"

// hideHash is the set-aside actor's phase-1 half, its order's calls
// through inv.
func (w *World) hideHash(o *observed, s *Scheduler, who string, inv *inventory.Inventory, plan asidePlan) func(ctx context.Context) {
	return func(ctx context.Context) {
		st := &asideState{plan: plan, node: routesT0[plan.route][0], key: inventory.StockKey(plan.route, "s")}
		st.side = "explore:hidden:" + st.key
		var own string
		if plan.own {
			own = awayFrom(w.homes, st.node, "h1", "h2", "h3")
			o.reserve(inv, who, orderPlan{ID: own, Items: []inventory.Item{{Route: plan.route, SKU: "s", Quantity: 1}}, TTL: ownTTL}, 2)(ctx)
		}
		s.Pass(ctx, who, plan.hide)
		err := s.Step(ctx, "hide "+st.key+" on "+st.node, func() error {
			return w.direct[st.node].Rename(ctx, st.key, st.side).Err()
		})
		o.note(who, "hide "+st.key+" on "+st.node, err)
		if err == nil {
			o.mu.Lock()
			o.aside = st
			o.mu.Unlock()
		}
		if own != "" {
			o.confirm(inv, who, own, 3)(ctx)
		}
	}
}

// repairHash is the set-aside actor's phase-2 half, through inv.
func (w *World) repairHash(o *observed, s *Scheduler, who string, inv *inventory.Inventory, st *asideState) func(ctx context.Context) {
	return func(ctx context.Context) {
		for _, name := range []string{"recon@i0", "recon@i1"} {
			o.waitEnded(ctx, s, who, name) // their passes set the hash's due parts aside
		}
		s.Pass(ctx, who, st.plan.wait)
		if st.plan.expire {
			var ids []string
			err := s.Step(ctx, "expire the records of orders whose parts wait set aside", func() error {
				var err error
				ids, err = w.expireAside(ctx, o)
				return err
			})
			o.note(who, fmt.Sprintf("expire order records %v", ids), err)
			s.Pass(ctx, who, st.plan.between)
		}
		err := s.Step(ctx, "repair "+st.key+" on "+st.node, func() error {
			ok, err := w.direct[st.node].RenameNX(ctx, st.side, st.key).Result()
			if err == nil && !ok {
				err = fmt.Errorf("explore: %s on %s came back while hidden", st.key, st.node)
			}
			return err
		})
		o.note(who, "repair "+st.key+" on "+st.node, err)
		k, err := inv.RetryStuckSKU(ctx, st.node, st.plan.route, "s")
		o.note(who, fmt.Sprintf("parts retry --sku s --node %s (moved %d)", st.node, k), err)
		if errors.Is(err, inventory.ErrCrashed) {
			return
		}
		failed := rollback.New(inv, nil, rollback.Settings{Logger: discard}).RunOnce(ctx)
		o.note(who, fmt.Sprintf("reconcile pass (%d failed)", failed), nil)
	}
}

// expireAside deletes the decided record of every order (but inline-part
// ones) whose pending parts are all set aside, at least one,
// and records the system of record's account of each (observed.expired).
func (w *World) expireAside(ctx context.Context, o *observed) ([]string, error) {
	orders := map[string]bool{}
	for _, name := range allNodes {
		ids, err := w.direct[name].ZRange(ctx, stuckIndex, 0, -1).Result()
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			orders[orderOfPart(id)] = true
		}
	}
	var out []string
	for _, id := range slices.Sorted(maps.Keys(orders)) {
		if isInlineOrder(id) {
			continue
		}
		ok, err := w.allPendingAside(ctx, id)
		if err != nil {
			return out, err
		}
		if !ok {
			continue
		}
		e, found, err := w.deleteDecided(ctx, id)
		if err != nil {
			return out, err
		}
		if found {
			o.mu.Lock()
			o.expired[id] = e
			o.mu.Unlock()
			out = append(out, id)
		}
	}
	return out, nil
}

// allPendingAside reports whether every pending part of order id on
// any node (any attempt) is set aside on its node.
func (w *World) allPendingAside(ctx context.Context, id string) (bool, error) {
	for _, name := range allNodes {
		c := w.direct[name]
		keys, err := c.Keys(ctx, inventory.PartKey(id+"|")+"*").Result()
		if err != nil {
			return false, err
		}
		for _, k := range keys {
			_, pid := inventory.ParseKey(k)
			f, err := inventory.ReadPart(ctx, c, pid).Fields()
			if err != nil {
				return false, nil // unreadable: leave the order alone
			}
			if f["state"] != string(inventory.PartPending) || f["tombstone"] == "1" {
				continue
			}
			if err := c.ZScore(ctx, stuckIndex, pid).Err(); errors.Is(err, redis.Nil) {
				return false, nil
			} else if err != nil {
				return false, err
			}
		}
	}
	return true, nil
}

// deleteDecided deletes order id's live record at its homes of T0 and T1
// when it is decided (confirmed, cancelled, failed: a record with a TTL,
// which lives out its retention) and reports what it held.
func (w *World) deleteDecided(ctx context.Context, id string) (expiredOrder, bool, error) {
	for _, home := range []string{w.homes.Home(id), w.homes1.Home(id)} {
		c := w.direct[home]
		f, err := inventory.ReadOrder(ctx, c, id).Fields()
		if err != nil || len(f) == 0 || f["moved"] != "" {
			continue
		}
		switch inventory.OrderState(f["status"]) {
		case inventory.OrderConfirmed, inventory.OrderCancelled, inventory.OrderFailed:
		default:
			return expiredOrder{}, false, nil // undecided: it has no TTL
		}
		if f["token"] == "" {
			return expiredOrder{}, false, nil // a tombstone: no attempt to hold parts to
		}
		if ok, err := w.ownRecords(ctx, id, f); err != nil || !ok {
			return expiredOrder{}, false, err
		}
		if err := c.Del(ctx, inventory.OrderKey(id)).Err(); err != nil {
			return expiredOrder{}, false, err
		}
		return expiredOrder{token: f["token"], confirmed: f["status"] == string(inventory.OrderConfirmed)}, true, nil
	}
	return expiredOrder{}, false, nil
}

// ownRecords reports whether every part order id's record (fields f)
// lists has a record of its own on its node: an inline part lives in its
// order's record (inventory/inline.go), which expiring would take with
// it, a lost record's case (the record-loss actor's), not this one's.
func (w *World) ownRecords(ctx context.Context, id string, f map[string]string) (bool, error) {
	rec, err := inventory.DecodeOrder(id, f)
	if err != nil {
		return false, nil
	}
	for _, rp := range rec.Parts {
		c, ok := w.direct[rp.Node]
		if !ok {
			return false, nil
		}
		n, err := c.Exists(ctx, inventory.PartKey(rp.ID)).Result()
		if err != nil || n == 0 {
			return false, err
		}
	}
	return true, nil
}

// checkExpired holds every part of an expired order's attempt to the
// system of record's decision (see the file comment): nothing excuses
// it.
func checkExpired(v *violations, st *worldState, obs *observed) {
	obs.mu.Lock()
	expired := make(map[string]expiredOrder, len(obs.expired))
	for id, e := range obs.expired {
		expired[id] = e
	}
	obs.mu.Unlock()
	for _, name := range allNodes {
		for _, p := range st.nodes[name].parts {
			e, ok := expired[p.Order]
			if !ok || p.Token != e.token || p.State == inventory.PartPending || p.Tombstone {
				continue
			}
			want := inventory.PartCancelled
			if e.confirmed {
				want = inventory.PartConfirmed
			}
			if p.State != want {
				v.add("expired-decision", "order %s was %s (token %s) when its record lived out its retention, but its part %s on %s is %s",
					p.Order, map[bool]string{true: "confirmed", false: "not confirmed"}[e.confirmed], e.token, p.ID, name, p.State)
			}
		}
	}
}

// asideVerdict names what the operator's settle of a part set aside
// met, for the run's counts (observed.verdicts): "lost" (SettleStuckLost
// settled a part whose record is gone), "order-gone" (SettleStuck
// settled a part whose order's record is gone), "exists-retry"
// (SettleStuck refused, the order's record there: RetryStuck), "refused"
// (another refusal), "quota-migrating" (a lost quota part's settle
// refused while a topology change migrates).
func asideVerdict(lost bool, err error) string {
	switch {
	case err == nil && lost:
		return "lost"
	case err == nil:
		return "order-gone"
	case errors.Is(err, inventory.ErrTopology):
		return "quota-migrating"
	case errors.Is(err, inventory.ErrPrecondition) && strings.Contains(err.Error(), "exists"):
		return "exists-retry"
	case outcomeUnknown(err):
		return "unknown"
	}
	return "refused"
}

// verdict counts one verdict of the operator's (asideVerdict).
func (o *observed) verdict(v string) {
	o.mu.Lock()
	o.verdicts[v]++
	o.mu.Unlock()
}

// isExpired reports whether the set-aside actor expired order id's
// record (its parts are held by checkExpired).
func (o *observed) isExpired(id string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, ok := o.expired[id]
	return ok
}

// unhide repairs, before the heal, a hash the set-aside actor hid and
// its phase-2 half did not repair (phase 2 did not run: nothing was
// pending; its step failed), as an operator would.
func (w *World) unhide(ctx context.Context, o *observed) error {
	o.mu.Lock()
	st := o.aside
	o.mu.Unlock()
	if st == nil {
		return nil
	}
	c := w.direct[st.node]
	n, err := c.Exists(ctx, st.side).Result()
	if err != nil || n == 0 {
		return err
	}
	if ok, err := c.RenameNX(ctx, st.side, st.key).Result(); err != nil || !ok {
		return fmt.Errorf("explore: repairing %s on %s before the heal: %v (renamed: %v)", st.key, st.node, err, ok)
	}
	return nil
}
