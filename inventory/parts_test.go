package inventory

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/shardis/shardis/topology"
)

// Orders reserved by every path are written in layout 2 (parts.go), and a
// 1-item order's record stays a listpack hash on a real node. Before the
// compact part list, the JSON list made it a hash table; before the
// one-script path left out what it repeated, its record also held
// reserved_at (= created) and an empty user.
func TestOrderRecordCompactOnNode(t *testing.T) {
	e := newStagedEnv(t)
	one := []Item{{Route: "a", SKU: "s", Quantity: 1}}
	local, staged := 0, 0
	for i := 0; local == 0 || staged == 0; i++ {
		if i > 40 {
			t.Fatalf("no order id of 40 went both local (%d) and staged (%d)", local, staged)
		}
		id := fmt.Sprintf("compact-%d", i)
		if _, err := e.inv.Reserve(e.ctx, id, one, "", time.Hour); err != nil {
			t.Fatal(err)
		}
		home, _ := e.inv.orderHome(e.inv.topo.cur.Load(), id)
		c := e.clients[home.Name()]
		if home.Name() == "n1" {
			local++
			// reserved when created, no user: no reserved_at, no empty user
			keys := slices.Sorted(maps.Keys(orderFieldsOn(t, e.ctx, c, id)))
			if want := "[created deadline digest parts status token]"; fmt.Sprint(keys) != want {
				t.Errorf("local order %s holds fields %v; want %s", id, keys, want)
			}
		} else {
			staged++
		}
		blob := orderFieldsOn(t, e.ctx, c, id)["parts"]
		if !strings.HasPrefix(blob, partsLayout2) {
			t.Fatalf("order %s on %s: parts %q; want layout 2", id, home.Name(), blob)
		}
		if typ, err := c.Type(e.ctx, orderKey(id)).Result(); err != nil || typ != "string" {
			t.Errorf("order %s on %s: a %q, %v; want a string (orderrec.go)", id, home.Name(), typ, err)
		}
	}
}

// Records written before the upgrade (layout 1: the part list as JSON,
// exactly as the former code wrote it) are confirmed, cancelled, expired,
// retried and recovered (a staging record decided by a reader) by the
// new code, and the stock adds up.
func TestOrderRecordsLayout1Upgrade(t *testing.T) {
	t.Parallel()
	e := newStagedEnv(t)
	one := []Item{{Route: "a", SKU: "s", Quantity: 1}}
	reserve := func(id string, items []Item, ttl time.Duration) Reservation {
		t.Helper()
		res, err := e.inv.Reserve(e.ctx, id, items, "", ttl)
		if err != nil {
			t.Fatalf("Reserve %s: %v", id, err)
		}
		return res
	}
	type order = upgradeOrder
	var confirm, cancel, expire, retry []order
	for i := range 6 {
		items := one
		if i%2 == 1 {
			items = stagedItems()
		}
		confirm = append(confirm, order{id: fmt.Sprintf("old-confirm-%d", i), items: items})
		cancel = append(cancel, order{id: fmt.Sprintf("old-cancel-%d", i), items: items})
		expire = append(expire, order{id: fmt.Sprintf("old-expire-%d", i), items: items})
		retry = append(retry, order{id: fmt.Sprintf("old-retry-%d", i), items: items})
	}
	for _, set := range [][]order{confirm, cancel, retry} {
		for i := range set {
			set[i].res = reserve(set[i].id, set[i].items, time.Hour)
		}
	}
	for i := range expire {
		expire[i].res = reserve(expire[i].id, expire[i].items, stagedTTL)
	}
	// A staged attempt that died before its commit: its record is staging,
	// its promised parts (with incarnations) in layout 1.
	if _, err := e.reserveAtTTL("staged:before-commit", "old-staging", time.Hour); err == nil {
		t.Fatal("Reserve stopped before its commit succeeded")
	}
	all := append(append(append(append([]order(nil), confirm...), cancel...), expire...), retry...)
	for _, o := range append(all, order{id: "old-staging"}) {
		e.toLayout1(o.id)
	}

	for _, o := range confirm {
		if out, err := e.inv.Confirm(e.ctx, o.id); err != nil || out.Status != StatusConfirmed || out.PendingParts != 0 {
			t.Fatalf("Confirm %s: %+v, %v", o.id, out, err)
		}
	}
	for _, o := range cancel {
		if out, err := e.inv.Cancel(e.ctx, o.id); err != nil || out.Status != StatusCancelled || out.PendingParts != 0 {
			t.Fatalf("Cancel %s: %+v, %v", o.id, out, err)
		}
	}
	for _, o := range retry {
		res, err := e.inv.Reserve(e.ctx, o.id, o.items, "", time.Hour)
		if err != nil || fmt.Sprint(res.Receipts) != fmt.Sprint(o.res.Receipts) {
			t.Fatalf("retry of %s: %+v, %v; want the receipts %+v", o.id, res.Receipts, err, o.res.Receipts)
		}
	}
	time.Sleep(stagedLease + 50*time.Millisecond)
	if out, err := e.inv.Confirm(e.ctx, "old-staging"); err != nil || out.Status != StatusConfirmed {
		t.Fatalf("Confirm of the staging record: %+v, %v", out, err)
	}
	time.Sleep(stagedTTL)
	e.expireAllBut(retry)

	for _, o := range confirm {
		e.verify(o.id, "confirmed")
	}
	for _, o := range cancel {
		e.verify(o.id, "cancelled")
	}
	for _, o := range expire {
		e.verify(o.id, "cancelled")
	}
	for _, o := range retry {
		e.verify(o.id, "reserved")
	}
	e.verify("old-staging", "confirmed")
	e.stock()
}

