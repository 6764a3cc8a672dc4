package inventory

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The order record's part list (its "parts" field).
//
// Layout 2, the one written since issue 25 ("compact records"), is one
// string, no JSON:
//
//	"~" TOKEN ( RS KIND US ITEM US NODE US ROUTE US SKU US QTY US QUEUE US OFFSET US INC US ID )*
//
// with RS = 0x1e and US = 0x1f (no id, route, node or SKU holds a control
// byte: idProblem, config's checkName), TOKEN the attempt whose parts
// these are, KIND "s" or "q", ITEM the item index (-1 for a quota part),
// QUEUE the number of the stock part's redo-log queue ([RedoLogKey]; ""
// for a quota part), OFFSET its offset ("" for 0), INC the node's
// incarnation the staged attempt promised ("" unknown), and ID "" when the
// part id is the one the token derives (stockPartID / quotaPartID of the
// record's order id and TOKEN), else the id itself. The order id is the
// record's key, never repeated in the value. Why: when it was made, an
// order record was a Redis hash (records are packed strings now,
// orderrec.go, and a short list still costs fewer bytes), kept in the
// compact listpack encoding only while every value is at most
// hash-max-listpack-value (64 bytes by default); a JSON list of one part
// is about 110 bytes and turned each record into a hash table, 755 bytes
// instead of 264 (`reserve_bytes_per_order_1item`,
// internal/bench/memory.go).
//
// Layout 1, JSON (a list of [OrderPart] under its json names, "null" or
// "[]" or "{}" for none), is what records written before hold. The rule
// that keeps both safe across the upgrade: the part list is opaque to
// every script (a script stores what the caller passed, in a local
// reserve's record with the offsets in its holes, rectemplate.go, and
// hands it back unread), and
// this file's decoder (unmarshalOrderParts) is the one reader in Go; it reads
// both layouts by the first byte ('~' or JSON), so a record written before
// the upgrade is confirmed, cancelled, expired, recovered and moved as
// before. Nothing rewrites a record's part list but the steps that always
// did (commit, a stage, a local reserve), which write layout 2. An
// instance of an older release cannot read layout 2 (it reports the record
// corrupt, and changes nothing): upgrade every instance before the new
// one reserves.
const (
	partsLayout2 = "~"    // first byte of a layout 2 list
	partsRS      = "\x1e" // before each part
	partsUS      = "\x1f" // between a part's fields
	partsFields  = 10     // fields of a part in layout 2
)

// encodeOrderParts is how the inventory writes the part list of order
// orderID's attempt token: layout 2, or layout 1 for a list layout 2
// cannot carry exactly (a stock part whose Redo is not a [RedoLogKey], a
// field holding a separator), so every list round-trips.
func encodeOrderParts(orderID, token string, parts []OrderPart) string {
	list, _ := encodeOrderPartsHoles(orderID, token, parts, nil)
	return list
}

// encodeOrderPartsHoles is encodeOrderParts, and, for a list in layout 2,
// holes with where each part's offset field starts in it appended (holes
// as given for layout 1).
func encodeOrderPartsHoles(orderID, token string, parts []OrderPart, holes []int) (string, []int) {
	if strings.ContainsAny(token, partsRS+partsUS) {
		return encodeOrderPartsJSON(parts), holes
	}
	var arr [256]byte // built on the stack when it fits: one allocation, the string
	b := append(append(slices.Grow(arr[:0], len(partsLayout2)+len(token)+48*len(parts)), partsLayout2...), token...)
	n := len(holes)
	for _, p := range parts {
		var ok bool
		var hole int
		if b, hole, ok = appendLayout2Entry(b, orderID, token, p); !ok {
			return encodeOrderPartsJSON(parts), holes[:n]
		}
		holes = append(holes, hole)
	}
	return string(b), holes
}

