package inventory

import (
	"fmt"
	"strconv"
	"strings"
)

// Record templates: the caller encodes a new record, the node fills in
// what only it knows.
//
// The one-script paths (localScript, stageTakeScript: takeWhole) write a
// new order record and a new pending part record per order, reserveScript
// a new pending part record per part. Almost all of either is known to the
// caller before the script runs; the node adds only its clock (an order's
// created field, a part's deadline and at fields), the redo offsets it
// hands out and, in reserveScript, the units it could take. So the caller encodes each record
// with the Go codec (packOrder, packPart: the layouts' definitions,
// orderrec.go and partrec.go) around holes, sends the pieces between the
// holes, and the script joins pieces and node values with one
// concatenation instead of running the Lua codec (order_write, pack_parts,
// part_put). Measured on one node (20-order group calls of the local
// reserve, commandstats, interleaved with the codec version): the codec's
// encoding was about 15 of the script's 32 µs per order.
//
// The rule that keeps it exact: a template is cut from the codec's own
// output, built with a sentinel byte in each hole, so the stored bytes are
// the codec's for the values the node puts in the holes, whatever the
// fields hold (TestRecordTemplates checks it against the Go codec with
// the values filled in, and TestLocalRecordsMatchLuaCodec against the Lua
// codec reading and rewriting what the scripts stored). The holes hold
// what the Lua codec would write there: an integer (I) for the created
// field, a part's quantity, offset, deadline and at; a part's offset in the order's
// part list is empty for 0 (a quota part), as pack_parts writes it. No
// field holds a sentinel (ids and names hold no control byte: idProblem,
// config's checkName); a template whose fields do is refused with
// ErrInvalid, before anything is sent.

// The sentinels cut out of the codecs' output.
const (
	holeCreated  = "\x01"
	holeOffset   = "\x02"
	holeDeadline = "\x03"
	holeAt       = "\x04"
	holeQty      = "\x05"
)

// holes are the sentinels, for the check that no field holds one.
const holes = holeCreated + holeOffset + holeDeadline + holeAt + holeQty

// partTemplate is the pending part record the reserve scripts write for
// r, taken by attempt token of orderID (part_new in lua/part_codec.lua:
// takeWhole's write_parts, reserveScript): pieces a and b of
//
//	a .. QTY .. US .. OFFSET .. b .. DEADLINE .. US .. AT
//
// (the holes as integers: the units taken, which reserveScript may cut to
// what the node has). It fails with ErrInvalid when a field holds a
// sentinel.
func partTemplate(orderID, token string, r partReq) (a, b string, err error) {
	redo := ""
	if r.Kind == PartStock {
		redo = r.queue
	}
	f := map[string]string{"state": string(PartPending), "kind": string(r.Kind), "qty": holeQty,
		"offset": holeOffset, "redo": redo, "counter": r.ck, "sku": r.SKU, "item": strconv.Itoa(r.Item),
		"order": orderID, "token": token, "deadline": holeDeadline, "at": holeAt}
	for _, v := range []string{orderID, token, r.ID, r.SKU, r.ck, redo} {
		if strings.ContainsAny(v, holes) {
			return "", "", fmt.Errorf("%w: part %q: a field holds a control byte", ErrInvalid, r.ID)
		}
	}
	s := packPart(r.ID, f)
	a, rest, ok1 := strings.Cut(s, holeQty+partUS+holeOffset)
	b, tail, ok2 := strings.Cut(rest, holeDeadline)
	if !ok1 || !ok2 || tail != partUS+holeAt {
		// packPart stores qty, offset, deadline and at as they are, in
		// that order: unreachable
		return "", "", fmt.Errorf("inventory: part %q: no template in %q", r.ID, s)
	}
	return a, b, nil
}

