package inventory

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The part record (key partKey(id)): layout and codec.
//
// Packed layout, the one written since issue 25 ("a part record is one
// packed value"): the key is a Redis string holding the record's fields in
// the fixed order of partFields, each encoded, joined by US (0x1f), empty
// trailing fields left out:
//
//	STATE US KIND US QTY US OFFSET US REDO US COUNTER US SKU US ITEM US ORDER US TOKEN
//	  US DEADLINE US AT US SETTLED_AT US TOMBSTONE US HELD US MOVED US STUCK_SINCE US STUCK_TRIES
//
// An empty field is an absent one (no script tells an absent field from an
// empty one: both read as nil / "" / 0). Most fields are stored as they
// are (no field holds a control byte: ids and SKUs are checked by
// idProblem, names by config's checkName, numbers are digits). The ones
// another field or the part id (the key, id = order|token|item or
// order|token|q|route|sku) makes redundant are references, and any of
// them stored as "=" followed by the value itself when the reference does
// not reproduce it exactly:
//
//	STATE    "p" pending, "c" confirmed, "x" cancelled
//	REDO     the queue number of a [RedoLogKey]
//	COUNTER  "s" + the stock key less its prefix, "q" + the quota key less its prefix
//	SKU      "^": what follows the route in the stock key COUNTER
//	ITEM     "^": what follows the part id's last "|"
//	ORDER    n: the part id's first n bytes
//	TOKEN    n: the n bytes of the part id after ORDER and one byte
//
// Why: a hash of 12 fields (264 bytes of MEMORY USAGE for a 1-item
// order's stock part, listpack and all) was the largest share of a pending
// order's memory (`reserve_bytes_per_order_1item`,
// internal/bench/memory.go); the packed string takes 136 (the measure,
// whose slope spreads by about 100 bytes between runs, went from 752–778
// to 574–685 bytes per order). The Lua codec (partCodecLua, in the
// prelude of every script that reads or writes a part) and the Go one (packPart, unpackPartValue) are the two
// definitions and are tested against each other (partrec_test.go).
//
// What it costs: node CPU. Encoding and decoding in Lua is string work
// that HSET and HMGET did in C: in one script on Redis 7.0 here, the
// first codec's part_put of a 12-field stock part took about 6–9 µs more
// than the HSET it replaced and a part_get about 7–9 µs more than a plain
// GET (commandstats usec_per_call over 20 000 calls each, next to a script
// that does nothing), a share of why the full bench's inventory rows fell
// against their floors after this change (3-item 0.482 → 0.423, hot SKU
// with minted ids 0.388 → 0.346). The codec now cuts a record with one
// string.match and builds it with one concatenation (lua/part_codec.lua
// says how); measured in a loop inside one script (the least of 30
// batches of 500, on a loaded machine), part_put went from 4.5 to 2.6 µs
// (a SET alone: 0.4) and part_get from 4.9 to 3.2 µs (a GET alone: 0.3).
// What is left is mostly the one match (1.2 µs: a string per field) and
// the table (0.4 µs); a settle reads and writes each part. A reserve
// writes a new part without part_put: the caller encodes it with packPart
// and part_new fills in the node's values (rectemplate.go).
//
// Hash layout: what the releases before wrote, one hash field per field,
// as the names of partFields. The rule that keeps every interleaving safe
// across the upgrade: every reader dispatches on the key's type (part_get
// reads a string with GET, and on WRONGTYPE the hash with HGETALL, into
// the same table of fields; in Go, [ReadPart] sends GET and HGETALL and
// keeps the one that answered), so a part written before the upgrade is
// read, settled, expired, set aside and counted by topology apply exactly
// as one written after; every writer (part_put) writes the packed layout
// of the whole record it read, with SET KEEPTTL (the TTL the hash had,
// as HSET kept it) or SET EX for the writes that set a TTL, so a record
// changes layout in one atomic step of a script that read all of it and
// nothing is lost or settled twice. No script writes the hash layout. An
// instance of an older release cannot read a packed part (its scripts
// fail with WRONGTYPE, ErrCorrupt, before writing: every script reads a
// part before it writes anything): replace every instance (stop the old
// ones, then start the new), as for the order record's part list
// (parts.go).

// partFields are the fields of a part record, in the packed layout's
// order (the hash layout's field names).
var partFields = [...]string{"state", "kind", "qty", "offset", "redo", "counter", "sku", "item", "order", "token",
	"deadline", "at", "settled_at", "tombstone", "held", "moved", "stuck_since", "stuck_tries"}

const partUS = "\x1f" // between a packed part's fields

