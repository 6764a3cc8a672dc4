package inventory

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The order record (key orderKey(id)): layout and codec.
//
// Packed layout, the one written since issue 25 ("compact records"): the
// key is a Redis string, a one-byte status code, then the fields of
// orderFields in that order, each encoded, joined by GS (0x1d), empty
// trailing fields left out:
//
//	CODE TOKEN GS CREATED GS DEADLINE GS DIGEST GS PARTS GS USER GS LEASE
//	  GS RESERVED_AT GS REASON GS DECIDED_AT GS MOVED
//
// CODE is the status: "b" reserving, "s" staging, "r" reserved, "c"
// confirmed, "x" cancelled, "f" failed, in upper case when the record
// carries a moved mark (MOVED not empty); a status of no code (or none)
// is written "=" STATUS GS (no mark) or "+" STATUS GS (a mark). So a
// script that needs no more than the status, the mark and the token reads
// them from the value's first bytes (order_head), no decode: the local
// reserve's existence check, peekScript, a stage.
//
// An empty field is an absent one (no script tells an absent field from an
// empty one). No field holds a control byte (ids are checked by idProblem,
// names by config's checkName, tokens are base64url (hex before), digests hex, numbers digits,
// the part list is JSON or parts.go's layout 2, which uses RS and US but
// never GS). Stored as they are but:
//
//	DEADLINE, LEASE, RESERVED_AT, DECIDED_AT  the field less CREATED (a
//	  signed decimal), when both are integers written canonically with at
//	  most 15 digits; else "=" and the field
//	PARTS  a layout 2 list of the record's TOKEN ("~" TOKEN, then RS and
//	  its parts) without its "~" TOKEN: what follows it ("~" for a list of
//	  no parts); any other list as it is, or "=" and the list when it
//	  starts with RS or "=", or is "~"
//
// Why: a hash of 6–8 fields (MEMORY USAGE 232 bytes for a 1-item order
// reserved by the one-script path, local.go; 296 by the staged path; 152
// and 184 packed) was the largest share of a pending order's memory
// (`reserve_bytes_per_order_1item`, internal/bench/memory.go). The Lua
// codec (orderCodecLua: lua/order_head.lua and lua/order_codec.lua, in the
// prelude library of the scripts that use it, lualib.go; order_head also
// in peekScript) and the Go one (packOrder, unpackOrderValue) are the two
// definitions, tested against each other (orderrec_test.go).
//
// What it costs: node CPU, a little. Encoding and decoding in Lua is
// string work HSET and HMGET did in C, and the codec's definitions run in
// every call of a script that carries them (so they build no table:
// order_status and order_write spell the codes and fields out, and the
// scripts that write a new record pass its fields to order_write as
// arguments, no table). On Redis 7.0 here (commandstats usec_per_call):
// in isolation (20 000 calls each) the local reserve's record work
// (order_head, order_write: GET, SET EX) took 4.6–4.8 µs against 4.2–4.3
// for the HMGET, HSET, EXPIRE it replaces (3.1 for a bare GET and SET of
// the same bytes); the whole local reserve script, old and new
// interleaved on one node (8 000 calls each, six runs), took 0 to 5 µs
// more per call, about 2.5 (5%) in the median, on 47–67 µs. A local
// 1-item order's record is 72 bytes (152 of MEMORY USAGE); the next size
// class down (136) needs it at 60 or less (a shorter CREATED, DEADLINE,
// TOKEN and DIGEST than decimal and hex: more Lua per write). The
// one-script paths no longer run order_write for their new record: the
// caller encodes it with packOrder and the script fills in created and
// the offsets (rectemplate.go).
//
// TTL: an order record's key expires inventory.retention after the write
// that decided it (confirmed, cancelled, failed, a tombstone) or began an
// attempt (reserving, staging: an attempt that dies leaves a record that
// goes away by itself). A reserved record has no TTL: the commit, and the
// one-script reserve that writes it reserved, clear it (set_value with
// false). A reservation lives until it is decided — Confirm, Cancel, the
// reconciler's expiry of a due part, or any of them meeting it past its
// deadline — and every decision gives it the retention again. No TTL
// saves the expires dict's entry, about 32 bytes per pending order
// (BENCHMARKS.md, "Record layouts, measured"), and a reservation never
// expires while its order is pending, whatever the retention. The one
// record that no decision reaches is a reservation all of whose parts were
// lost with their nodes' data (nothing comes due): it stays reserved
// until a Confirm or Cancel of its order meets it. A moved record is
// installed with its TTL, none when reserved (orderMoveOutScript's PTTL,
// -1 for none); its copy marked moved keeps its own, or, reserved, gets
// the retention once the install landed (migrate.go, expireMoved).
//
// Hash layout: what the releases before wrote, one hash field per field,
// as named in orderFields. The rule that keeps every interleaving safe
// across the upgrade is the part record's (partrec.go): every reader
// dispatches on the key's type (order_get and order_head read a string
// with GET, and on WRONGTYPE the hash with HGETALL or HMGET; in Go,
// [ReadOrder] sends GET and HGETALL and keeps the one that answered), so a
// record written before the upgrade is reserved over, staged, confirmed,
// cancelled, expired, recovered and moved exactly as one written after;
// every writer (order_put) writes the packed layout of the whole record it
// read, in one SET (KEEPTTL, or EX for the steps that set a TTL), so a
// record changes layout in one atomic step of a script that read all of
// it (a hash field of no name in orderFields is left out: no release
// wrote one). No script writes the hash layout. A moved record is handed over
// packed (orderMoveOutScript's reply), and orderInstallScript writes it
// without its mark. An instance of an older release cannot read a packed
// record (its scripts fail with WRONGTYPE, ErrCorrupt, before writing):
// replace every instance (stop the old ones, then start the new).

