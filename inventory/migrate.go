package inventory

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/shardis/shardis/node"
)

// This file moves what a topology change relocates: order records (on
// touch, and by [ApplyTopology]'s sweep), and counters (quota counters
// whose home moved, a leaving node's stock) by transfer records. The rules
// that make each step safe are in epoch.go.

// orderMoveOutScript marks an order record moved (data kept, frozen) and
// returns it. KEYS: 2 order key. ARGV: 4 the epoch token of the move; 5
// (moveOrder's and a put back's, not a retirement's) the retention in
// whole seconds: a copy marked at ARGV 4 before, undecided, is moved no
// more (answered "none", given the retention if it has no TTL) once its
// live record may have lived out its retention at the new home (from
// the order's due, two part graces of clock skew told apart): installed
// there again it would bring the order back undecided
// (TestMovedCopyOutlivingItsRecordIsNotReinstalled,
// TestPutBackOfACopyOutlivingItsRecordIsRefused).
// KEYS: 3 (a retirement's only, apply_retire.go) the memory of a put back
// of the change (putBackKey). Returns {"kept"} (KEYS[3] exists: nothing
// written), {"none"} (no live record, or only a dead mark of an older
// epoch), or {"moved", pttl ms, the record's packed value, frozen}
// (orderrec.go: a record of the hash layout is marked in the packed one);
// pttl is the TTL the record has where it is installed: -1 (none) for a
// reserved one, whatever its copy here has (expireMoved), else the
// copy's; frozen is 1 when the copy here has no TTL, else 0.
var orderMoveOutScript = newScript("order-move-out", true, luaFile("order_move_out.lua"))

// orderInstallScript writes a moved record, less its moved mark (and, for
// a reserved record without a reserved_at, with its created as one:
// inline.go), unless the key holds a live one. KEYS: 2 order key. ARGV: 4
// pttl ms, 5 the record's packed value (orderMoveOutScript's), 6
// "replace" (a put back, apply_putback.go) or absent; with "replace",
// KEYS: 3 the memory of the put back (putBackKey), written for ARGV 7 s.
// Returns "installed" or "exists": without "replace", a live record is
// kept as it is ("exists"); with it, a live record is replaced (its
// inline parts get their records first), "exists" then meaning it held
// that value already.
var orderInstallScript = newScript("order-install", true, luaFile("order_install.lua"))

// orderInstallInlineScript is orderInstallScript without the reserved_at
// it gives: sent in its place only when the injected faults re-introduce
// [MutationInstallInline] (test-only, faults.go).
var orderInstallInlineScript = newScript("order-install", true,
	mustCut(luaFile("order_install.lua"), "if t.status == 'reserved' and not t.reserved_at then t.reserved_at = t.created end\n"))

// orderMovedExpireScript gives copies marked moved the records'
// retention (expireMoved, expireCopies). KEYS: 2.. the order keys. ARGV:
// 4 the retention in ms, 5.. each key's mark (the epoch token of its move
// or retirement), in the keys' order. Returns how many got the TTL: only
// a copy marked at its mark that has no TTL gets it (one with a TTL keeps
// its own; one gone, or not marked at that token, is left as it is).
var orderMovedExpireScript = newReleaseScript("order-moved-expire", luaFile("order_moved_expire.lua"))

// quotaReadScript reads a quota counter. KEYS: 2 counter. Returns it.
var quotaReadScript = newScript("quota-read", false, luaFile("quota_read.lua"))

// errCrashed is what a step stopped at a crash point returns (faults.go).
var errCrashed = fmt.Errorf("%w: at a crash point", ErrCrashed)

