package inventory

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/topology"
)

// One-script reservations.
//
// An order whose items all have the order's home node as their first
// choice (itemCandidates offers every item to the home node first when the
// item's route has it and it is enabled and usable there; an order with a
// user, to the user's quota node first), and which that
// node can meet in full, needs no other node: its record and its parts are
// written by one script, atomically (localScript), instead of
// begin → take → commit. With every route on every node this is every
// order whose home node holds the stock. The script takes anything only when the order is free (no
// record, or a failed attempt's that lists no parts: one that does, a
// one-round attempt's, is the general path's to replace, staged.go
// "Replacing a failed record") and every part can be met in full there;
// otherwise it writes nothing and the order takes the one-round or the
// general path, which handles existing records, splits and refusals (an
// order that has a record goes straight to the general path). Being one
// script, it has
// no intermediate state: a crash before it runs leaves nothing, after it
// the order is reserved; a timeout is an unknown outcome that a retry of
// the order id resolves (it finds the record), and a Cancel that comes
// first leaves a tombstone the script respects.
//
// The stock parts this path takes get no part record: they are inline
// (inline.go holds the rule); a quota part has its record.
//
// Per-user quota parts take this path only when the user's quota node is
// the home node too and the topology is stable. A quota part over the
// user's limit refuses the order here, writing nothing, when the user
// holds none (no attempt of the order can hold them:
// limitMayBeOwn, soldout.go "Per-user limits"); otherwise the general path
// answers, behind its record.

// localScript reserves a whole order on its home node in one step.
//
// An order of one stock part and no user (one item, no user id: the
// usual order) is sent in a short layout (localOneCall): KEYS 1 stamp, 2
// order key; ARGV 4 the order record's template (as below) up to its
// created, 5 the part's id, and 6 the template's tail after the offset,
// only when it is not the usual one (lua/local.lua says which); its
// context (group.go, "Contexts") CKEYS 1 the part's counter, 2 its redo
// queue, CARGV 1 ttl ms, 2 the template between its created and the
// part's offset, 3 the part's want. Any other order is sent in the general
// layout, which has no context:
//
// KEYS: 1 stamp, 2 order key, then per part: part key (not read for a
// stock part, which is inline and whose key cannot exist yet:
// lua/take_whole.lua), counter key, and
// redo queue (kind s) or stock hash holding the limit (kind q). The
// pending index and the redo offsets hash it names itself (PENDING and
// REDO_OFFSETS of lua/prelude.lua), as the other reserve scripts do
// (reserveScript, stageTakeScript), and a part's grace too (PART_GRACE):
// in a group call of 20 orders every key or argument an order brings
// costs the node about 1 100 instructions (callgrind).
// ARGV: 4 user, 5 ttl ms, then the order record's template
// (appendLocalOrderPieces, rectemplate.go): 6 the piece before its created
// field, 7 the one after it, and per part the piece after that part's
// offset; then per part the arguments lua/take_whole.lua reads (id, kind,
// want, and for a quota part its record's template's two pieces,
// appendPartPieces; a stock part is inline: no record, inline.go). An order in
// the short layout takes its part with plan_parts' steps for it, then the
// record, then take_at's (written out in lua/local.lua: lua/take_whole.lua
// says why), any other with plan_parts and write_parts.
// The record is written reserved, with no TTL (orderrec.go, "TTL"); in
// the short layout it is set only if the key is missing (SET NX), the head
// of a record already there read only then, and only to answer existing
// or replace it as the general path does (lua/local.lua).
// Returns {"existing"} (the order has a record: nothing written),
// {"short"} (no record, and a stock part is short here or a limited SKU
// has no user: nothing written, soldout.go may refuse without a write),
// {"limit", part position, held, limit} (nothing written: localLimit),
// {"fallback"} (nothing written), or, reserved, one string:
// "reserved:<deadline ms>:<offset>" with an offset per part, each after a
// ':' (0 for a quota part; a string, not a table: in a group it costs the
// node less, lua/prelude.lua's reserved_head).
var localScript = newGroupedScript("reserve-local", true, luaFile("local.lua")).withContext(localContext)

// errHasRecord is reserveLocal's word that the order already has a record.
var errHasRecord = errors.New("inventory: the order has a record")

// errShortSeen is reserveLocal's and reserveStaged's word that the order
// found a stock part short (or a limited SKU without a user) and that
// nothing of the attempt can be reserved (it wrote nothing, or its parts
// are rolled back): refuseShort (reserve_plan.go) may settle the order with
// reads alone before the general path writes.
var errShortSeen = errors.New("inventory: a part was short and nothing was written")

