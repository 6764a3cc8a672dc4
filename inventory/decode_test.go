package inventory

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The decoders read the keys the package's own constructors name.
func TestParseKeyReadsTheConstructors(t *testing.T) {
	for _, c := range []struct {
		key  string
		kind KeyKind
		rest string
	}{
		{stockKey("clothes", "sku:1"), KeyStock, "clothes:sku:1"},
		{StockKey("r", "x"), KeyStock, "r:x"},
		{quotaKey("r", "X:", "9"), KeyQuota, "r:2:X::9"},
		{partKey(stockPartID("o|1", "ab12", 3)), KeyPart, "o|1|ab12|3"},
		{partKey(quotaPartID("o", "t", "r", "s")), KeyPart, "o|t|q|r|s"},
		{orderKey("o:1"), KeyOrder, "o:1"},
		{RedoLogKey(0), KeyRedoLog, "0"},
		{RedoLogKey(17), KeyRedoLog, "17"},
		{redoSegmentKey(RedoLogKey(17), 1234), KeyRedoSegment, "17:s38"},
		{redoSegmentKey(RedoLogKey(0), 5), KeyRedoSegment, "0:s0"},
		{redoSegmentKeyV1(RedoLogKey(17), 1234), KeyRedoSegment, "17:12"},
		{redoSegmentKeyV1(RedoLogKey(0), 5), KeyRedoSegment, "0:0"},
		{RedoOffsetsKey, KeyRedoOffsets, ""},
		{keyRedoAcked, KeyRedoAcked, ""},
		{PendingKey, KeyPending, ""},
		{keyStuck, KeyStuck, ""},
		{keyStuckWhy, KeyStuckWhy, ""},
		{keyStuckRetry, KeyStuckRetry, ""},
		{keyLimitsTodo, KeyLimitsTodo, ""},
		{SettledLogKey, KeySettledLog, ""},
		{xferKey(xferID(3, xferStock, "n3", stockKey("r", "x"))), KeyTransfer, "3|stock|n3|inv:stock:r:x"},
		{xferMarkerKey("3|quota|k"), KeyTransferMarker, "3|quota|k"},
		{removedKey("r:1"), KeyRouteRemoved, "r:1"},
	} {
		kind, rest := ParseKey(c.key)
		if kind != c.kind || rest != c.rest {
			t.Errorf("ParseKey(%q) = %v, %q; want %v, %q", c.key, kind, rest, c.kind, c.rest)
		}
	}
	for _, k := range []string{"", "inv:", "inv:part:", "inv:order:", "inv:redo:", "inv:redo:x", "inv:redo:01",
		"inv:redo:-1", "inv:stock:nocolon", "inv:stock::x", "inv:quota:r:5:abc:u", "inv:other", "shardis:node",
		"inv:reconcile:lease", "inv:redo:3:", "inv:redo:3:x", "inv:redo:3:01", "inv:redo:3:-1", "inv:redo:x:3", "inv:redo::3",
		"inv:redo:3:s", "inv:redo:3:ss1", "inv:removed:", "inv:redo:3:s01", "inv:redo:3:s-1", "inv:redo:3:S1"} {
		if kind, rest := ParseKey(k); kind != KeyOther || rest != "" {
			t.Errorf("ParseKey(%q) = %v, %q; want other", k, kind, rest)
		}
	}
	if s := KeyTransferMarker.String(); s != "transfer-marker" {
		t.Errorf("String() = %q", s)
	}
}

