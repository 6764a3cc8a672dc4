package inventory

import (
	"fmt"
	"strconv"
	"strings"
	"unsafe"
)

// Record templates: the caller encodes a new record, the node fills in
// what only it knows.
//
// The one-script paths (localScript, stageTakeScript: lua/take_whole.lua)
// write a new order record and a new pending part record per order,
// reserveScript a new pending part record per part. Almost all of either
// is known to the caller before the script runs; the node adds only its
// clock (an order's created field, a part's deadline and at fields), the
// redo offsets it hands out and, in reserveScript, the units it could
// take. So the caller encodes each record in its layout (orderrec.go,
// partrec.go) around holes and sends the pieces between them, and the
// script joins pieces and node values with one concatenation instead of
// running the Lua codec (order_write, the part list's encoder, part_put).
// Measured on one node (20-order group calls of the local reserve,
// commandstats, interleaved with the codec version): about 30 µs of
// script time per order before, 23 after.
//
// The rule that keeps it exact: filled in, a template is byte for byte
// what the codec writes for the whole record. The encoders below spell the
// layouts' rules out for the records they write (no maps, no reflection:
// a reserve runs them once per part, and cutting the codec's own output
// around sentinel bytes cost the client more than the node saved), the
// references and part list entries through the codec's own helpers
// (partRef, appendLayout2Entry, packOrderParts); TestRecordTemplates fills them
// in and compares them with packOrder and packPart (which the Lua codec matches,
// TestOrderCodecLuaMatchesGo, TestPartCodecLuaMatchesGo), and
// TestOneScriptRecordsAsCodec reads back what the scripts stored on a
// real node. The holes hold what the Lua codec would write there: an
// integer (I) for the created field, a part's quantity, offset, deadline
// and at; a part's offset in the order's part list is empty for 0 (a
// quota part). A field holding a control byte (which ids and names never
// do: idProblem, config's checkName) is refused with ErrInvalid before
// anything is sent, as are the lists layout 2 cannot carry (the codec
// falls back to JSON for those).

// hasControl reports whether a value holds a byte below 0x20 (the
// layouts' separators among them).
func hasControl(values ...string) bool {
	for _, v := range values {
		if controlIn(v) {
			return true
		}
	}
	return false
}

// controlIn reports whether v holds a byte below 0x20, eight bytes at a
// time: a byte b < 0x20 is the only one for which (b - 0x20) borrows into
// its high bit while b's own high bit is clear (the "has a byte less than
// n" test, exact for n <= 0x80); a borrow only runs on from a byte that
// already set its flag. Every order checks its ids and template pieces
// with it.
func controlIn(v string) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(v); i += 8 {
		x := uint64(v[i]) | uint64(v[i+1])<<8 | uint64(v[i+2])<<16 | uint64(v[i+3])<<24 |
			uint64(v[i+4])<<32 | uint64(v[i+5])<<40 | uint64(v[i+6])<<48 | uint64(v[i+7])<<56
		if (x-ones*0x20)&^x&highs != 0 {
			return true
		}
	}
	for ; i < len(v); i++ {
		if v[i] < 0x20 {
			return true
		}
	}
	return false
}

// appendPartTemplate appends to dst the pending part record the reserve
// scripts write for r, taken by attempt token of orderID (part_new in
// lua/part_codec.lua: lua/take_whole.lua, reserveScript): pieces a and b
// of
//
//	a .. QTY .. US .. OFFSET .. b .. DEADLINE .. US .. AT
//
// (the holes as integers: the units taken, which reserveScript may cut to
// what the node has). The fields between are packPart's: state, kind, and
// after the holes redo, counter, sku, item, order, token, each as partRef
// stores it. It appends a and b one after the other and returns dst and the position
// in it where b starts (a caller cuts a call's pieces from one string:
// appendPartPieces). It fails with ErrInvalid for a field holding a
// control byte.
func appendPartTemplate(dst []byte, orderID, token string, r partReq) ([]byte, int, error) {
	redo := ""
	if r.Kind == PartStock {
		redo = r.queue
	}
	kind := string(r.Kind)
	if kind == "" || hasControl(orderID, token, r.ID, r.SKU, r.ck, redo, kind) {
		return dst, 0, fmt.Errorf("%w: part %q: a field holds a control byte, or it has no kind", ErrInvalid, r.ID)
	}
	ref := func(dst []byte, name, v string) []byte {
		if v == "" {
			return dst
		}
		return appendPartRef(dst, name, v, r.ID, nil)
	}
	dst = append(dst, partStateCodes[PartPending]...)
	dst = append(append(append(dst, partUS...), kind...), partUS...)
	cut := len(dst)
	dst = ref(append(dst, partUS...), "redo", redo)
	dst = ref(append(dst, partUS...), "counter", r.ck)
	dst = append(append(dst, partUS...), partSKURef(r.SKU, r.ck)...)
	dst = ref(append(dst, partUS...), "item", strconv.Itoa(r.Item))
	dst = ref(append(dst, partUS...), "order", orderID)
	dst = append(append(dst, partUS...), partTokenRef(token, r.ID, orderID)...)
	return append(dst, partUS...), cut, nil
}

