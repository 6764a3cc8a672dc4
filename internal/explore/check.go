package explore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/topology"
)

// The checks at quiescence, on what the nodes hold (read directly, not
// through the inventory) and what the clients were told:
//
//   - stock conserved per SKU and node: available + reserved + confirmed
//     = loaded, none negative, reserved and confirmed equal to what the
//     node's pending and confirmed parts hold, and the SKU's total loaded
//     what the schedule loaded;
//   - no stock stranded: a node that does not serve a SKU's route at the
//     topology the schedule ends at holds none of its units (the apply
//     that took it off the route moved them, whether it left the server
//     or only the route: checkStranded);
//   - quota counters equal what their parts hold, and no user above the
//     per-user limit;
//   - no part settled twice (the counters above would drift) or against
//     its order's decision: the parts of the record's attempt follow its
//     status, every other part is cancelled;
//   - every order decided once: one live record, on its home, decided
//     (not staging, reserving, or reserved past its deadline);
//   - no acknowledged reservation silently gone: a Reserve that answered
//     success leaves the order reserved, confirmed or cancelled with the
//     receipts it answered (or a Confirm reported data_loss, which only a
//     node that lost data may cause); a Confirm or Cancel that answered
//     success is the order's final status;
//   - no refusal for good answered while an attempt of the same order
//     held what it wanted and then ended reserved (checkRefusedHeld);
//   - nothing pending past its deadline plus healBound;
//   - no topology left migrating, no transfer record left.

type nodeState struct {
	name    string
	stock   map[string]map[string]string // stock key → fields
	parts   map[string]*inventory.PartRecord
	orders  map[string]*inventory.OrderRecord
	quota   map[string]int64
	pending []redis.Z
	xfers   []string
	topo    map[string]string // shardis:topology
	bad     []string
	frozen  int // order records marked moved that have no TTL (Result.Frozen)
	// movedLive: of orders marked moved here, those live on another node
	// when this state was read before a roll back (liveElsewhere); nil
	// otherwise
	movedLive map[string]bool
}

type worldState struct {
	nodes map[string]*nodeState
}

// read reads every inventory key of every node.
func (w *World) read(ctx context.Context) (*worldState, error) {
	st := &worldState{nodes: map[string]*nodeState{}}
	for _, name := range allNodes {
		ns, err := readNode(ctx, w.direct[name], name)
		if err != nil {
			return nil, fmt.Errorf("explore: reading node %s: %w", name, err)
		}
		st.nodes[name] = ns
	}
	return st, nil
}

func readNode(ctx context.Context, c *redis.Client, name string) (*nodeState, error) {
	ns := &nodeState{name: name, stock: map[string]map[string]string{}, parts: map[string]*inventory.PartRecord{},
		orders: map[string]*inventory.OrderRecord{}, quota: map[string]int64{}}
	keys, err := c.Keys(ctx, "inv:*").Result()
	if err != nil {
		return nil, err
	}
	if ns.topo, err = c.HGetAll(ctx, "shardis:topology").Result(); err != nil {
		return nil, err
	}
	var inline []inventory.PartRecord // the orders' inline parts (inventory/inline.go)
	for _, k := range keys {
		kind, rest := inventory.ParseKey(k)
		switch kind {
		case inventory.KeyPending:
			if ns.pending, err = c.ZRangeWithScores(ctx, k, 0, -1).Result(); err != nil {
				return nil, err
			}
		case inventory.KeyStock:
			if ns.stock[k], err = c.HGetAll(ctx, k).Result(); err != nil {
				return nil, err
			}
		case inventory.KeyPart, inventory.KeyOrder:
			var f map[string]string
			if kind == inventory.KeyPart {
				f, err = inventory.ReadPart(ctx, c, rest).Fields()
			} else {
				f, err = inventory.ReadOrder(ctx, c, rest).Fields()
			}
			if errors.Is(err, inventory.ErrCorrupt) {
				ns.bad = append(ns.bad, err.Error())
				continue
			}
			if err != nil {
				return nil, err
			}
			if kind == inventory.KeyPart {
				p, err := inventory.DecodePart(rest, f)
				if err != nil {
					ns.bad = append(ns.bad, err.Error())
					continue
				}
				ns.parts[rest] = &p
			} else {
				o, err := inventory.DecodeOrder(rest, f)
				if err != nil {
					ns.bad = append(ns.bad, err.Error())
					continue
				}
				ns.orders[rest] = &o
				if o.Moved != "" {
					if ttl, err := c.PTTL(ctx, k).Result(); err == nil && ttl == -1 {
						ns.frozen++
					}
				}
				in, err := inventory.InlineParts(name, rest, f)
				if err != nil {
					ns.bad = append(ns.bad, err.Error())
					continue
				}
				inline = append(inline, in...)
			}
		case inventory.KeyQuota:
			v, err := c.Get(ctx, k).Result()
			if err != nil {
				return nil, err
			}
			ns.quota[k] = atoi(v)
		case inventory.KeyTransfer:
			ns.xfers = append(ns.xfers, k)
		}
	}
	for i, p := range inline {
		if ns.parts[p.ID] == nil { // a part with a key of its own is that record
			ns.parts[p.ID] = &inline[i]
		}
	}
	return ns, nil
}