// reserveLocal tries the one-script path (see the file comment). ok is
// false when the order must take another path; then nothing was written,
// and err is errHasRecord when the order already has a record (a retry:
// only the general path answers for an existing record), or errShortSeen
// when it has none and the home node is short.
func (inv *Inventory) reserveLocal(ctx context.Context, home *node.Node, orderID string, items []Item, userID string, ttl time.Duration) (res Reservation, ok bool, err error) {
	token := newToken()
	// the usual order's requests and parts in arrays of this frame
	var reqArr [2]partReq
	var partArr [2]part
	reqs, ok := inv.localReqs(ctx, reqArr[:0], home, orderID, token, items, userID)
	if !ok {
		return Reservation{}, false, nil
	}
	keys, args, parts, err := inv.localCall(partArr[:0], orderID, token, digestOf(items, userID), userID, ttl, reqs)
	if err != nil {
		return Reservation{}, true, err
	}
	v, err := inv.run(ctx, home, localScript, keys, args...)
	if err != nil {
		if outcomeUnknown(err) {
			return Reservation{}, true, fmt.Errorf("%w: order %q: outcome unknown, retry Reserve with the same order id: %w", ErrUnavailable, orderID, err)
		}
		return Reservation{}, true, err
	}
	var ints [8]int64 // the reply's numbers: no allocation for up to 7 parts
	st, dl, offs, err := decodeLocal(home.Name(), v, len(reqs), ints[:])
	if err == nil && st == localLimit {
		ok, err := localOver(home.Name(), reqs, userID, offs)
		return Reservation{}, ok, err
	}
	if err != nil {
		// The script ran and its answer cannot be read: as a timeout.
		return Reservation{}, true, fmt.Errorf("%w: order %q: outcome unknown, retry Reserve with the same order id: %w", ErrUnavailable, orderID, err)
	}
	switch st {
	case localExisting:
		return Reservation{}, false, errHasRecord
	case localFallback:
		return Reservation{}, false, nil
	case localShort:
		return Reservation{}, false, errShortSeen
	}
	for i := range parts {
		if parts[i].Kind == PartStock {
			parts[i].Offset = offs[i]
		}
	}
	inv.stats.local.Add(1)
	return Reservation{OrderID: orderID, Receipts: receipts(parts), Deadline: time.UnixMilli(dl)}, true, nil
}

// localOver answers a localLimit reply whose values are over: the
// position of the quota part among reqs (1-based), what the user holds
// and the limit. It refuses the order (ok, ErrLimitExceeded) unless the
// units may be another attempt's of the same order (limitMayBeOwn): then
// ok is false and the general path answers, behind its record. A
// position out of range is a malformed reply.
func localOver(nodeName string, reqs []partReq, userID string, over []int64) (ok bool, err error) {
	i := int(over[0]) - 1
	if i < 0 || i >= len(reqs) || reqs[i].Kind != PartQuota {
		r := newReplyReader(nodeName, localScript.name)
		r.fail(1, fmt.Sprintf("the position of a quota part among %d parts", len(reqs)), over[0])
		return true, r.err
	}
	rep := reply{state: takeLimit, qty: over[1], limit: over[2]}
	if limitMayBeOwn(reqs[i], rep) {
		return false, nil
	}
	return true, refusal(reqs[i], rep, userID)
}

// decodeLocal reads localScript's reply to k part requests: {"existing"},
// {"short"}, {"fallback"}, {"limit", part position, held, limit} (the
// three numbers in offsets), or "reserved:<deadline ms>:<offset>…" with
// k offsets (replyReader.headInts). The numbers are appended to buf (the
// caller's array, so that the reply costs no allocation: offsets is a
// part of it).
func decodeLocal(nodeName string, v any, k int, buf []int64) (st localStatus, deadline int64, offsets []int64, err error) {
	r := newReplyReader(nodeName, localScript.name)
	if s, ok := v.(string); ok {
		ints := r.headInts(buf[:0], s, string(localReserved), 1+k)
		if r.err != nil {
			return "", 0, nil, r.err
		}
		return localReserved, ints[0], ints[1:], nil
	}
	raw := r.list(v, -1)
	if r.err == nil && len(raw) == 0 {
		r.fail(-1, "a list starting with a status word", v)
	}
	if r.err != nil {
		return "", 0, nil, r.err
	}
	switch st = localStatus(r.str(raw, 0)); st {
	case localExisting, localFallback, localShort:
		r.list(v, 1)
		return st, 0, nil, r.err
	case localLimit:
		raw = r.list(v, 4)
		if r.err != nil {
			return "", 0, nil, r.err
		}
		offsets = append(buf[:0], r.int(raw, 1), r.int(raw, 2), r.int(raw, 3))
		return st, 0, offsets, r.err
	default:
		if r.err == nil {
			r.fail(0, "existing, short, fallback or limit (reserved is a string)", raw[0])
		}
		return "", 0, nil, r.err
	}
}

