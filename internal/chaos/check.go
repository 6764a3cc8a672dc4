package chaos

import (
	"fmt"
	"sort"
	"time"

	"github.com/shardis/shardis/inventory"
)

// part is one part record as read from a node.
type part struct {
	node string
	*inventory.PartRecord
}

func (p part) String() string {
	return fmt.Sprintf("%s@%s(state=%s kind=%s qty=%d)", p.ID, p.node, p.State, p.Kind, p.Qty)
}

// orderView gathers one order id's record and parts over all nodes.
type orderView struct {
	id     string
	recOn  []string               // nodes holding its record
	rec    *inventory.OrderRecord // the record (from its home if there)
	parts  []part
	client *order // nil if no client made it
	status inventory.OrderState
}

func check(rep *Report, st *state, orders []*order, skus []SKU, homes *inventory.Homes) {
	views := map[string]*orderView{}
	view := func(id string) *orderView {
		v := views[id]
		if v == nil {
			v = &orderView{id: id}
			views[id] = v
		}
		return v
	}
	for _, o := range orders {
		view(o.ID).client = o
	}
	for _, name := range st.names {
		ns := st.nodes[name]
		for id, r := range ns.orders {
			if r.Moved != "" {
				continue // a record moved away by a topology change: dead here
			}
			v := view(id)
			v.recOn = append(v.recOn, name)
			if v.rec == nil || homes.Home(id) == name {
				v.rec = r
			}
		}
		for _, r := range ns.parts {
			v := view(r.Order)
			v.parts = append(v.parts, part{node: name, PartRecord: r})
		}
	}
	ids := make([]string, 0, len(views))
	for id := range views {
		ids = append(ids, id)
	}
	sort.Strings(ids)

	for _, id := range ids {
		checkOrder(rep, views[id], homes)
	}
	checkStock(rep, st, skus)
	checkLimits(rep, st, views, skus)
	checkRedo(rep, st)
	for _, name := range st.names {
		ns := st.nodes[name]
		for _, b := range ns.bad {
			rep.violate(b.kind, "node %s: %v", name, b.err)
		}
		for _, z := range ns.pending {
			rep.violate("pending-after-heal", "node %s: %v still in inv:pending (deadline %s)", name, z.Member,
				time.UnixMilli(int64(z.Score)).Format("15:04:05.000"))
		}
		for _, k := range ns.other {
			rep.note("node %s holds unexpected key %s", name, k)
		}
		for _, k := range ns.xfers {
			rep.violate("topology-transfer", "node %s: transfer record %s left after the topology change finished", name, k)
		}
	}
}