func TestParseStockAndQuotaKey(t *testing.T) {
	route, sku, err := ParseStockKey(stockKey("r", "a:b"))
	if err != nil || route != "r" || sku != "a:b" {
		t.Errorf("ParseStockKey = %q, %q, %v", route, sku, err)
	}
	route, sku, user, err := ParseQuotaKey(quotaKey("r", "X", ":9"))
	if err != nil || route != "r" || sku != "X" || user != ":9" {
		t.Errorf("ParseQuotaKey = %q, %q, %q, %v", route, sku, user, err)
	}
	if _, _, err := ParseStockKey("inv:quota:r:x"); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "inv:quota:r:x") {
		t.Errorf("ParseStockKey of a quota key: %v", err)
	}
	if _, _, _, err := ParseQuotaKey("inv:quota:r:x:a:b"); !errors.Is(err, ErrCorrupt) {
		t.Errorf("ParseQuotaKey of a malformed key: %v", err)
	}
}

// orderParts builds a part list the way the reserve paths do (take.go).
func orderParts() []part {
	return []part{
		{ID: stockPartID("o-1", "ab12", 0), Node: "n1", Kind: "s", Item: 0, Route: "r", SKU: "x:1", Qty: 2, Redo: RedoLogKey(5), Offset: 7},
		{ID: quotaPartID("o-1", "ab12", "r", "x:1"), Node: "n2", Kind: "q", Item: -1, Route: "r", SKU: "x:1", Qty: 2},
	}
}

// The exported decoder reads exactly what the inventory writes, and the
// wire format is the stored one (layout 2, parts.go): the token once, no
// order id, no derived part id.
func TestOrderPartsRoundTrip(t *testing.T) {
	parts := orderParts()
	blob := encodeOrderParts("o-1", "ab12", parts)
	const want = "~ab12\x1es\x1f0\x1fn1\x1fr\x1fx:1\x1f2\x1f5\x1f7\x1f\x1f" +
		"\x1eq\x1f-1\x1fn2\x1fr\x1fx:1\x1f2\x1f\x1f\x1f\x1f"
	if blob != want {
		t.Fatalf("wire format changed:\n got %q\nwant %q", blob, want)
	}
	got, err := DecodeOrderParts("o-1", blob)
	if err != nil || !reflect.DeepEqual(got, parts) {
		t.Fatalf("DecodeOrderParts = %+v, %v; want %+v", got, err, parts)
	}
	// Layout 1, what records written before the upgrade hold, still
	// reads: the encoder's JSON, and local.go's former cjson (any key
	// order).
	if got, err := DecodeOrderParts("o-1", encodeOrderPartsJSON(parts)); err != nil || !reflect.DeepEqual(got, parts) {
		t.Errorf("layout 1: %+v, %v", got, err)
	}
	cj := `[{"q":2,"k":"s","o":7,"i":0,"l":"inv:redo:5","n":"n1","s":"x:1","r":"r","p":"o-1|ab12|0"}]`
	if got, err := DecodeOrderParts("o-1", cj); err != nil || !reflect.DeepEqual(got, parts[:1]) {
		t.Errorf("cjson list: %+v, %v", got, err)
	}
	// A staged attempt's promised parts have no offsets yet, and carry the
	// node's incarnation; a part id the token does not derive is kept.
	promised := append([]part(nil), parts...)
	promised[0].Offset, promised[0].Incarnation = 0, "0123456789abcdef"
	promised[1].ID = "o-1|other|q|r|x:1"
	if got, err := DecodeOrderParts("o-1", encodeOrderParts("o-1", "ab12", promised)); err != nil || !reflect.DeepEqual(got, promised) {
		t.Errorf("promised parts: %+v, %v", got, err)
	}
	// A list layout 2 cannot carry exactly is written as layout 1.
	odd := []part{{ID: "o-1|ab12|0", Node: "n1", Kind: "s", Route: "r", SKU: "x", Qty: 1, Redo: "inv:redo:07", Offset: 1}}
	if b := encodeOrderParts("o-1", "ab12", odd); !strings.HasPrefix(b, "[") {
		t.Errorf("redo key %q not written as layout 1: %q", odd[0].Redo, b)
	}
	if got, err := DecodeOrderParts("o-1", ""); got != nil || err != nil {
		t.Errorf(`DecodeOrderParts("") = %v, %v`, got, err)
	}
	if got, err := DecodeOrderParts("o-1", encodeOrderParts("o-1", "ab12", nil)); got != nil || err != nil {
		t.Errorf("no parts: %v, %v", got, err)
	}
}

