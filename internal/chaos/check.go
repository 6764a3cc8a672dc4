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

	"github.com/shardis/shardis/inventory"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
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
	xfers       []string                     // unfinished topology transfer records
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
			case strings.HasPrefix(k, "inv:xfer:in:"):
				// a destination's memory of an applied transfer (topology)
			case strings.HasPrefix(k, "inv:xfer:"):
				ns.xfers = append(ns.xfers, k)
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
		for id, f := range ns.orders {
			if f["moved"] != "" {
				continue // a record moved away by a topology change: dead here
			}
			v := view(id)
			v.recOn = append(v.recOn, name)
			if v.rec == nil || homes.Home(id) == name {
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