func checkOrder(rep *Report, v *orderView, homes *inventory.Homes) {
	home := homes.Home(v.id)
	switch {
	case len(v.recOn) > 1:
		rep.violate("order-record", "order %s: record on several nodes %v (home %s)", v.id, v.recOn, home)
	case len(v.recOn) == 1 && v.recOn[0] != home:
		rep.violate("order-record", "order %s: record on %s, its home is %s", v.id, v.recOn[0], home)
	}
	v.status = inventory.OrderMissing
	token := ""
	if v.rec != nil {
		v.status = v.rec.Status
		token = v.rec.Token
	}
	rep.addStatus(v.status.String())
	if v.client == nil {
		rep.violate("unknown-order", "order %s (status %s, %d parts) was made by no client", v.id, v.status, len(v.parts))
	}
	if v.status == inventory.OrderReserved {
		rep.violate("order-still-reserved", "order %s is still reserved after healing (deadline %s)", v.id, v.rec.Deadline.Format("15:04:05.000"))
	}

	// Parts follow the order's decision, never mixed.
	confirmedParts := 0
	heldParts := []part{}
	for _, p := range v.parts {
		if p.State == inventory.PartPending {
			rep.violate("pending-after-heal", "order %s (%s): part %v still pending", v.id, v.status, p)
			heldParts = append(heldParts, p)
			continue
		}
		want := inventory.PartCancelled
		if v.status == inventory.OrderConfirmed && p.Token == token {
			want = inventory.PartConfirmed
		}
		if p.State != want {
			rep.violateDecided("mixed-outcome", v.id, []string{p.node}, "order %s is %s (token %s) but part %v is %s, want %s", v.id, v.status, token, p, p.State, want)
		}
		if p.State == inventory.PartConfirmed {
			confirmedParts++
			heldParts = append(heldParts, p)
		}
	}

	// A confirmed order holds exactly its committed parts, in full.
	if v.status == inventory.OrderConfirmed {
		byID := map[string]part{}
		for _, p := range v.parts {
			byID[p.node+"\x00"+p.ID] = p
		}
		listed := map[string]bool{}
		for _, rp := range v.rec.Parts {
			listed[rp.Node+"\x00"+rp.ID] = true
			p, ok := byID[rp.Node+"\x00"+rp.ID]
			switch {
			case !ok:
				rep.violate("confirmed-order", "order %s is confirmed but its part %s on %s does not exist", v.id, rp.ID, rp.Node)
			case p.State != inventory.PartConfirmed || p.Qty != rp.Qty ||
				(rp.Kind == inventory.PartStock && (p.Offset != rp.Offset || p.Redo != rp.Redo)):
				rep.violate("confirmed-order", "order %s is confirmed; record lists %+v, node has %v offset %d", v.id, rp, p, p.Offset)
			}
		}
		for _, p := range v.parts {
			if p.Token == token && !p.Tombstone && p.Qty > 0 && !listed[p.node+"\x00"+p.ID] {
				rep.violate("confirmed-order", "order %s is confirmed; part %v of its attempt is not in its record", v.id, p)
			}
		}
		if o := v.client; o != nil {
			got := make([]int64, len(o.Items))
			for _, rp := range v.rec.Parts {
				if rp.Kind == inventory.PartStock && rp.Item >= 0 && rp.Item < len(got) {
					got[rp.Item] += rp.Qty
				}
			}
			for i, it := range o.Items {
				if got[i] != it.Qty {
					rep.violate("confirmed-order", "order %s is confirmed with %d of item %d (%s/%s), ordered %d",
						v.id, got[i], i, it.Route, it.SKU, it.Qty)
				}
			}
		}
	}

	o := v.client
	if o == nil {
		return
	}
	checkOrderUser(rep, v)
	for _, c := range o.contradictions {
		rep.violate("client-contradiction", "order %s: %s", v.id, c)
	}
	if o.confirmedBy != "" && (v.status != inventory.OrderConfirmed || confirmedParts == 0) {
		// a record still confirmed kept the decision: only its parts
		// (none confirmed) may be what a loss took
		var partNodes []string
		if v.status == inventory.OrderConfirmed {
			partNodes = recPartNodes(v)
		}
		rep.violateDecided("seen-confirmed", v.id, partNodes, "order %s: a client saw %q, but the order is %s with %d confirmed parts (parts %v)",
			v.id, o.confirmedBy, v.status, confirmedParts, v.parts)
	}
	notHeld := o.cancelledBy
	if notHeld == "" {
		notHeld = o.notHeld
	}
	if notHeld != "" && (v.status == inventory.OrderConfirmed || len(heldParts) > 0) {
		// a record not confirmed kept the decision: only the parts it
		// holds may be what a loss took (or brought back)
		var partNodes []string
		if v.status != inventory.OrderConfirmed {
			for _, p := range heldParts {
				partNodes = append(partNodes, p.node)
			}
		}
		rep.violateDecided("seen-not-held", v.id, partNodes, "order %s: a client saw %q, but the order is %s and holds %v", v.id, notHeld, v.status, heldParts)
	}
	if !o.confirmIssued && (v.status == inventory.OrderConfirmed || confirmedParts > 0) {
		rep.violate("never-confirmed", "order %s was never confirmed by a client, but it is %s with %d confirmed parts",
			v.id, v.status, confirmedParts)
	}
	if o.reserveOK > 0 {
		var recReceipts []receipt
		for _, rp := range v.recParts() {
			if rp.Kind == inventory.PartStock {
				recReceipts = append(recReceipts, receipt{Item: rp.Item, SKU: rp.SKU, Qty: rp.Qty, Node: rp.Node, Redo: rp.Redo, Offset: rp.Offset})
			}
		}
		sort.Slice(recReceipts, func(i, j int) bool {
			if recReceipts[i].Item != recReceipts[j].Item {
				return recReceipts[i].Item < recReceipts[j].Item
			}
			return recReceipts[i].Node < recReceipts[j].Node
		})
		if v.status != inventory.OrderConfirmed && v.status != inventory.OrderCancelled {
			rep.violate("seen-reserved", "order %s: Reserve was ok, but the order is %s", v.id, v.status)
		} else if fmt.Sprint(recReceipts) != fmt.Sprint(o.receipts) {
			rep.violate("seen-reserved", "order %s: Reserve returned %v, the order record holds %v", v.id, o.receipts, recReceipts)
		}
	}
	switch {
	case o.confirmedBy != "":
		rep.addKnown("seen confirmed")
	case o.cancelledBy != "":
		rep.addKnown("seen cancelled/expired")
	case o.notHeld != "":
		rep.addKnown("seen refused/not found")
	case o.reserveOK > 0:
		rep.addKnown("reserved, then left or unknown")
	default:
		rep.addKnown("outcome unknown")
	}
}