// appendLocalOrderPieces appends to dst the record localScript writes for
// an order reserved whole on its home: reserved, by attempt token,
// deadline created+ttl ms, with parts (layout 2, each offset a hole) and
// user, in pieces
//
//	pieces[0] .. CREATED .. pieces[1] .. OFFSET 1 .. pieces[2] .. …
//
// one after the other, one piece after each offset hole, in the order of
// parts; it appends to ends where each piece ends in dst. It fails with
// ErrInvalid for a field holding a control byte and for parts layout 2
// cannot carry.
func appendLocalOrderPieces(dst []byte, ends []int, orderID, token, digest, userID string, ttl int64, parts []OrderPart) ([]byte, []int, error) {
	if len(parts) == 0 || hasControl(orderID, token, digest, userID) {
		return dst, ends, fmt.Errorf("%w: order %q: no parts, or a field holds a control byte", ErrInvalid, orderID)
	}
	dst = appendOrderHead(dst, OrderReserved, token)
	ends = append(ends, len(dst))
	dst = append(strconv.AppendInt(append(dst, orderGS...), ttl, 10), orderGS...)
	dst = append(append(dst, digest...), orderGS...)
	for _, p := range parts {
		p.Offset = 0 // its hole
		hole, ok := 0, !hasControl(string(p.Kind), p.Node, p.Route, p.SKU, p.Incarnation, p.ID)
		if ok {
			dst, hole, ok = appendLayout2Entry(dst, orderID, token, p)
		}
		if !ok {
			return dst, ends, fmt.Errorf("%w: part %q: layout 2 cannot carry it, or a field holds a control byte", ErrInvalid, p.ID)
		}
		// the entry, cut at its offset field (the hole)
		ends = append(ends, hole)
	}
	if userID != "" {
		dst = append(append(dst, orderGS...), userID...)
	}
	return dst, append(ends, len(dst)), nil
}

// appendStagingOrderPieces appends to dst the record stageTakeScript
// writes: staging, by attempt token, deadline created+ttl ms, lease
// created+lease ms, with the promised part list as given (stored as
// packOrderParts stores it) and user, in two pieces around its created
// hole, one after the other; it returns dst and the position in it where
// the second piece starts. It fails with ErrInvalid for a field holding a
// control byte (the list: a GS).
func appendStagingOrderPieces(dst []byte, token, digest, userID string, ttl, lease int64, promised string) ([]byte, int, error) {
	if hasControl(token, digest, userID) || strings.Contains(promised, orderGS) {
		return dst, 0, fmt.Errorf("%w: a staging record's field holds a control byte", ErrInvalid)
	}
	list := ""
	if promised != "" {
		list = packOrderParts(promised, token)
	}
	dst = appendOrderHead(dst, OrderStaging, token)
	cut := len(dst)
	dst = append(strconv.AppendInt(append(dst, orderGS...), ttl, 10), orderGS...)
	dst = append(append(append(append(dst, digest...), orderGS...), list...), orderGS...)
	dst = append(append(dst, userID...), orderGS...)
	return strconv.AppendInt(dst, lease, 10), cut, nil
}