// atoi reads a counter: missing is 0; unreadable fails every check.
func atoi(s string) int64 {
	if s == "" {
		return 0
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return -1 << 62
	}
	return n
}

// topoView is what the checks weigh of the schedule's topologies: the
// routes of the one it ended at (checkStranded), and split, the routes a
// node left while it stayed in the server (splitRoutes).
type topoView struct {
	routes map[string][]string
	split  map[string]bool
}

// check runs every check; it returns the violations found and those it
// excused (lossView).
func check(st *worldState, obs *observed, orders []orderPlan, homes *inventory.Homes, topo topoView, loss lossView) (found, excused []string) {
	v := &violations{exposed: loss.exposed, records: loss.records}
	lostRoutes := loss.lostRoutes
	for _, name := range allNodes {
		for _, b := range st.nodes[name].bad {
			v.add("bad-record", "node %s: %s", name, b)
		}
	}
	checkStock(v, st, obs, lostRoutes, topo.split)
	checkStranded(v, st, topo.routes, lostRoutes)
	checkQuota(v, st, lostRoutes, topo.split)
	checkOrders(v, st, obs, orders, homes, loss.resurrected)
	checkQuiet(v, st)
	return v.list, v.excused
}

// checkStock holds each SKU's counters against its parts and loads. On
// a route in split (a node left it while it stayed in the server:
// splitRoutes) a node's confirmed count is held against its confirmed
// parts over all nodes only: the apply moved the leaving node's confirmed
// count with its stock, and its confirmed parts, final, stayed there.
func checkStock(v *violations, st *worldState, obs *observed, lostRoutes, split map[string]bool) {
	for _, k := range skus {
		key := inventory.StockKey(k.Route, k.SKU)
		obs.mu.Lock()
		extra := obs.extra[key]
		obs.mu.Unlock()
		if lostRoutes[k.Route] {
			extra = -1
		}
		var sum stockSums
		for _, name := range allNodes {
			sum.add(checkNodeStock(v, st.nodes[name], key, split[k.Route]))
		}
		if split[k.Route] && sum.confirmed != sum.partsConfirmed {
			v.add("settled-twice", "%s: confirmed %d over all nodes, but its parts hold %d confirmed", key, sum.confirmed, sum.partsConfirmed)
		}
		switch want := stockPerSKU + extra; {
		case extra < 0:
			if sum.total != sum.loaded {
				v.add("stock-conserved", "%s: %d units over all nodes, %d loaded", key, sum.total, sum.loaded)
			}
		case sum.total != want || sum.loaded != want:
			v.add("stock-conserved", "%s: %d units and %d loaded over all nodes, the schedule loaded %d", key, sum.total, sum.loaded, want)
		}
	}
}

// stockSums is what checkNodeStock read of one SKU on one node, or,
// added up, on all of them.
type stockSums struct{ total, loaded, confirmed, partsConfirmed int64 }

func (s *stockSums) add(o stockSums) {
	s.total += o.total
	s.loaded += o.loaded
	s.confirmed += o.confirmed
	s.partsConfirmed += o.partsConfirmed
}

// checkNodeStock checks the stock counters of key on ns against its parts
// there (their confirmed counts only unless split: checkStock).
func checkNodeStock(v *violations, ns *nodeState, key string, split bool) stockSums {
	var pending, confirmed int64
	for _, p := range ns.parts {
		if p.Kind != inventory.PartStock || p.Counter != key {
			continue
		}
		switch p.State {
		case inventory.PartPending:
			pending += p.Qty
		case inventory.PartConfirmed:
			confirmed += p.Qty
		}
	}
	f, ok := ns.stock[key]
	if !ok {
		if pending != 0 || (confirmed != 0 && !split) {
			v.add("stock-vs-parts", "%s on %s: no counters, its parts hold %d pending and %d confirmed", key, ns.name, pending, confirmed)
		}
		return stockSums{partsConfirmed: confirmed}
	}
	a, r, c, l := atoi(f["available"]), atoi(f["reserved"]), atoi(f["confirmed"]), atoi(f["loaded"])
	if a < 0 || r < 0 || c < 0 || l < 0 {
		v.add("stock-negative", "%s on %s: available %d reserved %d confirmed %d loaded %d", key, ns.name, a, r, c, l)
	}
	if a+r+c != l {
		v.add("stock-conserved", "%s on %s: available %d + reserved %d + confirmed %d = %d, loaded %d", key, ns.name, a, r, c, a+r+c, l)
	}
	if r != pending || (c != confirmed && !split) {
		v.add("settled-twice", "%s on %s: reserved %d confirmed %d, but its parts hold %d pending and %d confirmed",
			key, ns.name, r, c, pending, confirmed)
	}
	return stockSums{total: a + r + c, loaded: l, confirmed: c, partsConfirmed: confirmed}
}