// A 1-item order's part list fits a listpack hash value (64 bytes, Redis's
// default hash-max-listpack-value) with ids of the bench's length:
// layout 1 did not (about 110 bytes), which made every order record a
// hash table of about 755 bytes instead of 264 (parts.go).
func TestOrderPartsFitListpack(t *testing.T) {
	p := []part{{ID: stockPartID("order-000123", "0a1b2c3d4e5f", 0), Node: "node-3", Kind: PartStock, Route: "sale", SKU: "sku-000042",
		Qty: 1, Redo: RedoLogKey(13), Offset: 123456}}
	if b := encodeOrderParts("order-000123", "0a1b2c3d4e5f", p); len(b) > 64 {
		t.Errorf("a 1-item part list is %d bytes, over 64: %q", len(b), b)
	}
}

func TestDecodeOrderPartsRejects(t *testing.T) {
	for _, c := range []struct{ blob, field string }{
		{`[{"p":"a"`, "parts"},
		{`{}`, "parts"},
		{`[{"p":"a","n":"n1","k":"s","i":"0","q":1}]`, "parts"},
		{`[{"n":"n1","k":"q","i":-1,"q":1}]`, "p (part id)"},
		{`[{"p":"a","k":"q","i":-1,"q":1}]`, "n (node)"},
		{`[{"p":"a","n":"n1","k":"x","q":1}]`, "k (kind)"},
		{`[{"p":"a","n":"n1","k":"q","i":-1,"q":0}]`, "q (quantity)"},
		{`[{"p":"a","n":"n1","k":"s","i":-1,"q":1,"l":"inv:redo:1","o":1}]`, "i (item)"},
		{`[{"p":"a","n":"n1","k":"s","i":0,"q":1,"l":"inv:pending","o":1}]`, "l (redo log)"},
		{`[{"p":"a","n":"n1","k":"s","i":0,"q":1,"l":"inv:redo:1","o":-1}]`, "o (offset)"},
		{`[{"p":"a","n":"n1","k":"q","i":-1,"q":1,"o":3}]`, "quota part"},
	} {
		_, err := DecodeOrderParts("a", c.blob)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("DecodeOrderParts(%s) = %v; want an error naming %s", c.blob, err, c.field)
		}
	}
}

func stockPartFields() map[string]string {
	return map[string]string{"state": "pending", "kind": "s", "order": "o|1", "token": "ab12", "sku": "x",
		"qty": "2", "item": "0", "counter": stockKey("r", "x"), "redo": RedoLogKey(3), "offset": "4",
		"deadline": "1700000001000", "at": "1700000000000"}
}

