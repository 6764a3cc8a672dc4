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
// invariant, but a violation about an order whose data could have lived
// on that node while its writes were being lost, or about a user's quota
// of a SKU that loss can explain (exposure.excusesQuota: its counter
// lived there while an order of that user and SKU ran, or an exposed
// order of theirs may have lost a stock part's writes), is counted as
// excused instead (Report.Excused), with the first few kept as notes.
//
// A violation about an order's acknowledged decision (a Confirm or Cancel
// told ok, seen-confirmed and seen-not-held) or about a part that does
// not follow its record's decision (mixed-outcome) is excused more
// narrowly, as internal/explore's lossdiff.go rules: a Confirm or Cancel
// acknowledged decided the order's record for good, and a lost part
// changes what later readers of the record find, not the record. Only a
// loss that may have taken the record itself (exposure.records: its
// home, in some placement of the run, is the lost node, and the order
// was decided after the node's copy was taken) explains a different
// final status. Parts that differ from a record that kept its decision
// (mixed-outcome; a confirmed record with no part confirmed; a cancelled
// one holding parts) are excused too when each is on a node whose loss
// exposed the order (exposure.lostOn: the part may have lost writes, or
// been promised at the node's replaced incarnation). Before, any loss
// that exposed the order, one of a node holding only one of its parts
// included, excused an acknowledged Confirm undone on a node that lost
// nothing.

// exposure is what a run's lost windows excuse.
type exposure struct {
	orders map[string]bool
	// quotas are the quota ids (route:sku:user) whose counter lived on a
	// node while it lost writes that an order of that user and SKU may
	// have made: the counter and its quota parts may have lost them.
	quotas map[string]bool
	// sold are the quota ids of the users and items of exposed orders:
	// their stock parts may have lost writes, so the user's confirmed
	// stock units may differ from the confirmed quota parts.
	sold  map[string]bool
	nodes map[string]bool // accepted after a rollback: a new incarnation is expected
	// records are the exposed orders whose record a loss may have taken
	// (exposer.record); lostOn, by exposed order, the lost nodes whose
	// windows exposed it (its parts there may have lost writes).
	records map[string]bool
	lostOn  map[string]map[string]bool
}

func newExposure() *exposure {
	return &exposure{orders: map[string]bool{}, quotas: map[string]bool{}, sold: map[string]bool{}, nodes: map[string]bool{},
		records: map[string]bool{}, lostOn: map[string]map[string]bool{}}
}

// expose exposes order id to the loss of node.
func (e *exposure) expose(id, node string) {
	e.orders[id] = true
	if e.lostOn[id] == nil {
		e.lostOn[id] = map[string]bool{}
	}
	e.lostOn[id][node] = true
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
// there in any placement of the run (seen); and the quota ids those
// losses can explain (exposure.quotas, exposure.sold).
func exposed(lost []lossWindow, outs []outage, orders []*order, st *state, seen []placement, win decideWindow) *exposure {
	e := newExposure()
	if len(lost) == 0 {
		return e
	}
	onNode := map[string]map[string]bool{} // node → order ids with parts there
	for _, w := range lost {
		e.nodes[w.node] = true
		if onNode[w.node] == nil {
			onNode[w.node] = ordersWithPartsOn(st, w.node)
		}
	}
	x := &exposer{e: e, lost: lost, outs: outs, win: win, seen: seen, onNode: onNode,
		held: e.heldBy(st), quotaAt: quotaHolders(st)}
	for _, o := range orders {
		x.order(o)
	}
	return e
}

// ordersWithPartsOn returns the orders with a part on node: one it holds,
// or one an order record on any node lists there (quota parts are in no
// client's receipts).
func ordersWithPartsOn(st *state, node string) map[string]bool {
	ids := map[string]bool{}
	if ns := st.nodes[node]; ns != nil {
		for _, p := range ns.parts {
			ids[p.Order] = true
		}
	}
	for _, other := range st.nodes {
		for id, r := range other.orders {
			for _, p := range r.Parts {
				if p.Node == node {
					ids[id] = true
				}
			}
		}
	}
	return ids
}

// heldBy returns the nodes that hold each order's parts or record at the
// end, and exposes the orders a replaced incarnation explains: a part
// promised at an incarnation its node no longer has (accepted after a
// rollback) exposes its order, whenever its calls were: a reader that
// finds the part absent commits the order with it lost, not never taken
// (inventory/staged.go, "Lost parts"; seed 272,
// TestExposedByAPromiseAtAReplacedIncarnation). The record's user's quota
// ids of the order's items are sold; a lost quota part's is in quotas.
func (e *exposure) heldBy(st *state) map[string]map[string]bool {
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
				if on := st.nodes[p.Node]; on != nil && e.nodes[p.Node] && p.Incarnation != "" && p.Incarnation != on.incarnation {
					e.exposeRecord(id, r, p)
				}
			}
		}
	}
	return held
}

// exposeRecord exposes order id, whose record r promised part lost at a
// replaced incarnation (heldBy).
func (e *exposure) exposeRecord(id string, r *inventory.OrderRecord, lost inventory.OrderPart) {
	e.expose(id, lost.Node)
	if r.User == "" {
		return
	}
	for _, p := range r.Parts {
		e.sold[quotaOf(p.Route, p.SKU, r.User)] = true
	}
	if lost.Kind == inventory.PartQuota {
		e.quotas[quotaOf(lost.Route, lost.SKU, r.User)] = true
	}
}

// quotaOf is the quota id of (route, sku, user), as quotaID names a
// quota counter key.
func quotaOf(route, sku, user string) string { return route + ":" + sku + ":" + user }