// checkStranded: a node that does not serve a SKU's route in routes (the
// topology the schedule ended at) holds none of the SKU's units, nor any
// loaded count of it. No instance takes, loads or gives back the route's
// stock there any more, so units left on it are out of every order's
// reach for good, though checkStock's totals over all nodes still count
// them. On a route whose counters a data loss may have changed (a node
// that went back may hold the route's units again: lossMoved) it is
// excused.
func checkStranded(v *violations, st *worldState, routes map[string][]string, lostRoutes map[string]bool) {
	for _, k := range skus {
		key := inventory.StockKey(k.Route, k.SKU)
		for _, name := range allNodes {
			f, ok := st.nodes[name].stock[key]
			if !ok || slices.Contains(routes[k.Route], name) {
				continue
			}
			a, r, c, l := atoi(f["available"]), atoi(f["reserved"]), atoi(f["confirmed"]), atoi(f["loaded"])
			if a == 0 && r == 0 && c == 0 && l == 0 {
				continue
			}
			msg := fmt.Sprintf("%s on %s, which does not serve route %s (its nodes %v): available %d reserved %d confirmed %d loaded %d",
				key, name, k.Route, routes[k.Route], a, r, c, l)
			if lostRoutes[k.Route] {
				v.excused = append(v.excused, "stock-stranded: "+msg)
				continue
			}
			v.add("stock-stranded", "%s", msg)
		}
	}
}

// checkQuota holds each quota counter against the parts that count it
// on its node, and the confirmed units against the per-user limit. On a
// route in split (splitRoutes) a counter is held against its parts over
// all nodes: the apply moves a counter to its new home once no pending
// part counts it, and the confirmed parts stay where they were taken.
func checkQuota(v *violations, st *worldState, lostRoutes, split map[string]bool) {
	held := map[string]int64{} // route/sku/user → confirmed units
	// counted adds a counter-against-its-parts violation, or counts it
	// as excused on a route whose counters a data loss may have changed.
	counted := func(key, format string, a ...any) {
		if route, _, _, err := inventory.ParseQuotaKey(key); err == nil && lostRoutes[route] {
			v.excused = append(v.excused, "quota-vs-parts: "+fmt.Sprintf(format, a...))
			return
		}
		v.add("quota-vs-parts", format, a...)
	}
	splitKey := func(key string) bool {
		route, _, _, err := inventory.ParseQuotaKey(key)
		return err == nil && split[route]
	}
	allCounters, allParts := map[string]int64{}, map[string]int64{} // of split routes' keys, over all nodes
	for _, name := range allNodes {
		ns := st.nodes[name]
		sums := map[string]int64{}
		for _, p := range ns.parts {
			if p.Kind != inventory.PartQuota || (p.State != inventory.PartPending && p.State != inventory.PartConfirmed) {
				continue
			}
			if p.State == inventory.PartConfirmed {
				held[p.Counter] += p.Qty
			}
			if splitKey(p.Counter) {
				allParts[p.Counter] += p.Qty
				continue
			}
			sums[p.Counter] += p.Qty
		}
		for key, n := range ns.quota {
			if splitKey(key) {
				allCounters[key] += n
				continue
			}
			if n != sums[key] {
				counted(key, "%s on %s holds %d, its parts hold %d", key, name, n, sums[key])
			}
			delete(sums, key)
		}
		for key, n := range sums {
			if n != 0 {
				counted(key, "%s on %s is absent, its parts hold %d", key, name, n)
			}
		}
	}
	for key := range allParts {
		allCounters[key] += 0 // a key whose counter is absent everywhere
	}
	for key, n := range allCounters {
		if n != allParts[key] {
			counted(key, "%s holds %d over all nodes, its parts hold %d", key, n, allParts[key])
		}
	}
	for key, n := range held {
		route, sku, _, err := inventory.ParseQuotaKey(key)
		if err != nil {
			v.add("bad-record", "%v", err)
			continue
		}
		for _, k := range skus {
			if k.Route == route && k.SKU == sku && k.Limit > 0 && n > k.Limit {
				v.add("quota-limit", "%s: %d units confirmed, limit %d", key, n, k.Limit)
			}
		}
	}
}