// stagedCommitValues are, for an order whose stage sent the staging
// record's pieces rec (appendStagingOrderPieces': head and token, then,
// after the created hole, GS ttl GS digest GS parts GS user GS lease) and
// ran at created (ms, by its home node's clock: the stage's deadline less
// its TTL), the value of its staging record and the reserved record
// order_commit_staged makes of it with the parts whose stored form is
// packed, up to its reserved_at, which the node appends: the same fields
// with the reserved status code and the parts replaced. What a carried
// commit compares and writes (order_commit_exact, carry.go), and created
// as a string, cut from one allocation. TestCommitExactAsSpliced holds
// them to the node's.
func stagedCommitValues(token string, rec [2]string, created int64, packed string) (staged, prefix, createdS string, err error) {
	if strings.Contains(packed, orderGS) {
		return "", "", "", fmt.Errorf("%w: a parts list holds a GS", ErrInvalid)
	}
	// the parts field of rec[1]: after its third GS, up to its fourth
	from := 0
	for range 3 {
		i := strings.Index(rec[1][from:], orderGS)
		if i < 0 {
			return "", "", "", fmt.Errorf("%w: a staging record's fields end before its parts", ErrInvalid)
		}
		from += i + len(orderGS)
	}
	to := strings.Index(rec[1][from:], orderGS)
	if to < 0 {
		return "", "", "", fmt.Errorf("%w: a staging record's fields end at its parts", ErrInvalid)
	}
	to += from
	b := make([]byte, 0, 2*(len(rec[0])+len(rec[1]))+len(packed)+48)
	b = strconv.AppendInt(b, created, 10)
	crEnd := len(b)
	b = append(append(append(b, rec[0]...), b[:crEnd]...), rec[1]...)
	stEnd := len(b)
	b = appendOrderHead(b, OrderReserved, token)
	b = append(append(b, b[:crEnd]...), rec[1][:from]...)
	b = append(append(append(b, packed...), rec[1][to:]...), orderGS...)
	s := frozen(b) // b is not written again
	return s[crEnd:stEnd], s[stEnd:], s[:crEnd], nil
}

// appendOrderHead appends a packed record's status code and token, up
// to its created field, to dst.
func appendOrderHead(dst []byte, st OrderState, token string) []byte {
	return append(append(append(dst, orderStatusCodes[st]), token...), orderGS...)
}

// appendPartPieces appends, for each of reqs, its part key and the two
// pieces of its record's template (appendPartTemplate), each piece's end
// marked in ends; a stock part gets two empty pieces when inline (it has
// no record: inline.go). A call's strings are appended so to one buffer
// and cut from one string (pieceCutter).
func appendPartPieces(buf []byte, ends []int, orderID, token string, reqs []partReq, inline bool) ([]byte, []int, error) {
	for _, r := range reqs {
		buf = append(append(buf, partKeyPrefix...), r.ID...)
		ends = append(ends, len(buf))
		cut := len(buf)
		if !inline || r.Kind != PartStock {
			var err error
			if buf, cut, err = appendPartTemplate(buf, orderID, token, r); err != nil {
				return buf, ends, err
			}
		}
		ends = append(ends, cut, len(buf))
	}
	return buf, ends, nil
}

// pieceCutter hands out the pieces of one string s, one after the other:
// s[0:ends[0]], s[ends[0]:ends[1]], and so on. (s is an argument of next,
// not a field: a field beside ends would make the pieces' escape carry
// ends' array, which callers keep on their stack, to the heap.)
type pieceCutter struct {
	ends []int
	i    int // the next piece's index in ends
}

// next is the next piece of s.
func (c *pieceCutter) next(s string) string {
	start := 0
	if c.i > 0 {
		start = c.ends[c.i-1]
	}
	c.i++
	return s[start:c.ends[c.i-1]]
}

// frozen is buf as a string, without copying it: the pieces of a call's
// keys and arguments are cut from one buffer that nothing writes once it
// is built (its builder returns it and drops it), a group call's counts
// (group.go), an item's spread key (spreadKey), a parts list with its
// offsets filled in (withOffsets). buf must never change
// again while the string is in use.
func frozen(buf []byte) string {
	return unsafe.String(unsafe.SliceData(buf), len(buf))
}