// orderFields are the fields of an order record after its status, in the
// packed layout's order (the hash layout's field names).
var orderFields = [...]string{"token", "created", "deadline", "digest", "parts", "user", "lease",
	"reserved_at", "reason", "decided_at", "moved"}

const orderGS = "\x1d" // between a packed order record's fields

// orderStatusCodes are the CODE byte of each status (lower case: no
// moved mark).
var orderStatusCodes = map[OrderState]byte{OrderReserving: 'b', OrderStaging: 's', OrderReserved: 'r',
	OrderConfirmed: 'c', OrderCancelled: 'x', OrderFailed: 'f'}

// orderRelFields are the fields stored as an offset from created.
var orderRelFields = map[string]bool{"deadline": true, "lease": true, "reserved_at": true, "decided_at": true}

// orderCodecLua defines order_head(key), order_get(key), order_unpack(v)
// and order_put(key, t, ttl) (lua/order_head.lua, lua/order_codec.lua:
// their contracts are at the top of each). Both files are in the prelude
// library (luaLibFiles): a script carries the definitions it uses.
var orderCodecLua = orderHeadLua + luaFile("order_codec.lua")

// orderHeadLua defines order_head(key) alone, for peekScript.
var orderHeadLua = luaFile("order_head.lua")

// packOrder is the packed layout of an order record's fields (the hash
// layout's names; orderCodecLua's order_put, in Go). It fails on a field
// it does not know, or one that holds GS.
func packOrder(f map[string]string) (string, error) {
	for k, v := range f {
		if k != "status" && !isOrderField(k) {
			return "", fmt.Errorf("%w: order record field %q is not one of the layout's", ErrInvalid, k)
		}
		if strings.Contains(v, orderGS) {
			return "", fmt.Errorf("%w: order record field %s %q holds GS", ErrInvalid, k, v)
		}
	}
	var b strings.Builder
	st, moved := f["status"], f["moved"] != ""
	if c, ok := orderStatusCodes[OrderState(st)]; ok {
		if moved {
			c -= 'a' - 'A'
		}
		b.WriteByte(c)
	} else {
		b.WriteString(map[bool]string{false: "=", true: "+"}[moved] + st + orderGS)
	}
	out := make([]string, len(orderFields))
	last := 0
	created, createdOK := orderInt(f["created"])
	for i, name := range orderFields {
		v := f[name]
		if v == "" {
			continue
		}
		out[i], last = v, i+1
		switch {
		case orderRelFields[name]:
			if n, ok := orderInt(v); ok && createdOK {
				out[i] = strconv.FormatInt(n-created, 10)
			} else {
				out[i] = "=" + v
			}
		case name == "parts":
			out[i] = packOrderParts(v, f["token"])
		}
	}
	b.WriteString(strings.Join(out[:last], orderGS))
	return b.String(), nil
}

func isOrderField(name string) bool {
	for _, n := range orderFields {
		if n == name {
			return true
		}
	}
	return false
}

// packOrderParts is the stored form of part list v of a record whose
// token is token (see the file comment).
func packOrderParts(v, token string) string {
	if rest, ok := strings.CutPrefix(v, partsLayout2+token); ok {
		if rest == "" {
			return partsLayout2
		}
		if strings.HasPrefix(rest, partsRS) {
			return rest
		}
	}
	if v == partsLayout2 || strings.HasPrefix(v, partsRS) || strings.HasPrefix(v, "=") {
		return "=" + v
	}
	return v
}