// orderView is one order id's record and parts over all nodes.
type orderView struct {
	recOn []string
	rec   *inventory.OrderRecord
	parts []*inventory.PartRecord
	where map[*inventory.PartRecord]string
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
	for _, id := range ids {
		checkOrder(v, id, views[id], obs, homes)
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
		if p.State != want {
			v.order(id, "decided-once", "order %s is %s (token %s), but part %s on %s (token %s) is %s", id, status, token, p.ID, where, p.Token, p.State)
		}
	}
	if status == inventory.OrderConfirmed {
		byID := map[string]*inventory.PartRecord{}
		for _, p := range ov.parts {
			byID[ov.where[p]+"/"+p.ID] = p
		}
		for _, rp := range ov.rec.Parts {
			p := byID[rp.Node+"/"+rp.ID]
			if p == nil || p.State != inventory.PartConfirmed || p.Qty != rp.Qty {
				v.order(id, "decided-once", "order %s is confirmed, its part %s on %s is %v", id, rp.ID, rp.Node, p)
			}
		}
	}

	obs.mu.Lock()
	receipts, acked := obs.reserved[id]
	confirmedBy, cancelledBy, loss := obs.confirmed[id], obs.cancelled[id], obs.dataLoss[id]
	slack, lost := obs.clockSlack, len(obs.losses) > 0
	obs.mu.Unlock()
	if loss && !lost {
		// a node restarted from its AOF (appendfsync always) loses
		// nothing: only the data-loss actor (loss.go) makes a part go
		v.order(id, "false-data-loss", "order %s: a Confirm reported data loss, but no node lost data", id)
	}
	if acked && !loss {
		switch status {
		case inventory.OrderReserved, inventory.OrderConfirmed, inventory.OrderCancelled:
			if got := recordReceipts(ov.rec); fmt.Sprint(got) != fmt.Sprint(sortReceipts(receipts)) {
				v.order(id, "acked-gone", "order %s: Reserve answered %v, the record holds %v", id, sortReceipts(receipts), got)
			}
			if status == inventory.OrderCancelled && ov.rec.Reason == "expired" {
				checkHeldToDeadline(v, id, ov, slack)
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
		(status == inventory.OrderCancelled && ov.rec.Reason == "expired")) {
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

// checkHeldToDeadline: an acknowledged reservation that expired held
// every part of its record until its deadline (the nodes share this
// machine's clock, but for slack when the clock actor skewed a node's:
// clock.go): a part cancelled before it was gone early, and the
// stock it held may have been sold again while the order could still be
// confirmed.
func checkHeldToDeadline(v *violations, id string, ov *orderView, slack time.Duration) {
	for _, rp := range ov.rec.Parts {
		for _, p := range ov.parts {
			if p.ID != rp.ID || ov.where[p] != rp.Node || p.State != inventory.PartCancelled || p.SettledAt.IsZero() {
				continue
			}
			if early := ov.rec.Deadline.Sub(p.SettledAt); early > slack {
				v.order(id, "acked-gone", "order %s: acknowledged, its part %s on %s was cancelled %s before the reservation's deadline",
					id, p.ID, rp.Node, early.Round(time.Millisecond))
			}
		}
	}
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

// checkQuiet: nothing pending past its deadline plus the bound, no
// topology left migrating, no transfer record left.
func checkQuiet(v *violations, st *worldState) {
	token := st.nodes["n1"].topo["token"]
	for _, name := range allNodes {
		ns := st.nodes[name]
		for _, z := range ns.pending {
			dl := time.UnixMilli(int64(z.Score))
			v.add("pending-past-deadline", "node %s: part %v still pending, deadline %s ago", name, z.Member, time.Since(dl).Round(time.Millisecond))
		}
		for _, p := range ns.parts {
			if p.State == inventory.PartPending && !p.Deadline.IsZero() && time.Since(p.Deadline) > healBound {
				v.add("pending-past-deadline", "node %s: part %s pending, deadline %s ago", name, p.ID, time.Since(p.Deadline).Round(time.Millisecond))
			}
		}
		for _, k := range ns.xfers {
			v.add("topology-migrating", "node %s: transfer record %s left", name, k)
		}
		if name == "n4" {
			continue
		}
		if ns.topo["phase"] != string(topology.PhaseStable) || ns.topo["token"] != token {
			v.add("topology-migrating", "node %s: topology token %s phase %s (n1: %s)", name, ns.topo["token"], ns.topo["phase"], token)
		}
	}
}