// orderTemplate is the new order record f (the hash layout's names) as
// pieces around its holes: f's created field and each part's offset in
// its part list, which must be written holeCreated and holeOffset (the
// other time fields as offsets from created: created "0" would do, but
// the codec must see integers, see cutCreated). The record is
//
//	pieces[0] .. CREATED .. pieces[1] .. OFFSET 1 .. pieces[2] .. …
//
// with one piece after each offset hole, in the order of the list.
func orderTemplate(f map[string]string) ([]string, error) {
	for k, v := range f {
		if k != "parts" && strings.ContainsAny(v, holes) {
			return nil, fmt.Errorf("%w: order record field %s holds a control byte", ErrInvalid, k)
		}
	}
	s, err := packOrder(f)
	if err != nil {
		return nil, err
	}
	head, rest, err := cutCreated(s, f["token"])
	if err != nil {
		return nil, err
	}
	return append([]string{head}, strings.Split(rest, holeOffset)...), nil
}

// cutCreated splits packed record s, whose created field packOrder wrote
// as createdTemplate, around that field.
func cutCreated(s, token string) (head, rest string, err error) {
	n := 1 + len(token) + len(orderGS) // a status code: the templates' records have one
	if len(s) < n+len(createdTemplate) || s[n:n+len(createdTemplate)] != createdTemplate {
		return "", "", fmt.Errorf("inventory: no created field where the layout puts it in %q", s)
	}
	return s[:n], s[n+len(createdTemplate):], nil
}

// createdTemplate is the created field of the records orderTemplate cuts
// (an integer, so the codec writes the other time fields relative to it:
// a deadline of created+ttl as ttl).
const createdTemplate = "0"

// templatePart is the layout 2 part list entry of p with its offset left
// as a hole (orderTemplate).
func templatePart(p OrderPart) OrderPart {
	p.Offset = 0
	return p
}

// localOrderPieces is the record localScript writes for an order reserved
// whole on node: reserved, by attempt token, deadline created+ttl, with
// parts (their offsets are the holes).
func localOrderPieces(orderID, token, digest, userID string, ttl int64, parts []OrderPart) ([]string, error) {
	list, err := holedParts(orderID, token, parts)
	if err != nil {
		return nil, err
	}
	return orderTemplate(map[string]string{"status": string(OrderReserved), "token": token, "created": createdTemplate,
		"deadline": strconv.FormatInt(ttl, 10), "digest": digest, "parts": list, "user": userID})
}

// stagingOrderPieces is the record stageTakeScript writes: staging, by
// attempt token, deadline created+ttl, lease created+lease, with the
// promised part list as given (no holes: the caller wrote its offsets).
func stagingOrderPieces(token, digest, userID string, ttl, lease int64, promised string) ([]string, error) {
	if strings.ContainsAny(promised, holes) {
		return nil, fmt.Errorf("%w: a promised part list holds a control byte", ErrInvalid)
	}
	p, err := orderTemplate(map[string]string{"status": string(OrderStaging), "token": token, "created": createdTemplate,
		"deadline": strconv.FormatInt(ttl, 10), "digest": digest, "parts": promised, "user": userID,
		"lease": strconv.FormatInt(lease, 10)})
	if err == nil && len(p) != 2 {
		err = fmt.Errorf("inventory: a staging record's template has %d pieces", len(p))
	}
	return p, err
}

// holedParts is encodeOrderParts's list of parts with each offset field
// a hole: layout 2 written with offset 0 (an empty field), the hole put
// where the field is.
func holedParts(orderID, token string, parts []OrderPart) (string, error) {
	var b strings.Builder
	b.WriteString(partsLayout2 + token)
	for _, p := range parts {
		one := encodeOrderParts(orderID, token, []OrderPart{templatePart(p)})
		entry, ok := strings.CutPrefix(one, partsLayout2+token+partsRS)
		fields := strings.Split(entry, partsUS)
		if !ok || len(fields) != partsFields || strings.ContainsAny(entry, holes) {
			return "", fmt.Errorf("%w: part %q has no layout 2 entry", ErrInvalid, p.ID)
		}
		fields[partsOffsetField] = holeOffset
		b.WriteString(partsRS + strings.Join(fields, partsUS))
	}
	return b.String(), nil
}

// partsOffsetField is the offset's index among a layout 2 part's fields.
const partsOffsetField = 7
