package chaos

import (
	"strings"
	"time"

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

// exposed finds the orders whose client calls, or the expiry that may
// follow the last one within a reservation TTL, overlapped a lost window and that
// touch the node: a receipt, a part, or a record home there in any
// topology of the run; and the users of those orders or with quota data
// on the node.
func exposed(lost []lossWindow, orders []*order, st *state, homes []*inventory.Homes, ttl time.Duration) *exposure {
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
	for _, o := range orders {
		o.mu.Lock()
		first, last := o.first, o.last
		o.mu.Unlock()
		for _, w := range lost {
			// The reconciler decides an order up to a TTL after its
			// last call.
			if first.IsZero() || last.Add(ttl+2*time.Second).Before(w.from) || first.After(w.to) {
				continue
			}
			touches := onNode[w.node][o.ID]
			for _, r := range o.receipts {
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
	if kind == "data-loss" {
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