// partStateCodes are the STATE field's codes.
var partStateCodes = map[PartState]string{PartPending: "p", PartConfirmed: "c", PartCancelled: "x"}

// partCodecLua defines part_read(key) (the part record at key, either
// layout, as a table of field → string value; nil when the key does not
// exist, where lua/inline_part.lua's part_get, which every script reads a
// part with, reads an inline part: inline.go) and part_put(key, t, ttl)
// (write t as the packed record at key: the TTL kept when ttl is nil, else
// set to ttl seconds, as EXPIRE would). Numbers in t are written as
// integers. It is part of the prelude.
var partCodecLua = luaFile("part_codec.lua")

// packPart is the packed layout of part id's fields (partCodecLua's
// part_put, in Go).
func packPart(id string, f map[string]string) string {
	out := make([]string, 0, len(partFields))
	last := 0
	for i, name := range partFields {
		v := f[name]
		if v == "" {
			out = append(out, "")
			continue
		}
		out = append(out, partRef(name, v, id, f))
		last = i + 1
	}
	return strings.Join(out[:last], partUS)
}

// partRefs are the fields stored as references (see the file comment),
// each with its encoder: it returns the reference to value v of part id's
// record f, or false when the reference would not reproduce v exactly.
// The other fields are stored as they are.
var partRefs = map[string]func(v, id string, f map[string]string) (string, bool){
	"state": func(v, _ string, _ map[string]string) (string, bool) {
		c, ok := partStateCodes[PartState(v)]
		return c, ok
	},
	"redo": func(v, _ string, _ map[string]string) (string, bool) {
		q, ok := strings.CutPrefix(v, redoLogKeyPrefix)
		return q, ok && q != "" && q[0] != '='
	},
	"counter": func(v, _ string, _ map[string]string) (string, bool) {
		tag, r, ok := counterRef(v)
		return tag + r, ok
	},
	"sku": func(v, _ string, f map[string]string) (string, bool) { return skuRef(v, f["counter"]) },
	"item": func(v, id string, _ map[string]string) (string, bool) {
		return "^", strings.HasSuffix(id, "|"+v) && !strings.Contains(v, "|")
	},
	"order": func(v, id string, _ map[string]string) (string, bool) {
		return strconv.Itoa(len(v)), strings.HasPrefix(id, v)
	},
	"token": func(v, id string, f map[string]string) (string, bool) { return tokenRef(v, id, f["order"]) },
}

// counterRef is the counter field's reference to v, in two pieces (tag,
// then what follows the key's prefix: partRefs joins them,
// appendPartRef appends them), or false when v is neither a stock nor a
// quota key.
func counterRef(v string) (tag, rest string, ok bool) {
	if r, ok := strings.CutPrefix(v, stockKeyPrefix); ok {
		return "s", r, true
	}
	r, ok := strings.CutPrefix(v, quotaKeyPrefix)
	return "q", r, ok
}

// skuRef is the SKU field's reference to v in a record whose counter is
// counter (partRefs).
func skuRef(v, counter string) (string, bool) {
	s, ok := stockKeySKU(counter)
	return "^", ok && s == v
}

// tokenRef is the token field's reference to v in part id's record whose
// order is order (partRefs).
func tokenRef(v, id, order string) (string, bool) {
	b := len(order) + 1
	return strconv.Itoa(len(v)), b <= len(id) && strings.HasPrefix(id[b:], v)
}

// partSKURef and partTokenRef are how packPart stores a SKU and a token
// (partRef, for the fields whose reference reads another field), given
// that field: for rectemplate.go, which has no field map.
func partSKURef(sku, counter string) string {
	if sku == "" {
		return ""
	}
	r, ok := skuRef(sku, counter)
	return refOrLiteral(sku, r, ok)
}

func partTokenRef(token, id, order string) string {
	if token == "" {
		return ""
	}
	r, ok := tokenRef(token, id, order)
	return refOrLiteral(token, r, ok)
}

// refOrLiteral is how value v is stored: as its reference ref when ok
// (the reference reproduces v), else as "=" and v.
func refOrLiteral(v, ref string, ok bool) string {
	if ok {
		return ref
	}
	return "=" + v
}

// partRef encodes field name's value v of part id's record f: its
// reference, "=" and v when the reference does not reproduce v, or v
// itself for a field stored as it is.
func partRef(name, v, id string, f map[string]string) string {
	ref, isRef := partRefs[name]
	if !isRef {
		return v
	}
	r, ok := ref(v, id, f)
	return refOrLiteral(v, r, ok)
}