// moveOrder moves order X's record from the node named from to dest (see
// epoch.go) and reports whether this call installed it there (false when
// there was nothing to move, or an earlier move or a rerun's had
// installed it). It is idempotent and safe to run concurrently.
func (inv *Inventory) moveOrder(ctx context.Context, v *view, orderID, from string, dest *node.Node) (bool, error) {
	src, err := inv.r.Node(from)
	if err != nil {
		return false, fmt.Errorf("%w: %w: order %q: its record is being moved off node %s, which left the topology; retry when `shardis topology apply` has finished",
			ErrUnavailable, ErrTopology, orderID, from)
	}
	if !inv.usable(src) {
		return false, fmt.Errorf("%w: order %q: its record is being moved from node %s, which is unavailable: %s",
			ErrUnavailable, orderID, from, inv.unusableReason(src))
	}
	out, err := inv.run(ctx, src, orderMoveOutScript, []string{orderKey(orderID)}, v.token, seconds(inv.cfg.Retention))
	if err != nil {
		return false, err
	}
	m, err := decodeMoveOut(src.Name(), out)
	if err != nil || !m.moved {
		return false, err
	}
	if inv.crash(ctx, "move-out") {
		return false, errCrashed
	}
	install := orderInstallScript
	if inv.mutated(MutationInstallInline) {
		install = orderInstallInlineScript // test-only (faults.go)
	}
	out, err = inv.run(ctx, dest, install, []string{orderKey(orderID)}, m.pttl, m.rec)
	if err != nil {
		return false, err
	}
	installed, err := decodeInstall(dest.Name(), out)
	if err != nil {
		return false, err
	}
	if inv.crash(ctx, "install") {
		return false, errCrashed
	}
	if m.frozen {
		inv.expireMoved(ctx, src, v.token, v.token, orderID)
	}
	return installed, nil
}

// expireMoved gives order id's copy on n, marked moved at mark and
// without a TTL, the records' retention (orderMovedExpireScript), at n's
// token tok. A failure is logged, not returned: the move or retirement
// is done, and nothing is lost (Retire gives the copy its TTL on the
// next apply: expireFrozen). A copy left so, or given its TTL only by a
// later move after the order came due, may outlive the order's live
// record at its new home while the apply still migrates: a move then
// would install it again, undecided (the order confirmed there, its
// record lived out its retention, back reserved with no TTL: the expiry
// cancelled its part whose settle never landed), so the move out moves
// such a copy no more once that record may have lived out its retention
// (order_move_out.lua, ARGV 5;
// TestMovedCopyOutlivingItsRecordIsNotReinstalled).
//
// When: once the order's record is live at its new home (its install
// answered "installed" or "exists"), never before, so the copy outlives
// any crash between its mark and the install, which a rerun or a touch
// finishes from it; a retired copy (Retire, apply_retire.go: a stale
// record no install follows) right after its mark.
//
// Why: a copy whose order was reserved when it was marked had no TTL (a
// reserved record has none), so each apply left one frozen key per such
// order for good. A moved copy serves only a put back (apply_putback.go,
// reinstall) onto a new home that went back to data older than the
// install, by an apply that runs within the retention after the
// install; the retention is longer than any reservation (config:
// retention above max_reservation_ttl), so the copy is kept until its
// order came due. A crash between the install and this call (crash
// point "install") leaves the copy without a TTL until the next move of
// the order while the apply is under way (a rerun's step 3, or a touch)
// gives it one, or the next apply.
func (inv *Inventory) expireMoved(ctx context.Context, n *node.Node, tok, mark, id string) {
	inv.expireCopies(ctx, n, tok, []string{id}, []string{mark})
}

// expireCopies is expireMoved for the copies of ids on n, each marked at
// the mark of the same index, in one script call.
func (inv *Inventory) expireCopies(ctx context.Context, n *node.Node, tok string, ids, marks []string) {
	keys := make([]string, len(ids))
	args := make([]any, 0, 1+len(marks))
	args = append(args, ms(inv.cfg.Retention))
	for i, id := range ids {
		keys[i] = orderKey(id)
		args = append(args, marks[i])
	}
	out, err := inv.runAt(ctx, n, orderMovedExpireScript, tok, keys, args...)
	if got, ok := out.(int64); err == nil && (!ok || got < 0 || got > int64(len(ids))) {
		r := newReplyReader(n.Name(), orderMovedExpireScript.name)
		r.fail(-1, fmt.Sprintf("a count from 0 to %d", len(ids)), out)
		err = r.err
	}
	if err != nil {
		inv.log.Warn("inventory: order copies marked moved keep no TTL until the next apply", "order", ids[0], "copies", len(ids), "node", n.Name(), "err", err)
	}
}

