package explore

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/shardis/shardis/inventory"
)

// The checks of each order: its record, its parts and what its
// clients were told.

// orderView is one order id's record and parts over all nodes.
type orderView struct {
	recOn []string
	rec   *inventory.OrderRecord
	parts []*inventory.PartRecord
	where map[*inventory.PartRecord]string
	items []inventory.Item // what the order was reserved for; nil when no plan names it
}

func checkOrders(v *violations, st *worldState, obs *observed, orders []orderPlan, homes *inventory.Homes, resurrected map[string]map[string]bool) {
	views := map[string]*orderView{}
	view := func(id string) *orderView {
		if views[id] == nil {
			views[id] = &orderView{where: map[*inventory.PartRecord]string{}}
		}
		return views[id]
	}
	for _, o := range orders {
		view(o.ID)
	}
	// and every order a caller was told of (phase 2's and the topology
	// actor's too), so one whose record and parts are all gone is still
	// held to what its callers were told
	obs.mu.Lock()
	told := slices.Collect(maps.Keys(obs.reserved))
	told = append(told, slices.Collect(maps.Keys(obs.confirmed))...)
	told = append(told, slices.Collect(maps.Keys(obs.cancelled))...)
	obs.mu.Unlock()
	for _, id := range told {
		view(id)
	}
	for _, name := range allNodes {
		for id, r := range st.nodes[name].orders {
			if r.Moved != "" {
				continue // moved away by a topology change: dead here
			}
			if resurrected[name][id] && homes.Home(id) != name {
				continue // brought back by a loss, away from its home: dead by the rule (lossdiff.go)
			}
			ov := view(id)
			ov.recOn = append(ov.recOn, name)
			if ov.rec == nil || homes.Home(id) == name {
				ov.rec = r
			}
		}
		for _, p := range st.nodes[name].parts {
			ov := view(p.Order)
			ov.parts = append(ov.parts, p)
			ov.where[p] = name
		}
	}
	ids := make([]string, 0, len(views))
	for id := range views {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	items := plannedItems(orders, obs)
	for _, id := range ids {
		views[id].items = items[id]
		checkOrder(v, id, views[id], obs, homes)
	}
}

// plannedItems returns the items each order was reserved for: those of
// orders, and of every order a Reserve actor called for (observed.plans:
// phase 2's and the topology actor's too).
func plannedItems(orders []orderPlan, obs *observed) map[string][]inventory.Item {
	items := map[string][]inventory.Item{}
	obs.mu.Lock()
	maps.Copy(items, obs.plans)
	obs.mu.Unlock()
	for _, o := range orders {
		items[o.ID] = o.Items
	}
	return items
}

// checkConfirmed: a confirmed order holds exactly the parts its record
// lists, confirmed in full; no other part of the record's attempt holds
// units (one more unit sold than ordered would otherwise pass: the part
// of the attempt is held only to "confirmed", and the record's parts
// only to what they list); and the record's stock parts hold, item by
// item, what the order was reserved for (ov.items, when known), as
// chaos's checkOrder holds them.
func checkConfirmed(v *violations, id string, ov *orderView) {
	byID := map[string]*inventory.PartRecord{}
	for _, p := range ov.parts {
		byID[ov.where[p]+"/"+p.ID] = p
	}
	listed := map[string]bool{}
	for _, rp := range ov.rec.Parts {
		listed[rp.Node+"/"+rp.ID] = true
		p := byID[rp.Node+"/"+rp.ID]
		if p == nil || p.State != inventory.PartConfirmed || p.Qty != rp.Qty {
			v.order(id, "decided-once", "order %s is confirmed, its part %s on %s is %v", id, rp.ID, rp.Node, p)
		}
	}
	for _, p := range ov.parts {
		if p.Token == ov.rec.Token && !p.Tombstone && p.Qty > 0 && !listed[ov.where[p]+"/"+p.ID] {
			v.order(id, "decided-once", "order %s is confirmed, but part %s on %s of its attempt (%s, %d units of %s) is not in its record",
				id, p.ID, ov.where[p], p.State, p.Qty, p.SKU)
		}
	}
	items := ov.items
	if items == nil {
		return
	}
	got := make([]int64, len(items))
	for _, rp := range ov.rec.Parts {
		if rp.Kind == inventory.PartStock && rp.Item >= 0 && rp.Item < len(got) {
			got[rp.Item] += rp.Qty
		}
	}
	for i, it := range items {
		if got[i] != it.Quantity {
			v.order(id, "decided-once", "order %s is confirmed with %d of item %d (%s/%s), ordered %d", id, got[i], i, it.Route, it.SKU, it.Quantity)
		}
	}
}

func checkOrder(v *violations, id string, ov *orderView, obs *observed, homes *inventory.Homes) {
	if len(ov.recOn) > 1 {
		v.order(id, "decided-once", "order %s: live record on several nodes %v", id, ov.recOn)
	} else if len(ov.recOn) == 1 && ov.recOn[0] != homes.Home(id) {
		v.order(id, "decided-once", "order %s: record on %s, its home is %s", id, ov.recOn[0], homes.Home(id))
	}
	status, token := inventory.OrderMissing, ""
	if ov.rec != nil {
		status, token = ov.rec.Status, ov.rec.Token
	}
	switch status {
	case inventory.OrderStaging:
		// An attempt that died before it took anything, or that aborted
		// what it took (staged.go, "Abort": its parts cancelled before any
		// record is decided), leaves an undecided record and nothing held:
		// harmless (whoever meets it decides it). A part of the attempt
		// that is not cancelled says the record should have been decided
		// (nothing pending is left here).
		for _, p := range ov.parts {
			if p.Token == token && !p.Tombstone && p.State != inventory.PartCancelled {
				v.order(id, "decided-once", "order %s is still staging at quiescence, with part %s on %s (%s)", id, p.ID, ov.where[p], p.State)
				break
			}
		}
		// A part on a node the topology no longer has (n4, after its
		// removal) reads as gone to whoever meets the record (staged.go,
		// "Parts on a node that left"), but the reconcilers meet records
		// only through pending parts: the apply that removed the node
		// must have decided it (safety issue A2).
		for _, rp := range ov.rec.Parts {
			if !slices.Contains(nodesT0, rp.Node) {
				v.order(id, "decided-once", "order %s is still staging at quiescence, promising part %s on %s, which is not in the topology: the apply that removed it left it undecided", id, rp.ID, rp.Node)
				break
			}
		}
	// "reserving" at quiescence: the general path's attempt died; it
	// cancels its parts before it records the failure (reserve.go), so
	// cancelled parts under it are the protocol's, and a confirmed one is
	// reported below.
	case inventory.OrderReserved:
		if time.Since(ov.rec.Deadline) > healBound {
			v.order(id, "decided-once", "order %s is still reserved, %s past its deadline", id, time.Since(ov.rec.Deadline).Round(time.Millisecond))
		}
	}
	for _, p := range ov.parts {
		where := ov.where[p]
		if p.State == inventory.PartPending {
			continue // checkQuiet reports it
		}
		want := inventory.PartCancelled
		if status == inventory.OrderConfirmed && p.Token == token {
			want = inventory.PartConfirmed
		}
		if p.State != want && obs.settledByOperator(where, p.ID) && !obs.isExpired(id) {
			// the operator's decision (operator.go): excused only when a
			// node's data loss took the order's record, which then no
			// longer tells the decision the system of record holds
			v.decided(id, "operator-decision", "order %s is %s (token %s), but the operator settled its part %s on %s (token %s) %s", id, status, token, p.ID, where, p.Token, p.State)
		} else if p.State != want {
			v.order(id, "decided-once", "order %s is %s (token %s), but part %s on %s (token %s) is %s", id, status, token, p.ID, where, p.Token, p.State)
		}
	}
	if status == inventory.OrderConfirmed {
		checkConfirmed(v, id, ov)
	}

	obs.mu.Lock()
	answers, acked := obs.reserved[id]
	confirmedBy, cancelledBy, loss := obs.confirmed[id], obs.cancelled[id], obs.dataLoss[id]
	cancelFrom, cancelCalled := obs.cancelFrom[id]
	slack, nlost := obs.clockSlack, len(obs.losses)
	obs.mu.Unlock()
	if loss && !v.exposed[id] {
		// a node restarted from its AOF (appendfsync always) loses
		// nothing: only the data-loss actor (loss.go) makes a part go,
		// and a part or record of this order it took (or a promise at
		// the lost node's old incarnation) exposes the order (lossdiff.go)
		v.add("false-data-loss", "order %s: a Confirm reported data loss, but no node's data loss took a write of it (nodes that lost data: %d)", id, nlost)
	}
	if acked && !loss {
		switch status {
		case inventory.OrderReserved, inventory.OrderConfirmed, inventory.OrderCancelled:
			// every success answered, not only the first: a retry is
			// answered from the record and must name what it holds
			got := recordReceipts(ov.rec)
			for i, receipts := range answers {
				if fmt.Sprint(got) != fmt.Sprint(sortReceipts(receipts)) {
					v.order(id, "acked-gone", "order %s: Reserve answered %v (success %d of %d), the record holds %v",
						id, sortReceipts(receipts), i+1, len(answers), got)
					break
				}
			}
			// its parts are held to its deadline, or, once cancelled, to
			// the first Cancel call if one began before it, whatever
			// reason the record gives (heldUntil)
			switch status {
			case inventory.OrderReserved:
				checkHeldToDeadline(v, id, ov, ov.rec.Deadline, slack)
			case inventory.OrderCancelled:
				checkHeldToDeadline(v, id, ov, heldUntil(ov.rec, cancelFrom, cancelCalled), slack)
			}
		default:
			v.order(id, "acked-gone", "order %s: Reserve answered success, the order is %s", id, status)
		}
	}
	checkRefusedHeld(v, id, ov, obs, status, slack)
	if confirmedBy != "" && status != inventory.OrderConfirmed {
		v.decided(id, "acked-gone", "order %s: %s was told confirmed, the order is %s", id, confirmedBy, status)
	}
	if cancelledBy != "" && status != inventory.OrderCancelled {
		v.decided(id, "decided-once", "order %s: %s was told cancelled, the order is %s", id, cancelledBy, status)
	}
}

// checkRefusedHeld: a Reserve refused for good (insufficient stock, a
// per-user limit) says the order is not reserved. An attempt of the order
// whose every part was taken before that call began held what it wanted
// all through the call, so the refusal must have fenced it out (a hold
// that may be the order's own is never refused without a failed record:
// soldout.go; a stage never takes over a record: staged.go), and it must
// not end reserved (or confirmed, or expired after being reserved). An
// attempt whose last take landed after the call began ran concurrently
// with it: either answer stands. The nodes share this machine's clock,
// read in whole ms: the parts must predate the call by more than that,
// and by slack more when the clock actor skewed a node's (clock.go).
func checkRefusedHeld(v *violations, id string, ov *orderView, obs *observed, status inventory.OrderState, slack time.Duration) {
	if ov.rec == nil || !(status == inventory.OrderReserved || status == inventory.OrderConfirmed ||
		(status == inventory.OrderCancelled && ov.rec.Reason == inventory.ReasonExpired)) {
		return
	}
	obs.mu.Lock()
	refusals := obs.refused[id]
	obs.mu.Unlock()
	var last time.Time
	for _, rp := range ov.rec.Parts {
		var taken time.Time
		for _, p := range ov.parts {
			if p.ID == rp.ID && ov.where[p] == rp.Node {
				taken = p.At
			}
		}
		if taken.IsZero() {
			return // a part not found (moved, lost): nothing to date the attempt by
		}
		if taken.After(last) {
			last = taken
		}
	}
	for _, r := range refusals {
		if !last.IsZero() && last.Before(r.start.Add(-2*time.Millisecond-slack)) {
			v.order(id, "refused-held", "order %s is %s by attempt %s, whose every part was taken by %s, %s before %s's Reserve began; that call answered %v",
				id, status, ov.rec.Token, last.Format("15:04:05.000"), r.start.Sub(last).Round(time.Millisecond), r.who, r.err)
		}
	}
}

// checkHeldToDeadline: an acknowledged reservation holds every part of
// its record until until (its deadline; or, for an order a Cancel
// cancelled, when the first Cancel call began, if that came first), as
// seen at the end: still reserved, expired or cancelled (the nodes share
// this machine's clock, but for slack when the clock actor skewed a
// node's: clock.go). A part cancelled before that was released early,
// and the stock it held may have been sold again while the order could
// still be confirmed (a reviewer's early-release mutation, a reconciler
// that cancels a reserved order's due parts instead of putting them off,
// was caught once in four firings when only expired orders were held).
func checkHeldToDeadline(v *violations, id string, ov *orderView, until time.Time, slack time.Duration) {
	for _, rp := range ov.rec.Parts {
		for _, p := range ov.parts {
			if p.ID != rp.ID || ov.where[p] != rp.Node || p.State != inventory.PartCancelled || p.SettledAt.IsZero() {
				continue
			}
			if early := until.Sub(p.SettledAt); early > slack {
				what := "the reservation's deadline"
				if until.Before(ov.rec.Deadline) {
					what = "the first Cancel call began"
				}
				v.order(id, "acked-gone", "order %s (%s): acknowledged, its part %s on %s was cancelled %s before %s",
					id, ov.rec.Status, p.ID, rp.Node, early.Round(time.Millisecond), what)
			}
		}
	}
}

// heldUntil is when an acknowledged reservation's parts may first be
// released (checkHeldToDeadline): its deadline, or when the first Cancel
// call of the order began if one began before it (by this process's
// clock; the nodes date a settle in whole ms, hence the ms off). Only a
// client's Cancel may release them early: the record's reason says
// nothing about that, so a record that ends cancelled with reason
// "cancelled" or "tombstone" while no client called Cancel is held to
// its deadline like an expired one (before, only a reserved or expired
// order, or one a Cancel was called for, was held, and such an early
// release passed).
func heldUntil(rec *inventory.OrderRecord, cancelFrom time.Time, cancelCalled bool) time.Time {
	if !cancelCalled {
		return rec.Deadline
	}
	return earliest(rec.Deadline, cancelFrom.Add(-time.Millisecond))
}

// earliest returns the earlier of a and b.
func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

type receipt struct {
	Item        int
	SKU, Node   string
	Qty, Offset int64
}

func recordReceipts(rec *inventory.OrderRecord) []receipt {
	var out []receipt
	for _, p := range rec.Parts {
		if p.Kind == inventory.PartStock {
			out = append(out, receipt{p.Item, p.SKU, p.Node, p.Qty, p.Offset})
		}
	}
	return sortR(out)
}

func sortReceipts(rs []inventory.Receipt) []receipt {
	out := make([]receipt, 0, len(rs))
	for _, r := range rs {
		out = append(out, receipt{r.ItemIndex, r.SKU, r.Node, r.Quantity, r.Offset})
	}
	return sortR(out)
}

func sortR(rs []receipt) []receipt {
	sort.Slice(rs, func(i, j int) bool {
		if rs[i].Item != rs[j].Item {
			return rs[i].Item < rs[j].Item
		}
		return rs[i].Node < rs[j].Node
	})
	return rs
}