// appendPartRef appends partRef(name, v, id, f) to dst (the counter's
// reference without joining its pieces first).
func appendPartRef(dst []byte, name, v, id string, f map[string]string) []byte {
	if name == "counter" {
		if tag, r, ok := counterRef(v); ok {
			return append(append(dst, tag...), r...)
		}
		return append(append(dst, '='), v...)
	}
	return append(dst, partRef(name, v, id, f)...)
}

// stockKeySKU is what follows the route in stock key k.
func stockKeySKU(k string) (string, bool) {
	rest, ok := strings.CutPrefix(k, stockKeyPrefix)
	if !ok {
		return "", false
	}
	_, sku, ok := strings.Cut(rest, ":")
	return sku, ok
}

// unpackPartValue reads packed value v of part id's record into its fields
// (the hash layout's names; an absent field is not in the map). The error
// names the field.
func unpackPartValue(id, v string) (map[string]string, error) {
	raw := strings.Split(v, partUS)
	if len(raw) > len(partFields) {
		return nil, fmt.Errorf("%w: %d fields, at most %d", ErrCorrupt, len(raw), len(partFields))
	}
	f := make(map[string]string, len(raw))
	for i, r := range raw {
		if r == "" {
			continue
		}
		name := partFields[i]
		v, err := partDeref(name, r, id, f)
		if err != nil {
			return nil, fmt.Errorf("%w: %s %q: %s", ErrCorrupt, name, r, err)
		}
		f[name] = v
	}
	return f, nil
}

// partDeref decodes field name's stored form r (not "") of part id's
// record; f holds the fields before it.
func partDeref(name, r, id string, f map[string]string) (string, error) {
	if _, isRef := partRefs[name]; !isRef {
		return r, nil
	}
	if lit, ok := strings.CutPrefix(r, "="); ok {
		return lit, nil
	}
	switch name {
	case "state":
		for s, c := range partStateCodes {
			if c == r {
				return string(s), nil
			}
		}
		return "", fmt.Errorf("not a state code")
	case "redo":
		return redoLogKeyPrefix + r, nil
	case "counter":
		switch r[0] {
		case 's':
			return stockKeyPrefix + r[1:], nil
		case 'q':
			return quotaKeyPrefix + r[1:], nil
		}
		return "", fmt.Errorf("not a counter reference")
	case "sku":
		if s, ok := stockKeySKU(f["counter"]); ok && r == "^" {
			return s, nil
		}
		return "", fmt.Errorf("no stock key counter to take the SKU from")
	case "item":
		if r == "^" {
			return id[strings.LastIndexByte(id, '|')+1:], nil
		}
		return "", fmt.Errorf("not an item reference")
	}
	n, err := strconv.Atoi(r)
	b := 0
	if name == "token" {
		b = len(f["order"]) + 1
	}
	if err != nil || n < 0 || b+n > len(id) {
		return "", fmt.Errorf("not a length within the part id")
	}
	return id[b : b+n], nil
}

// PartRead is a part record being read by a pipeline ([ReadPart]).
type PartRead struct {
	id     string
	packed *redis.StringCmd
	hash   *redis.MapStringStringCmd
}

// ReadPart queues on c (a client or a pipeline) the reads of part id's
// record in either layout: GET for the packed one, HGETALL for the hash
// layout of the releases before (the one of them that meets the other
// type fails with WRONGTYPE, which is expected). Once c ran them,
// [PartRead.Fields] gives the record.
func ReadPart(ctx context.Context, c redis.Cmdable, id string) *PartRead {
	return &PartRead{id: id, packed: c.Get(ctx, partKey(id)), hash: c.HGetAll(ctx, partKey(id))}
}

// Fields returns the record's fields under the hash layout's names, for
// [DecodePart]; an empty map when the part does not exist. It fails when
// neither read answered (the node's error), or with [ErrCorrupt] when the
// packed value is malformed or the key is neither a string nor a hash;
// the error names the key.
func (r *PartRead) Fields() (map[string]string, error) {
	if v, err := r.packed.Result(); err == nil {
		f, err := unpackPartValue(r.id, v)
		if err != nil {
			return nil, fmt.Errorf("part record %s: %w", partKey(r.id), err)
		}
		return f, nil
	}
	h, err := r.hash.Result()
	if err != nil {
		if isWrongType(err) && isWrongType(r.packed.Err()) {
			return nil, fmt.Errorf("part record %s: %w: the key is neither a string nor a hash (%w)", partKey(r.id), ErrCorrupt, err)
		}
		if r.packed.Err() != redis.Nil {
			err = r.packed.Err()
		}
		return nil, fmt.Errorf("part record %s: %w", partKey(r.id), err)
	}
	return h, nil
}
