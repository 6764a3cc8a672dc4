package explore

import (
	"errors"
	"slices"
	"time"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/topology"
)

// What the checks excuse where a node's data loss (loss.go) lacks the
// reads that would say what it took (lossExposure), and the routes whose
// counters it may have changed (lossMoved).

// lossExposure is the set of order ids whose per-order checks a loss of
// the nodes lost excuses: those of plans (phase 1's orders and the
// topology actor's) with an item on a route the node serves at T0, T1 or,
// when an apply of T2 ran (shrink: observed.ran), T2 (its stock and
// quota parts live there) or a home on the node at T0 or T1 (its record
// does; T2's homes are T0's).
func (w *World) lossExposure(lost []string, plans []orderPlan, shrink bool) map[string]bool {
	out := map[string]bool{}
	cfgs := w.topologies(shrink)
	for _, name := range lost {
		for _, p := range plans {
			touches := w.homes.Home(p.ID) == name || w.homes1.Home(p.ID) == name
			for _, it := range p.Items {
				for _, cfg := range cfgs {
					touches = touches || slices.Contains(cfg.Servers["inventory"].Routes[it.Route], name)
				}
			}
			if touches {
				out[p.ID] = true
			}
		}
	}
	return out
}

// topologyRoutes are the routes of the world's topologies, by name.
var topologyRoutes = map[string]map[string][]string{"T0": routesT0, "T1": routesT1, "T2": routesT2}

// lossMoved are the routes whose counters the losses may have changed
// beyond what they took of the parts that count them: for each loss, the
// routes its node serves at T0 or at the topology of an apply that ran
// (ran: observed.applied) and began before the loss's roll back killed
// the node, whose nodes differ between the two. Route c, when an apply
// of T1 or T2 ran: the topology actor loads stock on it at T1 and moves
// n4's stock back to n3, or n3's and n4's to n1 and n2, and user quota
// counters move to their home at T1 and back, while the parts that
// count them stay where they were taken; a node that goes back once such
// an apply began may lose a counter moved onto it, or a part whose
// counter was away and comes back, or come back with a route's units the
// apply had moved off it (checkStranded). A loss before any apply began
// takes the route's counters and parts together, all on the node, and
// the applies that follow move what it came back with; every other
// route's quota counters never leave the node that holds their parts.
func lossMoved(losses []stockLoss, ran []topoApply) map[string]bool {
	out := map[string]bool{}
	for _, l := range losses {
		for _, a := range ran {
			if !a.began.Before(l.at) {
				continue
			}
			for route, ms := range topologyRoutes[a.to] {
				if slices.Equal(routesT0[route], ms) {
					continue
				}
				if slices.Contains(routesT0[route], l.node) || slices.Contains(ms, l.node) {
					out[route] = true
				}
			}
		}
	}
	return out
}

// ranView is what the checks weigh of the topology applies that ran
// (observed.ran), not of those the schedule drew: lostRoutes, the routes
// whose counters the losses may have changed (lossMoved), and split, the
// routes a node left while it stayed in the server (splitRoutes, once an
// apply of T2 ran). Called with o.mu held.
func (w *World) ranView(o *observed) (lostRoutes, split map[string]bool) {
	return lossMoved(o.stockLosses, o.ran), w.splitRoutes(o.ranTo("T2"))
}

// topoApply is a topology apply of the schedule whose writes may have
// begun: the topology it applied ("T0", "T1" or "T2") and when it began.
type topoApply struct {
	to    string
	began time.Time
}

// applied counts a topology apply of topology to ("T0", "T1" or "T2")
// that began at began and reported rep and err, the stale records it
// retired and the records it put back. It is recorded as one that ran
// (ran) once it knew the epoch it applies (rep.ToEpoch): every write of
// an apply comes after that; one refused or failed before it (reading
// the nodes, connecting) wrote nothing and changed no route, and nor
// did one refused for stale counters (inventory.StaleCountersError:
// before the run's first write), which is counted (stale) and not
// recorded as one that ran, whatever it knew.
func (o *observed) applied(to string, began time.Time, rep topology.Report, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.applies++
	o.retired += rep.Retired
	o.reinstalled += rep.Reinstalled
	o.takenBack += rep.TakenBack
	o.noteLeftBehind(rep.LeftBehind)
	var stale *inventory.StaleCountersError
	if errors.As(err, &stale) {
		o.stale++
		o.staleFound += len(stale.Found)
		return
	}
	if rep.ToEpoch > 0 {
		o.ran = append(o.ran, topoApply{to: to, began: began})
	}
}

// ranTo reports whether an apply of topology to ran (applied). Called
// with o.mu held.
func (o *observed) ranTo(to string) bool {
	return slices.ContainsFunc(o.ran, func(a topoApply) bool { return a.to == to })
}
