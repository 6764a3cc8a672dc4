package chaos

import (
	"sort"
	"strings"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/inventory"
)

// Accounting for data a rolled-back node lost (rollback.go). Shardis
// refuses such a node until an operator accepts it; after that its lost
// writes are gone by design (SECURITY.md). The checker still checks every
// invariant, but a violation about an order or a user whose data could
// have lived on that node while its writes were being lost is counted as
// excused instead (Report.Excused), with the first few kept as notes.

// exposure is what a run's lost windows excuse.
type exposure struct {
	orders map[string]bool
	users  map[string]bool
	nodes  map[string]bool // accepted after a rollback: a new incarnation is expected
}

// outage is a span in which a node could not serve, or, with node "",
// in which the service and its reconciler could not (a restart, a
// topology change).
type outage struct {
	node     string
	from, to time.Time
}

// outages are the faults of a run's timeline (started at t0) that stop a
// node or the service, by start time. Route drains stop neither.
func outages(t0 time.Time, timeline []Fault) []outage {
	var out []outage
	for _, f := range timeline {
		if f.Kind == FaultDrain {
			continue
		}
		node := f.Target
		if f.Kind == FaultRestart || f.Kind == FaultTopology {
			node = ""
		}
		from := t0.Add(f.At)
		out = append(out, outage{node: node, from: from, to: from.Add(f.Hold)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].from.Before(out[j].from) })
	return out
}

// decideWindow is how long after an order's last client call the
// reconciler may still write its expiry (ttl, the reservation TTL), and
// how long after a node or the service is back it may still write one it
// could not while they were out (slack).
type decideWindow struct {
	ttl, slack time.Duration
}

// decideWindowOf is the window of a run with these options, whose service
// notices a node back within health (its slowest reconnect probe, then
// the probe's timeout): the slack is that, a client timeout (a call under
// way when the node stopped), two reconciler passes, and 2 s for the
// backlog of expiries an outage leaves.
func decideWindowOf(opts Options, health config.Health) decideWindow {
	probe := health.Timeout
	if n := len(health.Backoff); n > 0 {
		probe += health.Backoff[n-1] * 11 / 10 // its ±10 % jitter
	}
	return decideWindow{ttl: opts.ReservationTTL, slack: probe + opts.ClientTimeout + 2*opts.ReconcileInterval + 2*time.Second}
}

// decidedBy is the latest time the reconciler may write an order's
// expiry, for an order whose last client call was at last and whose
// records live on nodes: the TTL and the slack after that call, put off by
// every outage of one of those nodes or of the service that begins by
// then, to the slack after it ends (the reconciler cannot cancel a part or
// write a record on a node that does not answer). outs are by start time,
// so one pass follows outages that chain.
func decidedBy(last time.Time, w decideWindow, outs []outage, nodes map[string]bool) time.Time {
	end := last.Add(w.ttl + w.slack)
	for _, o := range outs {
		if o.from.After(end) {
			break
		}
		if o.to.Before(last) || (o.node != "" && !nodes[o.node]) {
			continue
		}
		if t := o.to.Add(w.slack); t.After(end) {
			end = t
		}
	}
	return end
}