// toLayout1 rewrites order id's part list on its home node in layout 1,
// the JSON list the code before layout 2 wrote (which wrote a record for
// every part: so does this, for an inline part).
func (e *stagedEnv) toLayout1(id string) {
	e.t.Helper()
	home, _ := e.inv.orderHome(e.inv.topo.cur.Load(), id)
	c := e.clients[home.Name()]
	writeInlineRecords(e.t, e.ctx, c, home.Name(), id)
	blob := orderFieldsOn(e.t, e.ctx, c, id)["parts"]
	if !strings.HasPrefix(blob, partsLayout2) {
		e.t.Fatalf("order %s: parts %q; want layout 2", id, blob)
	}
	parts, err := DecodeOrderParts(id, blob)
	if err != nil || len(parts) == 0 {
		e.t.Fatalf("order %s: %v, %v", id, parts, err)
	}
	old := encodeOrderPartsJSON(parts)
	if !strings.HasPrefix(old, `[{"p":"`+id+"|") {
		e.t.Fatalf("layout 1 of %s: %s", id, old)
	}
	setOrderFields(e.t, e.ctx, c, id, map[string]string{"parts": old})
}

// upgradeOrder is an order of TestOrderRecordsLayout1Upgrade.
type upgradeOrder struct {
	id    string
	items []Item
	res   Reservation
}

// expireAllBut runs the reconciler's step on every due part until only
// the parts of the keep orders (due later) are pending.
func (e *stagedEnv) expireAllBut(keep []upgradeOrder) {
	e.t.Helper()
	want := 0
	for _, o := range keep {
		want += len(o.res.Receipts)
	}
	e.expireUntilPending(want)
}