// decodeInstall reads orderInstallScript's reply: "installed" (true) or
// "exists" (false: the node holds a live record, kept, or, replacing, that
// value already).
func decodeInstall(nodeName string, v any) (bool, error) {
	switch v {
	case "installed":
		return true, nil
	case "exists":
		return false, nil
	}
	r := newReplyReader(nodeName, orderInstallScript.name)
	r.fail(-1, `"installed" or "exists"`, v)
	return false, r.err
}

// movedOut is orderMoveOutScript's reply: whether it kept the record (a
// put back of the change wrote it) or marked it, and then the TTL to
// install it with (ms, -1 for none), its packed value, and whether the
// copy it marked has no TTL.
type movedOut struct {
	kept   bool
	moved  bool
	pttl   int64
	rec    string
	frozen bool
}

// decodeMoveOut reads orderMoveOutScript's reply: {"kept"}, {"none"}, or
// {"moved", pttl ms, the record's packed value, frozen 1 or 0}; the value
// must decode (unpackOrderValue) and carry a moved mark.
func decodeMoveOut(nodeName string, v any) (movedOut, error) {
	r := newReplyReader(nodeName, orderMoveOutScript.name)
	raw := r.list(v, -1)
	if r.err == nil && len(raw) == 0 {
		r.fail(-1, `{"kept"}, {"none"} or {"moved", pttl, record, frozen}`, v)
	}
	if r.err != nil {
		return movedOut{}, r.err
	}
	switch word := r.str(raw, 0); word {
	case "kept", "none":
		r.list(v, 1)
		return movedOut{kept: word == "kept"}, r.err
	case "moved":
	default:
		if r.err == nil {
			r.fail(0, `"kept", "none" or "moved"`, raw[0])
		}
		return movedOut{}, r.err
	}
	raw = r.list(v, 4)
	if r.err != nil {
		return movedOut{}, r.err
	}
	m := movedOut{moved: true, pttl: r.int(raw, 1), rec: r.str(raw, 2), frozen: r.flag(raw, 3)}
	if r.err != nil {
		return movedOut{}, r.err
	}
	if f, err := unpackOrderValue(m.rec); err != nil || f["moved"] == "" {
		r.fail(2, "a packed order record with a moved mark", m.rec)
	}
	return m, r.err
}

// quotaElsewhere returns, while migrating, what the user's previous quota
// node of a route still counts for (route, sku), so a reserve counts it
// too: 0 when the home did not move, -1 when it cannot be read.
func (inv *Inventory) quotaElsewhere(ctx context.Context, v *view, route, sku, userID, curHome string) int64 {
	if !v.migrating() {
		return 0
	}
	ring := v.prevRoute[route]
	if ring == nil {
		return 0 // a new route: no counter can exist elsewhere
	}
	prev := ring.Name(ring.Home("user:" + userID))
	if prev == curHome {
		return 0
	}
	n, err := inv.r.Node(prev)
	if err != nil || !inv.usable(n) {
		return -1
	}
	out, err := inv.run(ctx, n, quotaReadScript, []string{quotaKey(route, sku, userID)})
	if err != nil {
		return -1
	}
	held, err := asInt64(n, quotaReadScript, out)
	if err != nil {
		return -1
	}
	return held
}