// exposed finds the orders whose client calls, or the expiry that may
// follow the last one (decidedBy: within the TTL and a slack, later when
// one of the order's nodes or the service was out), overlapped a lost
// window and that touch the node: a receipt, a part, or a record home
// there in any topology of the run; and the users of those orders or with
// quota data on the node.
func exposed(lost []lossWindow, outs []outage, orders []*order, st *state, homes []*inventory.Homes, win decideWindow) *exposure {
	e := &exposure{orders: map[string]bool{}, users: map[string]bool{}, nodes: map[string]bool{}}
	if len(lost) == 0 {
		return e
	}
	onNode := map[string]map[string]bool{} // node → order ids with parts there
	for _, w := range lost {
		e.nodes[w.node] = true
		if onNode[w.node] != nil {
			continue
		}
		ids := map[string]bool{}
		if ns := st.nodes[w.node]; ns != nil {
			for _, p := range ns.parts {
				ids[p.Order] = true
				if p.Kind == inventory.PartQuota {
					if u := quotaID(p.Counter); u != "" {
						e.users[u[strings.LastIndex(u, ":")+1:]] = true
					}
				}
			}
			for k := range ns.quota {
				u := quotaID(k)
				e.users[u[strings.LastIndex(u, ":")+1:]] = true
			}
		}
		// Orders whose record (on any node) lists a part on the node:
		// quota parts are in no client's receipts.
		for _, other := range st.nodes {
			for id, r := range other.orders {
				for _, p := range r.Parts {
					if p.Node == w.node {
						ids[id] = true
					}
				}
			}
		}
		onNode[w.node] = ids
	}
	// the nodes that hold each order's parts or record at the end, and
	// the orders a replaced incarnation exposes
	held := map[string]map[string]bool{}
	hold := func(id, node string) {
		if held[id] == nil {
			held[id] = map[string]bool{}
		}
		held[id][node] = true
	}
	for name, ns := range st.nodes {
		for _, p := range ns.parts {
			hold(p.Order, name)
		}
		for id, r := range ns.orders {
			hold(id, name)
			for _, p := range r.Parts {
				hold(id, p.Node)
				// A part promised at an incarnation its node no longer
				// has (accepted after a rollback) exposes its order,
				// whenever its calls were: a reader that finds the part
				// absent commits the order with it lost, not never taken
				// (inventory/staged.go, "Lost parts"; seed 272,
				// TestExposedByAPromiseAtAReplacedIncarnation).
				if on := st.nodes[p.Node]; on != nil && e.nodes[p.Node] && p.Incarnation != "" && p.Incarnation != on.incarnation {
					e.orders[id] = true
					if r.User != "" {
						e.users[r.User] = true
					}
				}
			}
		}
	}
	for _, o := range orders {
		o.mu.Lock()
		first, last := o.first, o.last
		receipts := o.receipts
		o.mu.Unlock()
		if first.IsZero() {
			continue
		}
		nodes := map[string]bool{}
		for n := range held[o.ID] {
			nodes[n] = true
		}
		for _, r := range receipts {
			nodes[r.Node] = true
		}
		for _, h := range homes {
			nodes[h.Home(o.ID)] = true
		}
		decided := decidedBy(last, win, outs, nodes)
		for _, w := range lost {
			if decided.Before(w.from) || first.After(w.to) {
				continue
			}
			touches := onNode[w.node][o.ID]
			for _, r := range receipts {
				touches = touches || r.Node == w.node
			}
			for _, h := range homes {
				touches = touches || h.Home(o.ID) == w.node
			}
			if touches {
				e.orders[o.ID] = true
				if o.User != "" {
					e.users[o.User] = true
				}
			}
		}
	}
	return e
}

// excuses reports whether a violation's detail is about an exposed order
// or user.
func (e *exposure) excuses(kind, detail string) bool {
	if e == nil {
		return false
	}
	if kind == "data-loss" || kind == "sync-confirmed" {
		for n := range e.nodes {
			if strings.HasPrefix(detail, "node "+n+":") {
				return true
			}
		}
	}
	for _, tok := range strings.Fields(detail) {
		tok = strings.Trim(tok, ",:;()[]{}\"'")
		if e.orders[tok] {
			return true
		}
		if i := strings.LastIndex(tok, ":"); i >= 0 && strings.Count(tok, ":") == 2 && e.users[tok[i+1:]] {
			return true // a route:sku:user quota id
		}
	}
	if kind == "user-limit" || kind == "quota-balance" {
		for _, f := range strings.Fields(detail) {
			if e.users[f] && strings.Contains(detail, "user "+f+" ") {
				return true
			}
		}
	}
	return false
}