func TestDecodePart(t *testing.T) {
	id := stockPartID("o|1", "ab12", 0)
	p, err := DecodePart(id, stockPartFields())
	want := PartRecord{ID: id, State: PartPending, Kind: PartStock, Order: "o|1", Token: "ab12", SKU: "x", Qty: 2,
		Counter: "inv:stock:r:x", Redo: "inv:redo:3", Offset: 4, Deadline: time.UnixMilli(1700000001000), At: time.UnixMilli(1700000000000)}
	if err != nil || !reflect.DeepEqual(p, want) {
		t.Fatalf("DecodePart = %+v, %v; want %+v", p, err, want)
	}
	qid := quotaPartID("o", "t", "r", "x")
	q, err := DecodePart(qid, map[string]string{"state": "confirmed", "kind": "q", "order": "o", "token": "t", "sku": "x",
		"qty": "1", "item": "-1", "counter": quotaKey("r", "x", "u"), "redo": "", "offset": "0", "settled_at": "5"})
	if err != nil || q.Kind != PartQuota || q.State != PartConfirmed || q.Item != -1 || !q.SettledAt.Equal(time.UnixMilli(5)) {
		t.Errorf("quota part: %+v, %v", q, err)
	}
	// A settled stock part with no place: SettleStuckLost's record of a
	// part whose record was lost; a pending one needs its place.
	placeless := stockPartFields()
	placeless["state"], placeless["settled_at"] = "cancelled", "7"
	delete(placeless, "redo")
	delete(placeless, "offset")
	if pl, err := DecodePart(id, placeless); err != nil || pl.Redo != "" || pl.Offset != 0 || pl.State != PartCancelled {
		t.Errorf("settled stock part without a place: %+v, %v", pl, err)
	}
	placeless["state"] = "pending"
	if _, err := DecodePart(id, placeless); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "redo") {
		t.Errorf("pending stock part without a place: %v; want ErrCorrupt naming redo", err)
	}
	// A tombstone (scripts.go settle): its token comes from the id.
	tomb, err := DecodePart(id, map[string]string{"state": "cancelled", "qty": "0", "order": "o|1", "tombstone": "1", "at": "9"})
	if err != nil || !tomb.Tombstone || tomb.Token != "ab12" || tomb.Order != "o|1" || tomb.Kind != "" {
		t.Errorf("tombstone: %+v, %v", tomb, err)
	}
}

func TestDecodePartRejects(t *testing.T) {
	id := stockPartID("o|1", "ab12", 0)
	for _, c := range []struct{ field, value, named string }{
		{"state", "done", "state"},
		{"state", "", "state"},
		{"qty", "x", "qty"},
		{"qty", "-1", "qty"},
		{"item", "1.5", "item"},
		{"offset", "", "offset"},
		{"deadline", "soon", "deadline"},
		{"at", "1e3", "at"},
		{"order", "o", "order"},
		{"order", "", "order"},
		{"token", "zz", "token"},
		{"token", "", "token"},
		{"kind", "x", "kind"},
		{"kind", "q", "counter"},
		{"counter", "inv:stock:nocolon", "counter"},
		{"redo", "inv:redo:x", "redo"},
		{"tombstone", "yes", "tombstone"},
		{"tombstone", "1", "qty"},
	} {
		f := stockPartFields()
		f[c.field] = c.value
		_, err := DecodePart(id, f)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.named) || !strings.Contains(err.Error(), partKey(id)) {
			t.Errorf("%s=%q: %v; want an error naming %s and the key", c.field, c.value, err, c.named)
		}
	}
}

func TestDecodeOrder(t *testing.T) {
	parts := orderParts()
	f := map[string]string{"status": "confirmed", "token": "ab12", "user": "u", "deadline": "1700000000000",
		"reason": "confirmed", "parts": encodeOrderParts("o-1", "ab12", parts), "digest": "d"}
	r, err := DecodeOrder("o-1", f)
	want := OrderRecord{ID: "o-1", Status: "confirmed", Token: "ab12", User: "u", Reason: "confirmed",
		Deadline: time.UnixMilli(1700000000000), Parts: parts}
	if err != nil || !reflect.DeepEqual(r, want) {
		t.Fatalf("DecodeOrder = %+v, %v; want %+v", r, err, want)
	}
	if r, err := DecodeOrder("o-3", map[string]string{"status": "cancelled", "reason": "tombstone"}); err != nil || r.Parts != nil {
		t.Errorf("tombstone order: %+v, %v", r, err)
	}
	for field, value := range map[string]string{"status": "weird", "deadline": "x", "parts": "[1]"} {
		g := map[string]string{"status": "reserved", "parts": f["parts"]}
		g[field] = value
		if _, err := DecodeOrder("o-1", g); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), field) ||
			!strings.Contains(err.Error(), orderKey("o-1")) {
			t.Errorf("%s=%q: %v; want an error naming it and the key", field, value, err)
		}
	}
}