// expireUntilPending runs the reconciler's step on every due part until
// want parts (due later) are pending.
func (e *stagedEnv) expireUntilPending(want int) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := 0
		for _, n := range e.inv.Nodes() {
			due, err := e.inv.DueParts(e.ctx, n, 100)
			if err != nil {
				e.t.Fatal(err)
			}
			for _, p := range due {
				if _, err := e.inv.ResolveExpired(e.ctx, p); err != nil {
					e.t.Fatalf("ResolveExpired %+v: %v", p, err)
				}
			}
			c, _ := e.clients[n.Name()].ZCard(e.ctx, PendingKey).Result()
			left += int(c)
		}
		if left == want {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%d parts still pending 10s later, want %d", left, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Any part list round-trips through the encoder and the decoder (layout 2,
// or layout 1 where layout 2 cannot carry it), and the decoder never
// panics on what a node may hold.
func FuzzOrderPartsRoundTrip(f *testing.F) {
	f.Add("o-1", "ab12", "n1", "r", "x:1", "", int64(2), 0, 5, int64(7), false)
	f.Add("o|1", "t", "n2", "r", "s|k", "0123456789abcdef", int64(1), -1, 0, int64(0), true)
	f.Add("o", "~", "n", "r", "\x1e", "", int64(1), 3, 17, int64(1), false)
	f.Fuzz(func(t *testing.T, order, token, node, route, sku, inc string, qty int64, item, queue int, offset int64, odd bool) {
		if !validUTF8(order, token, node, route, sku, inc) {
			t.Skip("ids are valid UTF-8 (idProblem); layout 1, the fallback, is JSON")
		}
		p := OrderPart{Kind: PartStock, Item: item, Node: node, Route: route, SKU: sku, Qty: qty, Offset: offset, Incarnation: inc}
		if item < 0 {
			p.Kind, p.Offset = PartQuota, 0
		} else if queue >= 0 {
			p.Redo = RedoLogKey(queue)
		}
		p.ID = derivedPartID(order, token, p)
		if odd {
			p.ID += "|x"
		}
		for _, id := range []string{p.ID, p.ID + "0", "|" + p.ID, p.ID[:len(p.ID)/2]} {
			q := p
			q.ID = id
			if got, want := isDerivedPartID(order, token, q), id == derivedPartID(order, token, q); got != want {
				t.Fatalf("isDerivedPartID(%q, %q, id %q) = %v, want %v", order, token, id, got, want)
			}
		}
		parts := []OrderPart{p, p}
		parts[1].Qty++
		if got, want := encodeOrderParts(order, token, parts), encodeOrderPartsJoined(order, token, parts); got != want {
			t.Fatalf("encodeOrderParts(%+v) = %q, want %q (layout2Entry's fields joined)", parts, got, want)
		}
		got, err := unmarshalOrderParts(order, encodeOrderParts(order, token, parts))
		if err != nil || !reflect.DeepEqual(got, parts) {
			t.Fatalf("round trip of %+v: %+v, %v", parts, got, err)
		}
		_, _ = DecodeOrderParts(order, "~"+token+"\x1e"+sku)
	})
}

// encodeOrderPartsJoined is encodeOrderParts spelled out from
// layout2Entry: the list it must write, byte for byte.
func encodeOrderPartsJoined(orderID, token string, parts []OrderPart) string {
	if strings.ContainsAny(token, partsRS+partsUS) {
		return encodeOrderPartsJSON(parts)
	}
	s := partsLayout2 + token
	for _, p := range parts {
		fields, ok := layout2Entry(orderID, token, p)
		if !ok {
			return encodeOrderPartsJSON(parts)
		}
		s += partsRS + strings.Join(fields[:], partsUS)
	}
	return s
}

func validUTF8(ss ...string) bool {
	for _, s := range ss {
		if !utf8.ValidString(s) {
			return false
		}
	}
	return true
}

// Pending orders in layout 1 whose home a topology change moves are moved
// as they are, then confirmed and cancelled on their new home by the new
// code; the stock adds up.
func TestLayout1RecordsMoveWithTopology(t *testing.T) {
	t.Parallel() // its own nodes
	e := newMigrateEnv(t)
	ids := e.reserveMoving(e.open(e.old), "l1", 2)
	oh, _ := NewHomes(e.old)
	for _, id := range ids {
		c := e.clients[oh.Home(id)]
		writeInlineRecords(t, e.ctx, c, oh.Home(id), id) // as the code before layout 2 wrote them
		blob := orderFieldsOn(t, e.ctx, c, id)["parts"]
		parts, derr := DecodeOrderParts(id, blob)
		if derr != nil || !strings.HasPrefix(blob, partsLayout2) {
			t.Fatalf("order %s: parts %q, %v", id, blob, derr)
		}
		setOrderFields(t, e.ctx, c, id, map[string]string{"parts": encodeOrderPartsJSON(parts)})
	}
	if rep, err := e.apply(); err != nil || rep.Phase != topology.PhaseStable {
		t.Fatalf("apply = %+v, %v", rep, err)
	}
	for _, id := range ids {
		if blob := orderFieldsOn(t, e.ctx, e.clients["n4"], id)["parts"]; !strings.HasPrefix(blob, "[") {
			t.Fatalf("order %s on n4 after the move: parts %q; want layout 1", id, blob)
		}
	}
	e.settleMoved(ids)
}

// canonicalInt accepts exactly what strconv.Itoa writes for a queue
// number (redoQueueNumber's check).
func TestCanonicalInt(t *testing.T) {
	for _, s := range []string{"0", "7", "49", "1023", "123456789012345678", "", "00", "07", "-1", "+1", "1a", " 1",
		"1234567890123456789", "٣"} {
		n, err := strconv.Atoi(s)
		want := err == nil && n >= 0 && strconv.Itoa(n) == s && len(s) <= 18
		if got := canonicalInt(s); got != want {
			t.Errorf("canonicalInt(%q) = %v, want %v", s, got, want)
		}
	}
}

// layout2Entry is part p's fields in the layout 2 list of attempt token
// (the oracle of appendLayout2Entry, spelled out field by field)
// of orderID, or false when layout 2 cannot carry it exactly (a stock
// part whose Redo is not a [RedoLogKey], a field holding a separator).
func layout2Entry(orderID, token string, p OrderPart) ([partsFields]string, bool) {
	queue := ""
	if p.Redo != "" {
		q, ok := redoQueueNumber(p.Redo)
		if !ok {
			return [partsFields]string{}, false
		}
		queue = q
	}
	id := p.ID
	if isDerivedPartID(orderID, token, p) {
		id = ""
	}
	off := ""
	if p.Offset != 0 {
		off = strconv.FormatInt(p.Offset, 10)
	}
	fields := [partsFields]string{string(p.Kind), strconv.Itoa(p.Item), p.Node, p.Route, p.SKU,
		strconv.FormatInt(p.Qty, 10), queue, off, p.Incarnation, id}
	for _, f := range fields {
		if strings.ContainsAny(f, partsRS+partsUS) {
			return fields, false
		}
	}
	return fields, true
}

// withOffsets writes, from a promised list and the parts taken (in any
// order, each with its offset), what encodeOrderParts writes for the taken
// parts in the promised order; it refuses a taken set that is not the
// promised parts with offsets, and a list in layout 1.
func TestWithOffsetsAsEncoded(t *testing.T) {
	const id, token = "o-1", "tok"
	stock := func(i int, node, sku string) OrderPart {
		return OrderPart{ID: stockPartID(id, token, i), Node: node, Kind: PartStock, Item: i, Route: "r" + node, SKU: sku, Qty: int64(i + 1),
			Redo: RedoLogKey(7 + i), Incarnation: "inc-" + node}
	}
	quota := OrderPart{ID: quotaPartID(id, token, "rn1", "s0"), Node: "n3", Kind: PartQuota, Item: -1, Route: "rn1", SKU: "s0", Qty: 1}
	odd := stock(3, "n2", "s3")
	odd.ID = "another-id" // not the derived one: written into the entry
	lists := [][]OrderPart{
		{stock(0, "n1", "s0")},
		{stock(0, "n1", "s0"), stock(1, "n2", "s1"), stock(2, "n3", "s2")},
		{stock(0, "n1", "s0"), quota, odd},
	}
	for _, promised := range lists {
		blob, holes := encodeOrderPartsHoles(id, token, promised, nil)
		taken := slices.Clone(promised)
		slices.Reverse(taken) // the takes come back in any order
		for i := range taken {
			if taken[i].Kind == PartStock {
				taken[i].Offset = int64(100 + i)
			}
		}
		got, ok := withOffsets(blob, holes, promised, taken)
		inOrder := make([]OrderPart, 0, len(promised))
		for _, p := range promised {
			inOrder = append(inOrder, taken[slices.IndexFunc(taken, func(q OrderPart) bool { return q.ID == p.ID })])
		}
		if want := encodeOrderParts(id, token, inOrder); !ok || got != want {
			t.Errorf("withOffsets of %v: %q (%v), want %q", promised, got, ok, want)
		}
		back, err := DecodeOrderParts(id, got)
		if err != nil || !reflect.DeepEqual(back, inOrder) {
			t.Errorf("withOffsets of %v decodes as %v (%v), want %v", promised, back, err, inOrder)
		}
		// not the promised parts with offsets: refused
		short := taken[1:]
		more := append(slices.Clone(taken), stock(5, "n1", "s5"))
		changed := slices.Clone(taken)
		changed[0].Qty++
		other := slices.Clone(taken)
		other[0] = stock(6, "n1", "s6")
		for name, tk := range map[string][]OrderPart{"a part missing": short, "a part more": more, "a quantity changed": changed, "another part": other} {
			if got, ok := withOffsets(blob, holes, promised, tk); ok {
				t.Errorf("withOffsets of %v with %s: %q, want refused", promised, name, got)
			}
		}
	}
	// layout 1 (a token holding a separator) has no holes: refused
	promised := lists[0]
	blob, holes := encodeOrderPartsHoles(id, "t\x1fk", promised, nil)
	if got, ok := withOffsets(blob, holes, promised, promised); ok || holes != nil {
		t.Errorf("withOffsets of a layout 1 list: %q (%v), holes %v, want refused", got, ok, holes)
	}
}