// Transfers move counters between nodes exactly once. A transfer is
// named by its id (xferID: the epoch, the kind, the source node and the
// counter key) and goes through three states, each entered by one script:
//
//	(none) ──out──▶ recorded ──in──▶ applied ──done──▶ finished
//
//   - out (source): records the amounts {a, c, l} and the destination in
//     the transfer record (xferKey); the counter is left as is. A stock
//     hash with reserved units is busy (nothing written): it moves only
//     once nothing pending counts it, after which nothing changes it.
//   - in (destination): adds the amounts and writes the applied marker
//     (xferMarkerKey) in the same script.
//   - done (source): subtracts the amounts and drops the transfer record
//     in the same script.
//
// Between in and done the units count on both nodes (an order may be
// refused, never oversold; a leaving node's stock is out of every new
// instance's reach anyway).
//
// The rerun rule: an interrupted transfer is finished by running it again
// with the same id, and a rerun after a crash at any point applies each
// change at most once. That holds because
//   - every step is one script that validates everything it reads
//     (record, amounts, counter fields: int, lua.go) before its first
//     write, so it applies whole or not at all (Redis does not undo the
//     writes of a script that fails halfway);
//   - every step writes its change together with the fact the next run
//     checks: out is a no-op returning the recorded amounts while the
//     record exists, in is a no-op while the marker exists, done is a
//     no-op once the record is gone (it is dropped with the subtraction);
//   - integers reach commands through the prelude's I() (string.format
//     '%d'), never as Lua numbers: Redis formats those with "%.17g", and
//     the negation of 0 is Lua's -0, sent as "-0", which INCRBY and
//     HINCRBY refuse (safety issue item A3: that refusal came after the
//     first HINCRBY had landed, so every rerun subtracted again).
//
// The rule reads a record or a marker it finds as this transfer's, and
// ids name the epoch, not the apply's attempt (xferID): after every node
// went back below an epoch, the same topology applied again runs at the
// same token, as another attempt, under the same ids. That is safe
// because no record or marker of an epoch E is ever on a node below E:
// out and in run at the apply's token only (the prelude refuses any other
// caller), so a node holds them only from its bump to E on; a node goes
// back only with a whole copy of its data (its topology record with it,
// below E: none of them); and the take back of a move forward, the one
// transfer script run at a node's own token below E, leaves none
// (apply_takeback.go: TestTakeBackLeavesNoTransferRecord). A record left
// there would be read by the next attempt's out as its own, whatever was
// sold or loaded on the node at the older topology since.
//
// The one bound: a destination forgets an applied transfer after
// xferMarkerTTL, so a transfer left between in and done must be finished
// (the apply rerun) within it.

// xferKind is what a transfer moves.
type xferKind string

const (
	xferQuota xferKind = "quota" // a per-user quota counter (string)
	xferStock xferKind = "stock" // a stock hash's available, confirmed, loaded
)

// xferOutScript records a transfer. KEYS: 2 counter, 3 transfer record.
// ARGV: 4 kind, 5 destination node. Returns {state, available or quota,
// confirmed, loaded}: state "recorded" with the recorded amounts (the
// record existed or is written now), "none" (nothing to move: nothing
// written) or "busy" (a stock hash with reserved units, their number in
// place of available: nothing written).
var xferOutScript = newScript("xfer-out", true, xferAmountsLua+luaFile("xfer_out.lua"))

// xferInScript applies a transfer once. KEYS: 2 counter, 3 applied
// marker. ARGV: 4 kind, 5 available/quota, 6 confirmed, 7 loaded,
// 8 marker ttl s. Returns "done" or "already".
var xferInScript = newScript("xfer-in", true, luaFile("xfer_in.lua"))

// xferDoneScript ends a transfer on its source: subtracts the recorded
// amounts and drops the record, in one script, after validating all of
// it. KEYS: 2 counter, 3 transfer record. Returns "done" or "none" (no
// record: finished before, nothing written).
var xferDoneScript = newScript("xfer-done", true, luaFile("xfer_done.lua"))

// xferDoneNegZeroScript is xferDoneScript as it was before the fix of
// safety issue item A3, for tests and the schedule explorer only: run in
// its place when the injected faults re-introduce
// [MutationXferNegativeZero]. It passes -0 (Lua's negation of 0) as a
// command argument, which Redis sends as "-0" and HINCRBY refuses, after
// the first HINCRBY landed.
var xferDoneNegZeroScript = newScript("xfer-done", true, luaFile("xfer_done_neg_zero.lua"))

// xferAmountsLua defines xfer_amounts for the transfer scripts that read
// a counter before they move it (xferOutScript, xferTakeBackScript), and
// refuses a transfer kind other than "stock" or "quota" (ARGV 4).
var xferAmountsLua = luaFile("lib_xfer_amounts.lua")

// xferTakeBackScript takes back a counter a transfer moved off a node
// whose older copy brought it back (apply_takeback.go): out and done in
// one script, leaving no transfer record. KEYS: 2 counter, 3 transfer
// record. ARGV: 4 kind. Returns {state, available or quota, confirmed,
// loaded}: state "taken" with what it subtracted (all the counter held;
// any record of the id dropped), "none" (nothing held: any record of the
// id dropped) or "busy" (a stock hash with reserved units, their number
// in place of available: nothing written).
var xferTakeBackScript = newScript("xfer-take-back", true, xferAmountsLua+luaFile("xfer_take_back.lua"))

