package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	v1 "github.com/shardis/shardis/proto/shardis/v1"
	"github.com/shardis/shardis/router"
)

// nodeState is everything of the inventory on one node, read directly.
type nodeState struct {
	name        string
	incarnation string
	stock       map[string]map[string]string // stock key → fields
	parts       map[string]map[string]string // part id → fields
	orders      map[string]map[string]string // order id → fields
	quota       map[string]string            // quota key → value
	redo        map[string][]redis.Z         // redo queue key → entries by score
	redoOffsets map[string]string            // inv:redo:offsets
	pending     []redis.Z                    // inv:pending
	other       []string                     // keys nobody expects
}

type state struct {
	names []string
	nodes map[string]*nodeState
	// svcRedo is every redo-log queue as ReadRedoLog returned it: node →
	// queue key → entries; nil if it could not be read.
	svcRedo map[string]map[string][]*v1.RedoEntry
}

// readState reads every inventory key of every node.
func (c *cluster) readState() (*state, error) {
	st := &state{names: c.names, nodes: map[string]*nodeState{}}
	for _, name := range c.names {
		ns, err := readNode(c.directClient(name), name)
		if err != nil {
			return nil, fmt.Errorf("chaos: reading node %s: %w", name, err)
		}
		st.nodes[name] = ns
	}
	return st, nil
}

func readNode(cl *redis.Client, name string) (*nodeState, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := &nodeState{name: name, stock: map[string]map[string]string{}, parts: map[string]map[string]string{},
		orders: map[string]map[string]string{}, quota: map[string]string{}, redo: map[string][]redis.Z{}}
	var err error
	if ns.incarnation, err = cl.HGet(ctx, "shardis:node", "incarnation").Result(); err != nil {
		return nil, fmt.Errorf("stamp: %w", err)
	}
	var keys []string
	iter := cl.Scan(ctx, 0, "inv:*", 2000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return nil, fmt.Errorf("SCAN: %w", err)
	}
	const batch = 1000
	for lo := 0; lo < len(keys); lo += batch {
		chunk := keys[lo:min(lo+batch, len(keys))]
		pipe := cl.Pipeline()
		cmds := make([]redis.Cmder, len(chunk))
		for i, k := range chunk {
			switch {
			case k == "inv:pending" || (strings.HasPrefix(k, "inv:redo:") && isDigits(k[len("inv:redo:"):])):
				cmds[i] = pipe.ZRangeWithScores(ctx, k, 0, -1)
			case k == "inv:redo:offsets", k == "inv:redo:acked", strings.HasPrefix(k, "inv:stock:"),
				strings.HasPrefix(k, "inv:part:"), strings.HasPrefix(k, "inv:order:"):
				cmds[i] = pipe.HGetAll(ctx, k)
			case strings.HasPrefix(k, "inv:quota:"):
				cmds[i] = pipe.Get(ctx, k)
			default:
				ns.other = append(ns.other, k)
			}
		}
		if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
			return nil, fmt.Errorf("reading keys: %w", err)
		}
		for i, k := range chunk {
			switch cmd := cmds[i].(type) {
			case *redis.ZSliceCmd:
				if k == "inv:pending" {
					ns.pending = cmd.Val()
				} else {
					ns.redo[k] = cmd.Val()
				}
			case *redis.MapStringStringCmd:
				v := cmd.Val()
				switch {
				case k == "inv:redo:offsets":
					ns.redoOffsets = v
				case k == "inv:redo:acked":
				case strings.HasPrefix(k, "inv:stock:"):
					ns.stock[k] = v
				case strings.HasPrefix(k, "inv:part:"):
					ns.parts[strings.TrimPrefix(k, "inv:part:")] = v
				case strings.HasPrefix(k, "inv:order:"):
					ns.orders[strings.TrimPrefix(k, "inv:order:")] = v
				}
			case *redis.StringCmd:
				ns.quota[k] = cmd.Val()
			}
		}
	}
	return ns, nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// atoi reads a counter or field: missing ("") is 0, as for the scripts;