// localReqs are the parts of an order reserved whole on home under token,
// appended to reqs, or false when some item's first choice is another
// node (or the user's quota node is, or the topology is migrating and the
// order has a user).
func (inv *Inventory) localReqs(ctx context.Context, reqs []partReq, home *node.Node, orderID, token string, items []Item, userID string) ([]partReq, bool) {
	for i, it := range items {
		set, _ := inv.set(ctx, it.Route)
		if !inv.itemHomeFirst(set, home, userID) {
			return nil, false
		}
		reqs = append(reqs, partReq{
			part:  part{ID: stockPartID(orderID, token, i), Node: home.Name(), Kind: PartStock, Item: i, Route: it.Route, SKU: it.SKU, Qty: it.Quantity},
			queue: inv.redoQueue(it.Route, it.SKU), ck: stockKey(it.Route, it.SKU),
		})
	}
	if userID == "" {
		return reqs, true
	}
	if inv.topology(ctx).phase != topology.PhaseStable {
		return nil, false
	}
	for _, q := range inv.quotaParts(ctx, orderID, token, items, userID) {
		if q.node != home {
			return nil, false
		}
		reqs = append(reqs, q.req)
	}
	return reqs, true
}

// localCall is localScript's keys and arguments for reqs, and the parts
// they take, appended to parts (offsets 0: the script hands them out): in
// the short layout for one stock part and no user (localOneCall), else in
// the general one. It fails with ErrInvalid when a record has no template
// (rectemplate.go). The strings it builds (the order and part keys, the
// record templates) are cut from one allocation.
func (inv *Inventory) localCall(parts []part, orderID, token, digest, userID string, ttl time.Duration, reqs []partReq) ([]string, []any, []part, error) {
	if len(reqs) == 1 && reqs[0].Kind == PartStock && userID == "" {
		return localOneCall(parts, orderID, token, digest, ttl, reqs[0])
	}
	return localGeneralCall(parts, orderID, token, digest, userID, ttl, reqs)
}

// localGeneralCall is localCall in localScript's general layout, which
// every order may take (localCall sends it only those the short layout
// cannot carry).
func localGeneralCall(parts []part, orderID, token, digest, userID string, ttl time.Duration, reqs []partReq) ([]string, []any, []part, error) {
	for _, r := range reqs {
		p := r.part
		if p.Kind == PartStock {
			p.Redo = r.queue
		}
		parts = append(parts, p)
	}
	var endsArr [16]int
	// about what the pieces take (a longer buffer is allocated for
	// nothing on every order): the order key and the record's template
	// (token, TTL, digest, user, separators), then per part its key, id
	// and entry in the parts list (kind, item, node, route, SKU, quantity,
	// redo field)
	size := 48 + len(orderKeyPrefix) + len(orderID) + len(digest) + len(userID)
	for _, r := range reqs {
		size += 64 + len(partKeyPrefix) + 2*len(orderID) + len(r.Route) + len(r.SKU)
	}
	buf := make([]byte, 0, size)
	buf = append(append(buf, orderKeyPrefix...), orderID...)
	ends := append(endsArr[:0], len(buf))
	buf, ends, err := appendLocalOrderPieces(buf, ends, orderID, token, digest, userID, ms(ttl), parts)
	if err != nil {
		return nil, nil, nil, err
	}
	// its stock parts are inline: no record, so no template (inline.go)
	if buf, ends, err = appendPartPieces(buf, ends, orderID, token, reqs, true); err != nil {
		return nil, nil, nil, err
	}
	s, c := frozen(buf), pieceCutter{ends: ends}
	box := newArgBox(3+len(parts)+3*len(reqs), 1+len(reqs), 1+3*len(reqs), 4+len(parts)+5*len(reqs))
	keys := append(box.keySlice(), c.next(s))
	args := box.argSlice()
	args = append(args, box.str(userID), box.int(ms(ttl)))
	for range 2 + len(parts) {
		args = append(args, box.str(c.next(s)))
	}
	for _, r := range reqs {
		keys = append(keys, c.next(s), r.ck, r.queue)
		args = append(args, box.str(r.ID), kindArg(r.Kind), box.int(r.Qty))
		ra, rb := c.next(s), c.next(s)
		if r.Kind != PartStock { // a stock part is inline: no record, no template
			args = append(args, box.str(ra), box.str(rb))
		}
	}
	return keys, args, parts, nil
}