// quotaHolders returns, per quota id, the nodes that hold its counter or
// a quota part counting in it at the end.
func quotaHolders(st *state) map[string]map[string]bool {
	at := map[string]map[string]bool{}
	add := func(key, node string) {
		q := quotaID(key)
		if at[q] == nil {
			at[q] = map[string]bool{}
		}
		at[q][node] = true
	}
	for name, ns := range st.nodes {
		for k := range ns.quota {
			add(k, name)
		}
		for _, p := range ns.parts {
			if p.Kind == inventory.PartQuota {
				add(p.Counter, name)
			}
		}
	}
	return at
}

// exposer holds what exposed weighs each order against.
type exposer struct {
	e       *exposure
	lost    []lossWindow
	outs    []outage
	win     decideWindow
	seen    []placement
	onNode  map[string]map[string]bool // node → order ids with parts there
	held    map[string]map[string]bool // order id → nodes holding its parts or record
	quotaAt map[string]map[string]bool // quota id → nodes holding its counter or parts
}

// quotaNodes returns the nodes quota id q lived on in the run: those
// holding its counter or parts at the end, and user's quota node of route
// in every placement of the run.
func (x *exposer) quotaNodes(q, route, user string) map[string]bool {
	nodes := map[string]bool{}
	for n := range x.quotaAt[q] {
		nodes[n] = true
	}
	for _, p := range x.seen {
		if n := p.quotaNode(route, user); n != "" {
			nodes[n] = true
		}
	}
	return nodes
}

// quotasOf returns the quota ids of order o (none without a user), each
// with the nodes it lived on (quotaNodes).
func (x *exposer) quotasOf(o *order) map[string]map[string]bool {
	quotas := map[string]map[string]bool{}
	if o.User == "" {
		return quotas
	}
	for _, it := range o.Items {
		q := quotaOf(it.Route, it.SKU, o.User)
		quotas[q] = x.quotaNodes(q, it.Route, o.User)
	}
	return quotas
}

// order weighs one client order against the lost windows: exposed when
// its calls or its expiry overlapped a window and it touches the window's
// node; its quota ids are in quotas when they lived on that node, and in
// sold when the order is exposed.
func (x *exposer) order(o *order) {
	o.mu.Lock()
	first, last, decidedAt := o.first, o.last, o.decidedAt
	receipts := o.receipts
	o.mu.Unlock()
	if first.IsZero() {
		return
	}
	nodes := map[string]bool{}
	for n := range x.held[o.ID] {
		nodes[n] = true
	}
	for _, r := range receipts {
		nodes[r.Node] = true
	}
	for _, p := range x.seen {
		nodes[p.homes.Home(o.ID)] = true
	}
	quotas := x.quotasOf(o)
	for _, on := range quotas {
		for n := range on {
			nodes[n] = true
		}
	}
	decided := decidedBy(last, x.win, x.outs, nodes)
	for _, w := range x.lost {
		if decided.Before(w.from) || first.After(w.to) {
			continue
		}
		if x.touches(o.ID, receipts, w.node) {
			x.e.expose(o.ID, w.node)
		}
		if x.record(o.ID, decidedAt, w) {
			x.e.records[o.ID] = true
		}
		for q, on := range quotas {
			if on[w.node] {
				x.e.quotas[q] = true
			}
		}
	}
	if x.e.orders[o.ID] {
		for q := range quotas {
			x.e.sold[q] = true
		}
	}
}

// record reports whether lost window w may have taken order id's record
// (exposure.records), for an order whose calls and expiry overlap it: its
// home is w's node in some placement of the run, and the order was not
// decided for good before w's copy was taken. A client told the order's
// terminal status (decidedAt) before that: the copy holds the decided
// record, and no later write changes it; with no such claim the
// decision may come up to decidedBy, which overlaps w.
func (x *exposer) record(id string, decidedAt time.Time, w lossWindow) bool {
	if !decidedAt.IsZero() && decidedAt.Before(w.from) {
		return false
	}
	for _, p := range x.seen {
		if p.homes.Home(id) == w.node {
			return true
		}
	}
	return false
}

// touches reports whether order id has a receipt, a part or a record
// home on node.
func (x *exposer) touches(id string, receipts []receipt, node string) bool {
	if x.onNode[node][id] {
		return true
	}
	for _, r := range receipts {
		if r.Node == node {
			return true
		}
	}
	for _, p := range x.seen {
		if p.homes.Home(id) == node {
			return true
		}
	}
	return false
}

// excuses reports whether a violation's detail is about an exposed order,
// or (data-loss) about a node accepted after a rollback. Violations about
// a quota id are weighed by excusesQuota instead (Report.violateQuota),
// those the database holds against a node by what its loss can explain
// (Report.violateOnLostNode).
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
	}
	return false
}

// excusesDecided reports whether a violation about order id's decision
// is one the run's losses explain: its record may have been lost
// (records), or the violation is about parts that do not follow the
// record (partNodes, their nodes; none for a violation about the record's
// status), each on a node whose loss exposed the order (lostOn).
func (e *exposure) excusesDecided(id string, partNodes []string) bool {
	if e == nil {
		return false
	}
	if e.records[id] {
		return true
	}
	for _, n := range partNodes {
		if !e.lostOn[id][n] {
			return false
		}
	}
	return len(partNodes) > 0
}

// excusesQuota reports whether a violation about quota id q
// (route:sku:user) is one the run's losses explain: its counter or quota
// parts lived on a node while it lost writes of an order of that user and
// SKU (quotas), or, when the violation compares the user's confirmed
// stock units with the quota (stock), an exposed order of that user and
// SKU may have lost a stock part's writes (sold).
func (e *exposure) excusesQuota(q string, stock bool) bool {
	if e == nil {
		return false
	}
	return e.quotas[q] || (stock && e.sold[q])
}
