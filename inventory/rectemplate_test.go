package inventory

import (
	"errors"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fillOrder is what localScript and stageTakeScript do with an order
// record's template: created into the first hole, each offset (empty for
// 0) into the next.
func fillOrder(pieces []string, created int64, offsets ...int64) string {
	s := pieces[0] + strconv.FormatInt(created, 10) + pieces[1]
	for i, off := range offsets {
		if off != 0 {
			s += strconv.FormatInt(off, 10)
		}
		s += pieces[2+i]
	}
	return s
}

// fillPart is what part_new (lua/part_codec.lua) does with a part
// record's template.
func fillPart(a, b string, qty, offset, deadline, at int64) string {
	return a + strconv.FormatInt(qty, 10) + partUS + strconv.FormatInt(offset, 10) + b + strconv.FormatInt(deadline, 10) + partUS + strconv.FormatInt(at, 10)
}

// templateCase is an order of the one-script paths.
type templateCase struct {
	order, token, user string
	reqs               []partReq
}

func templateCases() []templateCase {
	stock := func(order, token string, item int, route, sku string, qty int64) partReq {
		return partReq{part: part{ID: stockPartID(order, token, item), Node: "n1", Kind: PartStock, Item: item, Route: route, SKU: sku, Qty: qty},
			queue: RedoLogKey(item + 7), ck: stockKey(route, sku)}
	}
	quota := func(order, token, route, sku, user string, qty int64) partReq {
		return partReq{part: part{ID: quotaPartID(order, token, route, sku), Node: "n1", Kind: PartQuota, Item: -1, Route: route, SKU: sku, Qty: qty},
			queue: stockKey(route, sku), ck: quotaKey(route, sku, user)}
	}
	return []templateCase{
		{"o-1", "tok", "", []partReq{stock("o-1", "tok", 0, "a", "s", 1)}},
		{"o-2", "Zm9v-_", "alice", []partReq{stock("o-2", "Zm9v-_", 0, "a", "tshirt:red", 3), quota("o-2", "Zm9v-_", "a", "tshirt:red", "alice", 3)}},
		{"o|x|1", "t", "u|{x}", []partReq{stock("o|x|1", "t", 0, "r1", "{sku}", 1), stock("o|x|1", "t", 1, "r2", "b", 2), stock("o|x|1", "t", 2, "r1", "c", 9)}},
		{"ø-7", "tt", "üser", []partReq{quota("ø-7", "tt", "a", "ʃkü", "üser", 1), stock("ø-7", "tt", 1, "a", "ʃkü", 1)}},
		// ids, keys and SKUs the references cannot reproduce: stored as
		// literals
		{"o-5", "tok", "", []partReq{
			{part: part{ID: "custom", Node: "n2", Kind: PartStock, Item: 0, Route: "a", SKU: "s", Qty: 4, Incarnation: "g1"}, queue: RedoLogKey(3), ck: "other:s"},
			{part: part{ID: "o-5|tok|x|1", Node: "n2", Kind: PartStock, Item: 1, Route: "a", SKU: "not-the-key's", Qty: 1}, queue: RedoLogKey(0), ck: stockKey("a", "s")},
			{part: part{ID: "o-5", Node: "n2", Kind: PartQuota, Item: -1, Route: "a", SKU: "s", Qty: 1}, queue: stockKey("a", "s"), ck: "=q"},
		}},
	}
}

// The templates are the Go codec's records with the node's values left
// out: filled in as the scripts fill them, each is byte for byte what
// packOrder and packPart write for the whole record (and the Lua codec,
// TestOrderCodecLuaMatchesGo and TestPartCodecLuaMatchesGo, writes the
// same). A field that holds a sentinel is refused before anything runs.
func TestRecordTemplates(t *testing.T) {
	const created, ttl, lease = int64(1795000000123), int64(600_000), int64(5_000)
	for _, c := range templateCases() {
		var parts []part
		var offsets []int64
		for i, r := range c.reqs {
			p := r.part
			var off int64
			if p.Kind == PartStock {
				p.Redo, off = r.queue, int64(41+i*1000)
			}
			parts = append(parts, p)
			offsets = append(offsets, off)
		}
		pieces, err := localOrderPieces(c.order, c.token, "digest", c.user, ttl, parts)
		if err != nil {
			t.Fatalf("%s: %v", c.order, err)
		}
		full := make([]part, len(parts))
		copy(full, parts)
		for i := range full {
			full[i].Offset = offsets[i]
		}
		want, err := packOrder(map[string]string{"status": "reserved", "token": c.token, "created": strconv.FormatInt(created, 10),
			"deadline": strconv.FormatInt(created+ttl, 10), "digest": "digest", "parts": encodeOrderParts(c.order, c.token, full), "user": c.user})
		if err != nil {
			t.Fatal(err)
		}
		if got := fillOrder(pieces, created, offsets...); got != want {
			t.Errorf("%s: the local record's template filled in is %q, the codec writes %q", c.order, got, want)
		}
		// a record that is long-lived and its created field long: other digits, same pieces
		if got := fillOrder(pieces, 7, offsets...); !strings.HasPrefix(got, pieces[0]+"7"+pieces[1]) {
			t.Errorf("%s: %q", c.order, got)
		}

		// the promised list as the staged path writes it, in JSON, none
		for _, promised := range []string{encodeOrderParts(c.order, c.token, parts), encodeOrderPartsJSON(parts), ""} {
			sp, err := stagingOrderPieces(c.token, "digest", c.user, ttl, lease, promised)
			if err != nil {
				t.Fatal(err)
			}
			want, err := packOrder(map[string]string{"status": "staging", "token": c.token, "created": strconv.FormatInt(created, 10),
				"deadline": strconv.FormatInt(created+ttl, 10), "digest": "digest", "parts": promised, "user": c.user,
				"lease": strconv.FormatInt(created+lease, 10)})
			if err != nil {
				t.Fatal(err)
			}
			if got := fillOrder(sp, created); got != want {
				t.Errorf("%s: the staging record's template filled in is %q, the codec writes %q", c.order, got, want)
			}
		}

		for i, r := range c.reqs {
			a, b, err := partTemplate(c.order, c.token, r)
			if err != nil {
				t.Fatal(err)
			}
			redo := ""
			if r.Kind == PartStock {
				redo = r.queue
			}
			f := map[string]string{"state": "pending", "kind": string(r.Kind), "qty": strconv.FormatInt(r.Qty, 10),
				"offset": strconv.FormatInt(offsets[i], 10), "redo": redo, "counter": r.ck, "sku": r.SKU,
				"item": strconv.Itoa(r.Item), "order": c.order, "token": c.token,
				"deadline": strconv.FormatInt(created+ttl+1000, 10), "at": strconv.FormatInt(created, 10)}
			if got, want := fillPart(a, b, r.Qty, offsets[i], created+ttl+1000, created), packPart(r.ID, f); got != want {
				t.Errorf("part %s: the template filled in is %q, the codec writes %q", r.ID, got, want)
			}
			maps.DeleteFunc(f, func(_, v string) bool { return v == "" })
			if back, err := unpackPartValue(r.ID, fillPart(a, b, r.Qty, offsets[i], created+ttl+1000, created)); err != nil || !maps.Equal(back, f) {
				t.Errorf("part %s reads back as %q, %v; want %q", r.ID, back, err, f)
			}
		}
	}
	// a control byte in a field, a list layout 2 cannot carry: refused
	bad := templateCases()[0]
	bad.reqs[0].SKU = "s\x1f"
	if _, _, err := partTemplate(bad.order, bad.token, bad.reqs[0]); !errors.Is(err, ErrInvalid) {
		t.Errorf("a part template with a control byte in its SKU: %v, want ErrInvalid", err)
	}
	if _, err := localOrderPieces("o", "t\x1d", "d", "", 1, []part{bad.reqs[0].part}); !errors.Is(err, ErrInvalid) {
		t.Errorf("an order template with a control byte in its token: %v, want ErrInvalid", err)
	}
	if _, err := localOrderPieces("o", "t", "d", "", 1, []part{{ID: "o|t|0", Node: "n1", Kind: PartStock, SKU: "s", Qty: 1, Redo: "elsewhere"}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("an order template with a part whose redo log is no queue: %v, want ErrInvalid", err)
	}
	if _, err := stagingOrderPieces("t", "d", "", 1, 1, "~t"+partsRS+orderGS); !errors.Is(err, ErrInvalid) {
		t.Errorf("a staging template with a GS in its part list: %v, want ErrInvalid", err)
	}
}

// What the one-script paths store on a real node is the codec's record
// (packOrder and packPart write the same bytes for the fields read back)
// with the node's values: a local reserve's record reserved, created by
// the node's clock, deadline created+ttl, the parts with their offsets; a
// stage's record staging with its lease; each part pending, due at the
// order's deadline plus partGrace (local) or the stage's hold, at the
// node's clock.
func TestOneScriptRecordsAsCodec(t *testing.T) {
	e := newStagedEnv(t) // route a on n1 alone
	inv, c, ctx := e.inv, e.clients["n1"], e.ctx
	if _, err := inv.LoadStock(ctx, "a", "t", 100, 0); err != nil {
		t.Fatal(err)
	}
	readOrder := func(id string) (string, map[string]string) {
		t.Helper()
		raw, err := c.Get(ctx, orderKey(id)).Result()
		if err != nil {
			t.Fatalf("order %s: %v", id, err)
		}
		f, err := unpackOrderValue(raw)
		if err != nil {
			t.Fatalf("order %s: %v", id, err)
		}
		if again, err := packOrder(f); err != nil || again != raw {
			t.Errorf("order %s holds %q; the codec writes %q for its fields (%v)", id, raw, again, err)
		}
		return raw, f
	}
	checkPart := func(id string, want map[string]string) {
		t.Helper()
		raw, err := c.Get(ctx, partKey(id)).Result()
		if err != nil {
			t.Fatalf("part %s: %v", id, err)
		}
		f, err := unpackPartValue(id, raw)
		if err != nil {
			t.Fatalf("part %s: %v", id, err)
		}
		if again := packPart(id, f); again != raw {
			t.Errorf("part %s holds %q; the codec writes %q for its fields", id, raw, again)
		}
		for k, v := range want {
			if f[k] != v {
				t.Errorf("part %s: %s = %q, want %q (record %q)", id, k, f[k], v, f)
			}
		}
	}
	const ttl = 10 * time.Minute
	items := []Item{{Route: "a", SKU: "s", Quantity: 2}, {Route: "a", SKU: "t", Quantity: 1}}
	for _, user := range []string{"", "alice"} {
		id, err := inv.NewOrderID(ctx, items...)
		if err != nil {
			t.Fatal(err)
		}
		res, err := inv.Reserve(ctx, id, items, user, ttl)
		if err != nil {
			t.Fatal(err)
		}
		_, f := readOrder(id)
		created, _ := strconv.ParseInt(f["created"], 10, 64)
		deadline, _ := strconv.ParseInt(f["deadline"], 10, 64)
		if f["status"] != "reserved" || deadline != created+ttl.Milliseconds() || deadline != res.Deadline.UnixMilli() || f["user"] != user {
			t.Errorf("local order %s (user %q): record %q, reservation deadline %v", id, user, f, res.Deadline)
		}
		parts, err := DecodeOrderParts(id, f["parts"])
		if err != nil {
			t.Fatal(err)
		}
		nq := 0
		for _, p := range parts {
			if p.Kind == PartQuota {
				nq++
			}
		}
		if len(parts) != len(items)+nq || len(res.Receipts) != len(items) {
			t.Fatalf("order %s: parts %+v, receipts %+v", id, parts, res.Receipts)
		}
		// its stock parts are inline (inline.go): no key until inline_write,
		// which a decision runs first, writes their records
		for _, p := range parts {
			if n := c.Exists(ctx, partKey(p.ID)).Val(); (n == 0) != (p.Kind == PartStock) {
				t.Errorf("order %s: part %+v has %d keys; want none for a stock part (inline), one for a quota part", id, p, n)
			}
		}
		n1, _ := e.r.Node("n1")
		if _, err := inv.run(ctx, n1, inlineWriteScript, []string{orderKey(id)}); err != nil {
			t.Fatal(err)
		}
		for _, p := range parts {
			want := map[string]string{"state": "pending", "order": id, "token": f["token"], "qty": strconv.FormatInt(p.Qty, 10),
				"deadline": strconv.FormatInt(deadline+partGrace.Milliseconds(), 10), "at": f["created"]}
			if p.Kind == PartStock {
				want["offset"], want["redo"] = strconv.FormatInt(p.Offset, 10), p.Redo
				if p.Offset <= 0 {
					t.Errorf("order %s: stock part %+v without an offset", id, p)
				}
			}
			checkPart(p.ID, want)
		}
		if user != "" && nq != len(items) {
			t.Errorf("order %s of user %s: %d quota parts, want %d", id, user, nq, len(items))
		}
	}

	// a stage on its own (the one-round path's first step)
	home, _ := e.r.Node("n1")
	token := newToken()
	id := "staged-1"
	r := partReq{part: part{ID: stockPartID(id, token, 0), Node: "n1", Kind: PartStock, Item: 0, Route: "a", SKU: "s", Qty: 1},
		queue: inv.redoQueue("a", "s"), ck: stockKey("a", "s")}
	promised := encodeOrderParts(id, token, []part{r.part})
	_, st, err := inv.stageAndTake(ctx, id, token, stagedCall{home: home, due: partDue{hold: time.Minute}, ttl: ttl, digest: "dg",
		promised: promised, reqs: []partReq{r}}, nil)
	if err != nil || st.status != stageStaged {
		t.Fatalf("stage: %+v, %v", st, err)
	}
	_, f := readOrder(id)
	created, _ := strconv.ParseInt(f["created"], 10, 64)
	if f["status"] != "staging" || f["token"] != token || f["digest"] != "dg" || f["parts"] != promised ||
		f["deadline"] != strconv.FormatInt(created+ttl.Milliseconds(), 10) ||
		f["lease"] != strconv.FormatInt(created+inv.opts.AttemptLease.Milliseconds(), 10) {
		t.Errorf("staged order: record %q", f)
	}
	checkPart(r.ID, map[string]string{"state": "pending", "order": id, "token": token, "offset": strconv.FormatInt(st.offsets[0], 10),
		"deadline": strconv.FormatInt(created+time.Minute.Milliseconds(), 10), "at": f["created"]})
}

// BenchmarkRecordTemplates is the client's cost of a local 1-item order's
// templates: the order record's and the part record's.
func BenchmarkRecordTemplates(b *testing.B) {
	c := templateCases()[0]
	p := c.reqs[0].part
	p.Redo = c.reqs[0].queue
	parts := []part{p}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := localOrderPieces(c.order, c.token, "digest", "", 600_000, parts); err != nil {
			b.Fatal(err)
		}
		if _, _, err := partTemplate(c.order, c.token, c.reqs[0]); err != nil {
			b.Fatal(err)
		}
	}
}

// localOrderPieces is appendLocalOrderPieces' pieces as strings.
func localOrderPieces(orderID, token, digest, userID string, ttl int64, parts []OrderPart) ([]string, error) {
	buf, ends, err := appendLocalOrderPieces(nil, nil, orderID, token, digest, userID, ttl, parts)
	if err != nil {
		return nil, err
	}
	s, start := string(buf), 0
	pieces := make([]string, len(ends))
	for i, end := range ends {
		pieces[i], start = s[start:end], end
	}
	return pieces, nil
}

// stagingOrderPieces is appendStagingOrderPieces' two pieces as strings:
// the record is pieces[0] .. CREATED .. pieces[1].
func stagingOrderPieces(token, digest, userID string, ttl, lease int64, promised string) ([]string, error) {
	b, cut, err := appendStagingOrderPieces(nil, token, digest, userID, ttl, lease, promised)
	if err != nil {
		return nil, err
	}
	s := string(b)
	return []string{s[:cut], s[cut:]}, nil
}

// partTemplate is appendPartTemplate's pieces a and b as strings.
func partTemplate(orderID, token string, r partReq) (a, b string, err error) {
	buf, cut, err := appendPartTemplate(nil, orderID, token, r)
	if err != nil {
		return "", "", err
	}
	s := string(buf)
	return s[:cut], s[cut:], nil
}

// TestControlIn holds the eight-bytes-at-a-time check against the plain
// loop: every byte value at every position of strings of 0 to 20 bytes,
// among bytes just above the bound (0x20) and high ones (0x80, 0xff),
// whose borrows and high bits are what the word test must not misread.
func TestControlIn(t *testing.T) {
	plain := func(v string) bool {
		for i := 0; i < len(v); i++ {
			if v[i] < 0x20 {
				return true
			}
		}
		return false
	}
	for _, fill := range []byte{0x20, 0x21, 0x7f, 0x80, 0xa0, 0xff} {
		for n := 0; n <= 20; n++ {
			base := strings.Repeat(string([]byte{fill}), n)
			if controlIn(base) {
				t.Fatalf("controlIn(%d × %#x) = true", n, fill)
			}
			for pos := 0; pos < n; pos++ {
				for b := 0; b < 256; b++ {
					v := []byte(base)
					v[pos] = byte(b)
					if got, want := controlIn(string(v)), plain(string(v)); got != want {
						t.Fatalf("controlIn(%q) = %v, want %v", v, got, want)
					}
				}
			}
		}
	}
}