// an unreadable value fails every check that uses it.
func atoi(s string) int64 {
	if s == "" {
		return 0
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return -1 << 62 // unreadable: fails every check that uses it
	}
	return n
}

// part is one part record as read from a node.
type part struct {
	node, id, order, token, state, kind, counter, redo string
	qty, offset, item                                  int64
	tomb                                               bool
}

func (p part) String() string {
	return fmt.Sprintf("%s@%s(state=%s kind=%s qty=%d)", p.id, p.node, p.state, p.kind, p.qty)
}

// recPart is a part as the order record lists it (inventory's JSON).
type recPart struct {
	ID     string `json:"p"`
	Node   string `json:"n"`
	Kind   string `json:"k"`
	Item   int    `json:"i"`
	Route  string `json:"r"`
	SKU    string `json:"s"`
	Qty    int64  `json:"q"`
	Redo   string `json:"l,omitempty"`
	Offset int64  `json:"o,omitempty"`
}

// orderView gathers one order id's record and parts over all nodes.
type orderView struct {
	id      string
	recOn   []string          // nodes holding its record
	rec     map[string]string // the record (from its home if there)
	parts   []part
	client  *order // nil if no client made it
	status  string
	rparts  []recPart
	recJSON error
}

func check(rep *Report, st *state, orders []*order, skus []SKU, homes *router.Ring) {
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
		for id, f := range ns.orders {
			v := view(id)
			v.recOn = append(v.recOn, name)
			if v.rec == nil || homes.Name(homes.Home("order:"+id)) == name {
				v.rec = f
			}
		}
		for id, f := range ns.parts {
			p := part{node: name, id: id, order: f["order"], token: f["token"], state: f["state"], kind: f["kind"],
				counter: f["counter"], redo: f["redo"], qty: atoi(f["qty"]), offset: atoi(f["offset"]), item: atoi(f["item"]),
				tomb: f["tombstone"] == "1"}
			seg := strings.Split(id, "|")
			if p.order == "" {
				p.order = seg[0]
			}
			if p.token == "" && len(seg) > 1 {
				p.token = seg[1]
			}
			if p.tomb {
				p.qty = 0
			}
			v := view(p.order)
			v.parts = append(v.parts, p)
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
		for _, z := range ns.pending {
			rep.violate("pending-after-heal", "node %s: %v still in inv:pending (deadline %s)", name, z.Member,
				time.UnixMilli(int64(z.Score)).Format("15:04:05.000"))
		}
		for _, k := range ns.other {
			rep.note("node %s holds unexpected key %s", name, k)
		}
	}
}