// withOffsets is the list encodeOrderParts writes for the parts of list
// (in layout 2, written by encodeOrderPartsHoles with every offset 0, its
// holes holes), each with the offset of the part of taken that has its id,
// in list's order: a staged order's committed list, made from its promised
// one without encoding its parts again. ok is false when some part of the
// list has no part in taken that differs from it only by its offset (then
// the caller encodes taken), or holes is not one per part.
func withOffsets(list string, holes []int, promised, taken []OrderPart) (string, bool) {
	if len(holes) != len(promised) || len(taken) != len(promised) {
		return "", false
	}
	b := make([]byte, 0, len(list)+12*len(promised))
	last := 0
	for i, p := range promised {
		j := 0
		for j < len(taken) && taken[j].ID != p.ID {
			j++
		}
		if j == len(taken) || p.Offset != 0 {
			return "", false
		}
		t := taken[j]
		off := t.Offset
		t.Offset = 0
		if t != p {
			return "", false
		}
		b = append(b, list[last:holes[i]]...)
		if off != 0 {
			b = strconv.AppendInt(b, off, 10)
		}
		last = holes[i]
	}
	return frozen(append(b, list[last:]...)), true // b is dropped here
}

// appendLayout2Entry appends part p's entry in the layout 2 list of
// attempt token of orderID to b: RS, then its fields joined by US (kind,
// item, node, route, SKU, qty, redo queue number, offset, incarnation, and
// the part id unless it is the one the reserve paths derive), each number
// written into b. hole is where the offset field starts in b (a template
// leaves it empty: appendLocalOrderPieces). It reports false when layout
// 2 cannot carry p exactly (a stock part whose Redo is not a
// [RedoLogKey], a field holding a separator).
func appendLayout2Entry(b []byte, orderID, token string, p OrderPart) (out []byte, hole int, ok bool) {
	queue := ""
	if p.Redo != "" {
		q, ok := redoQueueNumber(p.Redo)
		if !ok {
			return b, 0, false
		}
		queue = q
	}
	id := p.ID
	if isDerivedPartID(orderID, token, p) {
		id = ""
	}
	if hasPartsSep(string(p.Kind), p.Node, p.Route, p.SKU, p.Incarnation, id) {
		return b, 0, false
	}
	b = append(append(append(b, partsRS...), p.Kind...), partsUS...)
	b = append(strconv.AppendInt(b, int64(p.Item), 10), partsUS...)
	b = append(append(b, p.Node...), partsUS...)
	b = append(append(b, p.Route...), partsUS...)
	b = append(append(b, p.SKU...), partsUS...)
	b = append(strconv.AppendInt(b, p.Qty, 10), partsUS...)
	b = append(append(b, queue...), partsUS...)
	hole = len(b)
	if p.Offset != 0 {
		b = strconv.AppendInt(b, p.Offset, 10)
	}
	b = append(append(b, partsUS...), p.Incarnation...)
	return append(append(b, partsUS...), id...), hole, true
}

// hasPartsSep reports whether a value holds a layout 2 separator (RS or
// US).
func hasPartsSep(vs ...string) bool {
	for _, v := range vs {
		for i := 0; i < len(v); i++ {
			if v[i] == partsRS[0] || v[i] == partsUS[0] {
				return true
			}
		}
	}
	return false
}

// encodeOrderPartsJSON is layout 1.
func encodeOrderPartsJSON(parts []OrderPart) string {
	b, _ := json.Marshal(parts)
	return string(b)
}

// redoQueueNumber is the queue number of a redo-log key, as [RedoLogKey]
// writes it.
func redoQueueNumber(key string) (string, bool) {
	q, ok := strings.CutPrefix(key, redoLogKeyPrefix)
	if !ok {
		return "", false
	}
	if !canonicalInt(q) {
		return "", false
	}
	return q, true
}