// orderInt is the integer v holds when written canonically with at most
// 15 digits (order_int in Lua: every sum and difference of two is exact
// in a Lua number).
func orderInt(v string) (int64, bool) {
	d := strings.TrimPrefix(v, "-")
	if v == "0" {
		return 0, true
	}
	if len(d) == 0 || len(d) > 15 || d[0] < '1' || d[0] > '9' {
		return 0, false
	}
	for i := 1; i < len(d); i++ {
		if d[i] < '0' || d[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return n, err == nil
}

// unpackOrderValue reads packed order record v into its fields (the hash
// layout's names; an absent field is not in the map). The error wraps
// [ErrCorrupt] and names the field.
func unpackOrderValue(v string) (map[string]string, error) {
	st, mark, rest, err := unpackOrderHead(v)
	if err != nil {
		return nil, err
	}
	f := map[string]string{}
	if st != "" {
		f["status"] = st
	}
	raw := strings.Split(rest, orderGS)
	if len(raw) > len(orderFields) {
		return nil, fmt.Errorf("%w: %d fields after the status, at most %d", ErrCorrupt, len(raw), len(orderFields))
	}
	for i, r := range raw {
		if r == "" {
			continue
		}
		if f[orderFields[i]], err = orderDeref(orderFields[i], r, f); err != nil {
			return nil, err
		}
	}
	if mark != (f["moved"] != "") {
		return nil, fmt.Errorf("%w: the status code's moved mark (%v) and the moved field %q disagree", ErrCorrupt, mark, f["moved"])
	}
	return f, nil
}

// unpackOrderHead reads packed order record v's CODE: its status ("" for
// none), moved mark, and what follows (the fields from TOKEN on).
func unpackOrderHead(v string) (status string, mark bool, rest string, err error) {
	if v == "" {
		return "", false, "", fmt.Errorf("%w: an empty value, no status code", ErrCorrupt)
	}
	c := v[0]
	if c == '=' || c == '+' {
		status, rest, _ = strings.Cut(v[1:], orderGS)
		return status, c == '+', rest, nil
	}
	if c >= 'A' && c <= 'Z' {
		c += 'a' - 'A'
		mark = true
	}
	for s, code := range orderStatusCodes {
		if code == c {
			return string(s), mark, v[1:], nil
		}
	}
	return "", false, "", fmt.Errorf("%w: status code %q", ErrCorrupt, v[:1])
}

// orderDeref decodes field name's stored form r (not "") of an order
// record; f holds the fields before it.
func orderDeref(name, r string, f map[string]string) (string, error) {
	switch {
	case orderRelFields[name]:
		if lit, ok := strings.CutPrefix(r, "="); ok {
			return lit, nil
		}
		created, createdOK := orderInt(f["created"])
		d, ok := orderInt(r)
		if !ok || !createdOK {
			return "", fmt.Errorf("%w: %s %q is no offset from created %q", ErrCorrupt, name, r, f["created"])
		}
		return strconv.FormatInt(created+d, 10), nil
	case name == "parts":
		switch {
		case strings.HasPrefix(r, partsRS) || r == partsLayout2:
			return partsLayout2 + f["token"] + strings.TrimPrefix(r, partsLayout2), nil
		case strings.HasPrefix(r, "="):
			return r[1:], nil
		}
	}
	return r, nil
}

// OrderRead is an order record being read by a pipeline ([ReadOrder]).
type OrderRead struct {
	id     string
	packed *redis.StringCmd
	hash   *redis.MapStringStringCmd
}

// ReadOrder queues on c (a client or a pipeline) the reads of order id's
// record in either layout: GET for the packed one, HGETALL for the hash
// layout of the releases before (the one of them that meets the other
// type fails with WRONGTYPE, which is expected). Once c ran them,
// [OrderRead.Fields] gives the record.
func ReadOrder(ctx context.Context, c redis.Cmdable, id string) *OrderRead {
	return &OrderRead{id: id, packed: c.Get(ctx, orderKey(id)), hash: c.HGetAll(ctx, orderKey(id))}
}

// Fields returns the record's fields under the hash layout's names, for
// [DecodeOrder]; an empty map when the order has no record. It fails when
// neither read answered (the node's error), or with [ErrCorrupt] when the
// packed value is malformed or the key is neither a string nor a hash; the
// error names the key.
func (r *OrderRead) Fields() (map[string]string, error) {
	if v, err := r.packed.Result(); err == nil {
		f, err := unpackOrderValue(v)
		if err != nil {
			return nil, fmt.Errorf("order record %s: %w", orderKey(r.id), err)
		}
		return f, nil
	}
	h, err := r.hash.Result()
	if err != nil {
		if isWrongType(err) && isWrongType(r.packed.Err()) {
			return nil, fmt.Errorf("order record %s: %w: the key is neither a string nor a hash (%w)", orderKey(r.id), ErrCorrupt, err)
		}
		if r.packed.Err() != redis.Nil {
			err = r.packed.Err()
		}
		return nil, fmt.Errorf("order record %s: %w", orderKey(r.id), err)
	}
	return h, nil
}
