package explore

import (
	"context"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/router"
)

// The moved order (Options.Moved): in a schedule with the topology actor,
// the actor first reserves an order of its own at T0, homed at T1 on n4,
// the node T1 adds, and one unit of an item on another node than its T0
// home, so its record is all its home holds of it. The apply of T1 moves
// the record to n4 (and marks the home's copy moved); once the apply
// returned (stable, or migrating: records move before the counters it may
// wait for) an instance of T1 confirms or cancels the order there; the
// removal of n4 carries the decision back to the T0 home.
//
// A data loss may follow it (lossPlan.followReserve): the order's T0 home
// is copied once its Reserve returned, mostly before the move (nothing
// orders the copy before the apply: a copy after it holds the marked
// record, and the roll back then takes nothing of the order), and rolled
// back once its decision at T1 returned. The home then holds the order's
// record as it was before the move, live and not marked moved: a stale record,
// away from the order's home while T1 stands and on it again at T0, which
// every apply must retire (topology.Driver.Retire) before it moves the
// order's record back; one kept is installed over the decision (the
// mutation retire-skip). The order is held movedTTL, long enough for its
// decision at T1 to find it still reserved.

// decision is what the instance of T1 does to the moved order.
type decision int

const (
	decideNone decision = iota
	decideConfirm
	decideCancel
)

// movedTTL is the moved order's hold time (the worlds' configuration's
// max_reservation_ttl): its decision at T1 comes after the apply of T1,
// which may wait 300 ms for counters, and more on a loaded machine.
const movedTTL = 3 * time.Second

// movedOrders are the moved order's draws: ids homed on n1, n2 and n3 at
// T0 and on n4 at T1 (movedPlan checks it), each with an item whose
// route lives on another node.
var movedOrders = []struct{ id, home, route string }{
	{"m10", "n1", "b"}, {"m4", "n2", "a"}, {"m2", "n3", "a"},
}

// movedPlan is the moved order of draw i, and its home at T0.
func (w *World) movedPlan(i int) (orderPlan, string) {
	m := movedOrders[i]
	if w.homes.Home(m.id) != m.home || w.homes1.Home(m.id) != "n4" {
		panic("explore: moved order " + m.id + " is not homed on " + m.home + " at T0 and n4 at T1")
	}
	return orderPlan{ID: m.id, Items: []inventory.Item{{Route: m.route, SKU: "s", Quantity: 1}}, TTL: movedTTL}, m.home
}

// instance makes an inventory of cfg under the scheduler s, for the
// topology actor's clients (label names it in the log); nil when it
// cannot.
func (w *World) instance(ctx context.Context, o *observed, s *Scheduler, cfg *config.Config, label string) *inventory.Inventory {
	r, err := router.New(ctx, cfg, router.Options{KeepData: cfg.KeepData(), Logger: discard})
	if err != nil {
		o.note("topology", label+" router", err)
		return nil
	}
	o.closeLater(func() { _ = r.Close() })
	o.mu.Lock()
	o.routers = append(o.routers, r)
	o.mu.Unlock()
	inv, err := inventory.New(r, inventory.Options{Logger: discard, Faults: s, AttemptLease: attemptLease, GroupCommit: 1, CarryWait: s.carryWait})
	if err != nil {
		o.note("topology", label+" instance", err)
		return nil
	}
	o.closeLater(inv.Close)
	return inv
}

// reserveMoved reserves the moved order on an instance of T0, as a client
// of the topology actor's own (a sub-actor, with its own fates).
func (w *World) reserveMoved(ctx context.Context, o *observed, s *Scheduler, m orderPlan) {
	inv := w.instance(ctx, o, s, w.cfg0, "T0")
	if inv == nil {
		return
	}
	o.mu.Lock()
	o.atT1 = append(o.atT1, m)
	o.mu.Unlock()
	s.Sub(ctx, movedReserver(m.ID), o.reserve(inv, movedReserver(m.ID), m, 2))
}

// decideMoved confirms or cancels the moved order on inv, an instance of
// T1, as d says.
func decideMoved(ctx context.Context, o *observed, s *Scheduler, inv *inventory.Inventory, id string, d decision) {
	switch d {
	case decideConfirm:
		s.Sub(ctx, movedDecider(id, d), o.confirm(inv, movedDecider(id, d), id, 2))
	case decideCancel:
		s.Sub(ctx, movedDecider(id, d), o.cancel(inv, movedDecider(id, d), id))
	}
}

// movedReserver names the moved order's Reserve client.
func movedReserver(id string) string { return "reserve-" + id + "@T0" }

// movedDecider names the moved order's client at T1, which d says.
func movedDecider(id string, d decision) string {
	if d == decideCancel {
		return "cancel-" + id + "@T1"
	}
	return "confirm-" + id + "@T1"
}