// checkOrderUser holds the user of an order's record against the user
// the client sent with every Reserve of the order: the per-user limit is
// counted for the record's user, so a record of another user, or a
// reservation's record of none, would let the client's user past its
// limit unseen. A record that never held a reservation may name no user:
// a refusal's fence (failed_here in order.lua: failed, its token, no
// user), a Cancel's tombstone.
func checkOrderUser(rep *Report, v *orderView) {
	r := v.rec
	if r == nil || r.User == v.client.User {
		return
	}
	reservation := r.Status == inventory.OrderReserved || r.Status == inventory.OrderConfirmed ||
		(r.Status == inventory.OrderCancelled && (r.Reason == inventory.ReasonCancelled || r.Reason == inventory.ReasonExpired))
	if r.User == "" && !reservation {
		return
	}
	rep.violate("order-user", "order %s: its record (%s, reason %q, token %s) holds user %q, the client reserved it for user %q",
		v.id, v.status, r.Reason, r.Token, r.User, v.client.User)
}

// orderUser is the user an order's units count against: the one its
// client sent (the record's when no client made it, itself a violation).
func (v *orderView) orderUser() string {
	if v.client != nil {
		return v.client.User
	}
	if v.rec != nil {
		return v.rec.User
	}
	return ""
}

// recPartNodes returns the nodes of the parts the order's record lists.
func recPartNodes(v *orderView) []string {
	var nodes []string
	for _, p := range v.recParts() {
		nodes = append(nodes, p.Node)
	}
	return nodes
}

// recParts returns the parts the order's record lists (none without a
// record).
func (v *orderView) recParts() []inventory.OrderPart {
	if v.rec == nil {
		return nil
	}
	return v.rec.Parts
}

// partSums are the units a node's stock parts of one stock key hold.
type partSums struct{ pending, confirmed int64 }

// stockPartSums adds up, per node and stock key, the units its stock parts
// hold pending and confirmed.
func stockPartSums(st *state) map[string]map[string]*partSums {
	byCounter := map[string]map[string]*partSums{} // node → stock key → sums
	for _, name := range st.names {
		byCounter[name] = map[string]*partSums{}
		for _, p := range st.nodes[name].parts {
			if p.Kind != inventory.PartStock {
				continue
			}
			s := byCounter[name][p.Counter]
			if s == nil {
				s = &partSums{}
				byCounter[name][p.Counter] = s
			}
			switch p.State {
			case inventory.PartPending:
				s.pending += p.Qty
			case inventory.PartConfirmed:
				s.confirmed += p.Qty
			}
		}
	}
	return byCounter
}