// canonicalInt reports whether s is what strconv.Itoa writes for some
// int >= 0 (digits, no leading zero but "0" itself, short enough to
// parse), without allocating.
func canonicalInt(s string) bool {
	if s == "" || len(s) > 18 || (s[0] == '0' && len(s) > 1) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// isDerivedPartID reports whether p.ID is derivedPartID(orderID, token,
// p), without building it (a reserve asks once per part). It spells out
// stockPartID's and quotaPartID's forms (keys.go): change them together;
// FuzzOrderPartsRoundTrip compares it with derivedPartID.
func isDerivedPartID(orderID, token string, p OrderPart) bool {
	var rest string
	switch p.Kind {
	case PartStock:
		rest = strconv.Itoa(p.Item)
	case PartQuota:
		rest = "q|" + p.Route + "|" + p.SKU
	default:
		return p.ID == ""
	}
	id := p.ID
	if len(id) != len(orderID)+len(token)+2+len(rest) {
		return false
	}
	return id[:len(orderID)] == orderID && id[len(orderID)] == '|' &&
		id[len(orderID)+1:len(orderID)+1+len(token)] == token && id[len(orderID)+1+len(token)] == '|' &&
		id[len(orderID)+2+len(token):] == rest
}

// derivedPartID is the id the reserve paths give part p of attempt token
// of orderID (stockPartID, quotaPartID); "" for a part of another kind.
func derivedPartID(orderID, token string, p OrderPart) string {
	switch p.Kind {
	case PartStock:
		return stockPartID(orderID, token, p.Item)
	case PartQuota:
		return quotaPartID(orderID, token, p.Route, p.SKU)
	}
	return ""
}

// unmarshalOrderParts reads the part list of order orderID's record in
// either layout; "" is none. It checks the syntax only (DecodeOrderParts
// checks each part).
func unmarshalOrderParts(orderID, s string) ([]OrderPart, error) {
	if s == "" {
		return nil, nil
	}
	rest, ok := strings.CutPrefix(s, partsLayout2)
	if !ok {
		var out []OrderPart
		if err := json.Unmarshal([]byte(s), &out); err != nil {
			return nil, fmt.Errorf("%w: parts: %v", ErrCorrupt, err)
		}
		return out, nil
	}
	recs := strings.Split(rest, partsRS)
	token := recs[0]
	var out []OrderPart
	for i, r := range recs[1:] {
		p, err := unpackPart(orderID, token, r)
		if err != nil {
			return nil, fmt.Errorf("%w: parts[%d]: %s", ErrCorrupt, i, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// unpackPart reads one part of a layout 2 list of attempt token; the
// error names the field.
func unpackPart(orderID, token, r string) (OrderPart, error) {
	f := strings.Split(r, partsUS)
	if len(f) != partsFields {
		return OrderPart{}, fmt.Errorf("%d fields, want %d", len(f), partsFields)
	}
	p := OrderPart{Kind: PartKind(f[0]), Node: f[2], Route: f[3], SKU: f[4], Incarnation: f[8], ID: f[9]}
	var err error
	if p.Item, err = strconv.Atoi(f[1]); err != nil {
		return p, fmt.Errorf("item %q is not an integer", f[1])
	}
	if p.Qty, err = strconv.ParseInt(f[5], 10, 64); err != nil {
		return p, fmt.Errorf("qty %q is not an integer", f[5])
	}
	if f[6] != "" {
		p.Redo = redoLogKeyPrefix + f[6]
		if _, ok := redoQueueNumber(p.Redo); !ok {
			return p, fmt.Errorf("queue %q is not a redo-log queue number", f[6])
		}
	}
	if f[7] != "" {
		if p.Offset, err = strconv.ParseInt(f[7], 10, 64); err != nil || p.Offset == 0 {
			return p, fmt.Errorf("offset %q is not an integer other than 0", f[7])
		}
	}
	if p.ID == "" {
		p.ID = derivedPartID(orderID, token, p)
	}
	return p, nil
}

// DecodeOrderParts decodes the "parts" field of order orderID's record
// (layout 1 or 2, see above); "" (a record with no parts) is nil. Beyond
// the syntax, each part needs an id, a node, a known kind, a quantity ≥ 1
// and, for a stock part, an item ≥ 0, a redo-log key and an offset ≥ 0
// (0 in the parts a staged attempt promised, staged.go, whose offsets
// were not handed out yet); a quota part has neither redo key nor offset.
// The error names the first bad part and field.
func DecodeOrderParts(orderID, s string) ([]OrderPart, error) {
	out, err := unmarshalOrderParts(orderID, s)
	if err != nil {
		return nil, err
	}
	for i, p := range out {
		if problem := p.problem(); problem != "" {
			return nil, fmt.Errorf("%w: parts[%d] (%q): %s", ErrCorrupt, i, p.ID, problem)
		}
	}
	return out, nil
}