func checkOrder(rep *Report, v *orderView, homes *router.Ring) {
	home := homes.Name(homes.Home("order:" + v.id))
	switch {
	case len(v.recOn) > 1:
		rep.violate("order-record", "order %s: record on several nodes %v (home %s)", v.id, v.recOn, home)
	case len(v.recOn) == 1 && v.recOn[0] != home:
		rep.violate("order-record", "order %s: record on %s, its home is %s", v.id, v.recOn[0], home)
	}
	v.status = "missing"
	token := ""
	if v.rec != nil {
		v.status = v.rec["status"]
		token = v.rec["token"]
		if b := v.rec["parts"]; b != "" {
			v.recJSON = json.Unmarshal([]byte(b), &v.rparts)
			if v.recJSON != nil {
				rep.violate("order-record", "order %s: unreadable parts %q: %v", v.id, b, v.recJSON)
			}
		}
	}
	rep.addStatus(v.status)
	if v.client == nil {
		rep.violate("unknown-order", "order %s (status %s, %d parts) was made by no client", v.id, v.status, len(v.parts))
	}
	if v.status == "reserved" {
		rep.violate("order-still-reserved", "order %s is still reserved after healing (deadline %s)", v.id, msTime(v.rec["deadline"]))
	}

	// Parts follow the order's decision, never mixed.
	confirmedParts := 0
	heldParts := []part{}
	for _, p := range v.parts {
		if p.state == "pending" {
			rep.violate("pending-after-heal", "order %s (%s): part %v still pending", v.id, v.status, p)
			heldParts = append(heldParts, p)
			continue
		}
		want := "cancelled"
		if v.status == "confirmed" && p.token == token {
			want = "confirmed"
		}
		if p.state != want {
			rep.violate("mixed-outcome", "order %s is %s (token %s) but part %v is %s, want %s", v.id, v.status, token, p, p.state, want)
		}
		if p.state == "confirmed" {
			confirmedParts++
			heldParts = append(heldParts, p)
		}
	}

	// A confirmed order holds exactly its committed parts, in full.
	if v.status == "confirmed" {
		byID := map[string]part{}
		for _, p := range v.parts {
			byID[p.node+"\x00"+p.id] = p
		}
		listed := map[string]bool{}
		for _, rp := range v.rparts {
			listed[rp.Node+"\x00"+rp.ID] = true
			p, ok := byID[rp.Node+"\x00"+rp.ID]
			switch {
			case !ok:
				rep.violate("confirmed-order", "order %s is confirmed but its part %s on %s does not exist", v.id, rp.ID, rp.Node)
			case p.state != "confirmed" || p.qty != rp.Qty || (rp.Kind == "s" && (p.offset != rp.Offset || p.redo != rp.Redo)):
				rep.violate("confirmed-order", "order %s is confirmed; record lists %+v, node has %v offset %d", v.id, rp, p, p.offset)
			}
		}
		for _, p := range v.parts {
			if p.token == token && !p.tomb && p.qty > 0 && !listed[p.node+"\x00"+p.id] {
				rep.violate("confirmed-order", "order %s is confirmed; part %v of its attempt is not in its record", v.id, p)
			}
		}
		if o := v.client; o != nil {
			got := make([]int64, len(o.Items))
			for _, rp := range v.rparts {
				if rp.Kind == "s" && rp.Item >= 0 && rp.Item < len(got) {
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
	for _, c := range o.contradictions {
		rep.violate("client-contradiction", "order %s: %s", v.id, c)
	}
	if o.confirmedBy != "" && (v.status != "confirmed" || confirmedParts == 0) {
		rep.violate("seen-confirmed", "order %s: a client saw %q, but the order is %s with %d confirmed parts (parts %v)",
			v.id, o.confirmedBy, v.status, confirmedParts, v.parts)
	}
	notHeld := o.cancelledBy
	if notHeld == "" {
		notHeld = o.notHeld
	}
	if notHeld != "" && (v.status == "confirmed" || len(heldParts) > 0) {
		rep.violate("seen-not-held", "order %s: a client saw %q, but the order is %s and holds %v", v.id, notHeld, v.status, heldParts)
	}
	if !o.confirmIssued && (v.status == "confirmed" || confirmedParts > 0) {
		rep.violate("never-confirmed", "order %s was never confirmed by a client, but it is %s with %d confirmed parts",
			v.id, v.status, confirmedParts)
	}
	if o.reserveOK > 0 {
		var recReceipts []receipt
		for _, rp := range v.rparts {
			if rp.Kind == "s" {
				recReceipts = append(recReceipts, receipt{Item: rp.Item, SKU: rp.SKU, Qty: rp.Qty, Node: rp.Node, Redo: rp.Redo, Offset: rp.Offset})
			}
		}
		sort.Slice(recReceipts, func(i, j int) bool {
			if recReceipts[i].Item != recReceipts[j].Item {
				return recReceipts[i].Item < recReceipts[j].Item
			}
			return recReceipts[i].Node < recReceipts[j].Node
		})
		if v.status != "confirmed" && v.status != "cancelled" {
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

func msTime(s string) string {
	return time.UnixMilli(atoi(s)).Format("15:04:05.000")
}

// checkStock checks every SKU's counters on every node of its route, and
// that they match the parts.
func checkStock(rep *Report, st *state, skus []SKU) {
	type sums struct{ pending, confirmed int64 }
	byCounter := map[string]map[string]*sums{} // node → stock key → sums
	for _, name := range st.names {
		byCounter[name] = map[string]*sums{}
		for _, f := range st.nodes[name].parts {
			if f["kind"] != "s" {
				continue
			}
			s := byCounter[name][f["counter"]]
			if s == nil {
				s = &sums{}
				byCounter[name][f["counter"]] = s
			}
			switch f["state"] {
			case "pending":
				s.pending += atoi(f["qty"])
			case "confirmed":
				s.confirmed += atoi(f["qty"])
			}
		}
	}
	for _, sku := range skus {
		key := "inv:stock:" + sku.Route + ":" + sku.SKU
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
				s = &sums{}
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

// checkLimits checks per-user limits two ways: the units of each limited
// SKU in a user's confirmed orders, and each quota counter against the
// quota parts it counts.
func checkLimits(rep *Report, st *state, views map[string]*orderView, skus []SKU) {
	limits := map[string]int64{} // "route:sku" → limit
	for _, s := range skus {
		if s.Limit > 0 {
			limits[s.Route+":"+s.SKU] = s.Limit
		}
	}
	// Units confirmed per (route:sku, user), from the parts of confirmed orders.
	confirmed := map[string]int64{}
	for _, v := range views {
		if v.status != "confirmed" || v.rec["user"] == "" {
			continue
		}
		for _, p := range v.parts {
			if p.kind != "s" || p.state != "confirmed" {
				continue
			}
			rs := strings.TrimPrefix(p.counter, "inv:stock:")
			if _, ok := limits[rs]; ok {
				confirmed[rs+":"+v.rec["user"]] += p.qty
			}
		}
	}
	// Quota parts held per quota counter.
	type qsum struct{ held, confirmed int64 }
	quotaParts := map[string]*qsum{}
	counters := map[string]int64{}
	for _, name := range st.names {
		ns := st.nodes[name]
		for _, f := range ns.parts {
			if f["kind"] != "q" {
				continue
			}
			k := quotaID(f["counter"])
			s := quotaParts[k]
			if s == nil {
				s = &qsum{}
				quotaParts[k] = s
			}
			switch f["state"] {
			case "pending":
				s.held += atoi(f["qty"])
			case "confirmed":
				s.held += atoi(f["qty"])
				s.confirmed += atoi(f["qty"])
			}
		}
		for k, val := range ns.quota {
			counters[quotaID(k)] += atoi(val)
		}
	}
	keys := map[string]bool{}
	for k := range confirmed {
		keys[k] = true
	}
	for k := range quotaParts {
		keys[k] = true
	}
	for k := range counters {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		seg := strings.SplitN(k, ":", 3) // route, sku, user
		if len(seg) != 3 {
			rep.violate("user-limit", "unreadable quota key %q", k)
			continue
		}
		limit := limits[seg[0]+":"+seg[1]]
		qp := quotaParts[k]
		if qp == nil {
			qp = &qsum{}
		}
		rep.LimitPairs++
		if limit == 0 {
			rep.violate("user-limit", "%s: quota kept for a SKU without a limit (counter %d, parts %d)", k, counters[k], qp.held)
			continue
		}
		if c := confirmed[k]; c > limit {
			rep.violate("user-limit", "user %s holds %d confirmed units of %s/%s, limit %d", seg[2], c, seg[0], seg[1], limit)
		}
		if counters[k] < 0 || counters[k] > limit {
			rep.violate("user-limit", "quota counter %s is %d, limit %d", k, counters[k], limit)
		}
		if counters[k] != qp.held {
			rep.violate("quota-balance", "quota counter %s is %d, its pending and confirmed quota parts hold %d", k, counters[k], qp.held)
		}
		if qp.confirmed != confirmed[k] {
			rep.violate("quota-balance", "%s: confirmed quota parts hold %d, confirmed stock parts of the user's orders %d", k, qp.confirmed, confirmed[k])
		}
		if confirmed[k] == limit {
			rep.LimitReached++
		}
	}
}

// checkRedo checks every redo-log queue of every node: offsets exactly
// 1..max with max the queue's recorded offset, every entry a stock part
// of that queue at that offset, and every stock part in its queue.
func checkRedo(rep *Report, st *state) {
	for _, name := range st.names {
		ns := st.nodes[name]
		queues := map[string]bool{}
		for q := range ns.redo {
			queues[q] = true
		}
		for q := range ns.redoOffsets {
			queues[q] = true
		}
		at := map[string]map[int64]string{} // queue → offset → part id
		for q := range queues {
			entries := ns.redo[q]
			rep.RedoEntries += int64(len(entries))
			last := atoi(ns.redoOffsets[q])
			at[q] = map[int64]string{}
			for i, z := range entries {
				want := int64(i + 1)
				if float64(want) != z.Score {
					rep.violate("redo-log", "node %s %s: entry %d has offset %v, want %d (gap or duplicate)", name, q, i, z.Score, want)
					break
				}
				id, _ := z.Member.(string)
				at[q][want] = id
				f, ok := ns.parts[id]
				switch {
				case !ok:
					rep.violate("redo-log", "node %s %s offset %d: part %s has no record", name, q, want, id)
				case f["kind"] != "s" || f["redo"] != q || atoi(f["offset"]) != want:
					rep.violate("redo-log", "node %s %s offset %d: part %s says kind %s queue %s offset %s", name, q, want, id, f["kind"], f["redo"], f["offset"])
				}
			}
			if int64(len(entries)) != last {
				rep.violate("redo-log", "node %s %s: %d entries, last offset recorded %d", name, q, len(entries), last)
			}
		}
		if st.svcRedo != nil {
			checkRedoRead(rep, ns, st.svcRedo[name])
		}
		for id, f := range ns.parts {
			if f["kind"] != "s" {
				continue
			}
			if at[f["redo"]][atoi(f["offset"])] != id {
				rep.violate("redo-log", "node %s: stock part %s (queue %s offset %s) is not in the redo log", name, id, f["redo"], f["offset"])
			}
		}
	}
}

// checkRedoRead compares what ReadRedoLog returned with the node's queues
// and part records.
func checkRedoRead(rep *Report, ns *nodeState, got map[string][]*v1.RedoEntry) {
	keys := map[string]bool{}
	for q := range ns.redo {
		keys[q] = true
	}
	for q := range got {
		keys[q] = true
	}
	for q := range keys {
		direct, read := ns.redo[q], got[q]
		if len(direct) != len(read) {
			rep.violate("redo-read", "node %s %s: ReadRedoLog returned %d entries, the node holds %d", ns.name, q, len(read), len(direct))
			continue
		}
		for i, e := range read {
			id, _ := direct[i].Member.(string)
			f := ns.parts[id]
			wantState := f["state"]
			if wantState == "" {
				wantState = "expired"
			}
			if float64(e.Offset) != direct[i].Score || e.PartId != id || e.State != wantState ||
				e.OrderId != f["order"] || e.Quantity != atoi(f["qty"]) || e.SkuId != f["sku"] {
				rep.violate("redo-read", "node %s %s: ReadRedoLog entry %+v, the node holds %s at %v with %v",
					ns.name, q, e, id, direct[i].Score, f)
				break
			}
		}
	}
}

// quotaID turns a quota counter key, inv:quota:ROUTE:LEN(SKU):SKU:USER,
// into "ROUTE:SKU:USER". A key it cannot parse is returned as it is, so it
// shows up in the report instead of being dropped.
func quotaID(key string) string {
	rest, ok := strings.CutPrefix(key, "inv:quota:")
	route, rest, ok2 := strings.Cut(rest, ":")
	lenStr, rest, ok3 := strings.Cut(rest, ":")
	n, err := strconv.Atoi(lenStr)
	if !ok || !ok2 || !ok3 || err != nil || n < 0 || n+1 > len(rest) || rest[n] != ':' {
		return key
	}
	return route + ":" + rest[:n] + ":" + rest[n+1:]
}