// checkPartsWithoutCounters flags stock parts that hold units (pending or
// confirmed) on a node with no stock hash of their key: a take writes its
// part and the hash's counters in one script, and no step of the run
// deletes a hash a part still counts in (a node leaving a route keeps its
// hash, its counters moved out to zero), so such units are counted
// nowhere (internal/explore's checkNodeStock, "no counters").
func checkPartsWithoutCounters(rep *Report, st *state, byCounter map[string]map[string]*partSums) {
	for _, name := range st.names {
		keys := make([]string, 0, len(byCounter[name]))
		for key := range byCounter[name] {
			keys = append(keys, key)
		}
		sort.Strings(keys)
		for _, key := range keys {
			s := byCounter[name][key]
			if _, has := st.nodes[name].stock[key]; has || (s.pending == 0 && s.confirmed == 0) {
				continue
			}
			rep.violate("stock-vs-parts", "%s on %s: no counters, its parts hold %d pending and %d confirmed", key, name, s.pending, s.confirmed)
		}
	}
}

// checkStock checks every SKU's counters on every node of its route, and
// that they match the parts; and that no stock part holds units on a node
// without its counters (checkPartsWithoutCounters).
func checkStock(rep *Report, st *state, skus []SKU) {
	byCounter := stockPartSums(st)
	checkPartsWithoutCounters(rep, st, byCounter)
	for _, sku := range skus {
		key := inventory.StockKey(sku.Route, sku.SKU)
		res := SKUResult{SKU: sku}
		ok := true
		for _, name := range st.names {
			f, has := st.nodes[name].stock[key]
			if !has {
				continue
			}
			a, r, c, l := atoi(f["available"]), atoi(f["reserved"]), atoi(f["confirmed"]), atoi(f["loaded"])
			res.Available += a
			res.Reserved += r
			res.Confirmed += c
			res.LoadedOnNodes += l
			if a < 0 || r < 0 || c < 0 || l < 0 {
				rep.violate("stock-negative", "%s on %s: available %d reserved %d confirmed %d loaded %d", sku, name, a, r, c, l)
				ok = false
			}
			if a+r+c != l {
				rep.violate("stock-balance", "%s on %s: available %d + reserved %d + confirmed %d = %d, loaded %d", sku, name, a, r, c, a+r+c, l)
				ok = false
			}
			if got := atoi(f["limit"]); got != sku.Limit {
				rep.violate("stock-limit", "%s on %s: per-user limit %s, loaded with %d", sku, name, f["limit"], sku.Limit)
			}
			s := byCounter[name][key]
			if s == nil {
				s = &partSums{}
			}
			if r != s.pending || c != s.confirmed {
				rep.violate("stock-vs-parts", "%s on %s: reserved %d confirmed %d, but its parts hold %d pending and %d confirmed",
					sku, name, r, c, s.pending, s.confirmed)
				ok = false
			}
		}
		if res.LoadedOnNodes != sku.Loaded {
			rep.violate("stock-balance", "%s: loaded %d over all nodes, the run loaded %d", sku, res.LoadedOnNodes, sku.Loaded)
			ok = false
		}
		if sum := res.Available + res.Reserved + res.Confirmed; sum != sku.Loaded {
			rep.violate("stock-balance", "%s: available %d + reserved %d + confirmed %d = %d, loaded %d",
				sku, res.Available, res.Reserved, res.Confirmed, sum, sku.Loaded)
			ok = false
		}
		res.OK = ok
		rep.Stock = append(rep.Stock, res)
	}
}