// localOneCall is localCall for an order of one stock part and no user,
// the usual one, in localScript's short layout: the order key, then its
// context's keys (the part's counter and redo queue); the template's
// piece before its created, the part's id, and the template's tail only
// when it is not localTail, then its context's arguments (the TTL, the
// record's template's piece between its created and the part's offset,
// the part's quantity). The context is what the orders of a hot SKU
// share, which a group sends once for a run of them (group.go). It
// sends neither the part's key (the part is inline: the script never
// reads its key), nor its kind, nor an empty user, nor the usual tail:
// four keys and arguments fewer than the general layout, each of which
// costs the node about 800 instructions in a group call.
func localOneCall(parts []part, orderID, token, digest string, ttl time.Duration, r partReq) ([]string, []any, []part, error) {
	p := r.part
	p.Redo = r.queue
	parts = append(parts, p)
	var endsArr [4]int
	// about what the pieces take: the order key and the record's
	// template (token, TTL, digest, separators, the part's entry)
	buf := make([]byte, 0, 112+len(orderKeyPrefix)+2*len(orderID)+len(digest)+len(r.Route)+len(r.SKU))
	buf = append(append(buf, orderKeyPrefix...), orderID...)
	ends := append(endsArr[:0], len(buf))
	buf, ends, err := appendLocalOrderPieces(buf, ends, orderID, token, digest, "", ms(ttl), parts)
	if err != nil {
		return nil, nil, nil, err
	}
	s, c := frozen(buf), pieceCutter{ends: ends}
	box := newArgBox(4, 2, 3, 6)
	keys := append(box.keySlice(), c.next(s), r.ck, r.queue)
	head, mid, tail := c.next(s), c.next(s), c.next(s)
	args := append(box.argSlice(), box.str(head), box.str(r.ID))
	if tail != localTail {
		args = append(args, box.str(tail))
	}
	args = append(args, box.int(ms(ttl)), box.str(mid), box.int(r.Qty))
	return keys, args, parts, nil
}

// localContext is localScript's context rule (group.go, "Contexts"):
// the short layout's (localOneCall: the only one with 3 keys, the
// general layout's being 1 + 3 per part) is its last 2 keys and 3
// arguments; the general layout has none.
func localContext(nk, na int) (int, int) {
	if nk == 3 {
		return 2, 3
	}
	return 0, 0
}

// localTail is the tail of a layout 2 part entry after its offset
// (appendLayout2Entry) for a part with no incarnation and the id the
// reserve paths derive, which every part of the local path is: LOCAL_TAIL
// in lua/prelude.lua, which localOneCall leaves out.
const localTail = partsUS + partsUS

// kindArg is kind as a script argument (a string), without boxing a new
// string for the kinds there are.
func kindArg(kind PartKind) any {
	switch kind {
	case PartStock:
		return string(PartStock)
	case PartQuota:
		return string(PartQuota)
	}
	return string(kind)
}

// refusal returns the error that refuses an order for good on a take
// reply, whatever the other nodes hold: a quota part over the user's limit
// (ErrLimitExceeded), or a stock part of a SKU with a per-user limit
// taken without a user (ErrLimitExceeded too); nil for any other reply.
func refusal(r partReq, rep reply, userID string) error {
	switch {
	case r.Kind == PartQuota && rep.state == takeLimit:
		return limitExceeded(userID, rep.qty, r.Route, r.SKU, rep.limit, r.Qty)
	case r.Kind == PartStock && rep.limit > 0 && userID == "":
		return fmt.Errorf("%w: items[%d] sku %q (route %q) has a per-user limit of %d: an order of it needs user_id",
			ErrLimitExceeded, r.Item, r.SKU, r.Route, rep.limit)
	}
	return nil
}

// limitExceeded is the ErrLimitExceeded of a quota part that wants want of
// route/sku while userID holds held there, over limit.
func limitExceeded(userID string, held int64, route, sku string, limit, want int64) error {
	return fmt.Errorf("%w: user %q holds %d of sku %q (route %q), limit %d, order wants %d",
		ErrLimitExceeded, userID, held, sku, route, limit, want)
}