// xferMarkerTTL is how long a destination remembers an applied transfer:
// longer than any interrupted apply is expected to wait for its rerun.
const xferMarkerTTL = 30 * 24 * 3600

// errXferBusy is returned by transfer when the source's stock hash still
// has reserved units: retry once its pending parts are settled.
var errXferBusy = errors.New("stock still reserved")

// transfer moves counter key from src to dst exactly once under id. It
// returns whether this call carried a transfer through (false when there
// was nothing to move: none left, or moved before), or an error wrapping
// errXferBusy (nothing written).
func (inv *Inventory) transfer(ctx context.Context, kind xferKind, id, key string, src, dst *node.Node) (bool, error) {
	rec, marker := xferKey(id), xferMarkerKey(id)
	state, v, err := inv.xferOut(ctx, src, "", kind, id, key, dst)
	if err != nil {
		return false, err
	}
	switch state {
	case xferNone:
		return false, nil
	case xferBusy:
		return false, fmt.Errorf("%w: node %s: %s has %d reserved units", errXferBusy, src.Name(), key, v[0])
	}
	if inv.crash(ctx, "xfer-out") {
		return false, errCrashed
	}
	if _, err := inv.run(ctx, dst, xferInScript, []string{key, marker}, string(kind), v[0], v[1], v[2], xferMarkerTTL); err != nil {
		return false, err
	}
	if inv.crash(ctx, "xfer-in") {
		return false, errCrashed
	}
	done := xferDoneScript
	if inv.mutated(MutationXferNegativeZero) {
		done = xferDoneNegZeroScript // test-only (faults.go)
	}
	if _, err := inv.run(ctx, src, done, []string{key, rec}); err != nil {
		return false, err
	}
	return true, nil
}

// xferOut runs a transfer's out on src (at its token tok, or the
// instance's when ""), to dst, and returns its state and the three
// amounts (the reserved units in place of available when busy).
func (inv *Inventory) xferOut(ctx context.Context, src *node.Node, tok string, kind xferKind, id, key string, dst *node.Node) (xferOutState, []int64, error) {
	keys := []string{key, xferKey(id)}
	var out any
	var err error
	if tok == "" {
		out, err = inv.run(ctx, src, xferOutScript, keys, string(kind), dst.Name())
	} else {
		out, err = inv.runAt(ctx, src, xferOutScript, tok, keys, string(kind), dst.Name())
	}
	if err != nil {
		return "", nil, err
	}
	return xferReply(src.Name(), xferOutScript, out, xferRecorded)
}

// xferReply reads the reply of script (xferOutScript, its done state
// xferRecorded; xferTakeBackScript, xferTaken) on the node named
// nodeName: its state and the three amounts (the reserved units in place
// of available when busy); any other shape is a ReplyError.
func xferReply(nodeName string, script *luaScript, out any, done xferOutState) (xferOutState, []int64, error) {
	r := newReplyReader(nodeName, script.name)
	raw := r.list(out, 4)
	if r.err != nil {
		return "", nil, r.err
	}
	state := xferOutState(r.str(raw, 0))
	v := []int64{r.int(raw, 1), r.int(raw, 2), r.int(raw, 3)}
	if r.err != nil {
		return "", nil, r.err
	}
	switch state {
	case xferNone, xferBusy, done:
		return state, v, nil
	}
	return "", nil, &ReplyError{Node: nodeName, Script: script.name, At: "reply[0]", Want: string(done) + ", none or busy", Got: string(state)}
}

// xferID names the transfer of key off the node named src at an epoch.
// The source is part of it: the nodes of a route each hold the route's
// stock hash under the same key, and two of them leaving in one apply
// transfer it to the same destination, whose marker of the first would
// otherwise turn the second's in into a no-op before its done subtracted
// the units on its source (lost).
func xferID(epoch int64, kind xferKind, src, key string) string {
	return strconv.FormatInt(epoch, 10) + "|" + string(kind) + "|" + src + "|" + key
}
