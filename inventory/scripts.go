package inventory

import (
	"fmt"
	"strings"
)

// The scripts of the reserve/settle/order life cycle and of stock loading.
// They run behind the shared prelude of lua.go: KEYS[1] is the stamp hash
// and ARGV[1..3] the header, so every script's own arguments start at
// ARGV[4]. Each reply is the body's; lua.go wraps it.

// reserveScript takes stock for the parts of one attempt on one node.
//
// KEYS: 1 stamp, then per part: part key, counter key (stock hash for kind
// s, quota counter for kind q), and redo queue key (kind s) or stock hash
// holding the limit (kind q). The pending index and the redo offsets hash
// it names itself (PENDING and REDO_OFFSETS of lua/prelude.lua), as every
// reserve script does (localScript).
// A call of one stock part (the usual one) comes in a short layout
// (reserveCall): KEYS 2 its part key; ARGV 4 its id, 5 the second piece
// of its record's template (the first, a pending stock part's, the
// script knows: PNEW_STOCK in lua/part_codec.lua); and a context, which
// no other layout has (group.go, "Contexts"): CKEYS 1 its counter, 2 its
// redo queue, CARGV 1 the part deadline, 2 its want. Any other comes in
// the general layout:
//
// ARGV: 4 order id (no line of the script reads it: it names the order
// to the injected faults, ScriptCall.Args[0]), 5 part deadline
// (partDue.arg: ms, or "+" and ms after this node's clock), then per part: part id, kind, want, for kind s the
// redo queue, for kind q the units the user's previous quota node still
// counts while the topology migrates (-1 unknown; migrate.go), and the two
// pieces of the part record's template (appendPartTemplate, rectemplate.go: the
// attempt token, SKU and item index are in it).
//
// It returns one flat list, four values per part, in the parts' order:
// state, qty, offset, limit (one list, not a list per part: Redis and
// go-redis build each list they pass on); a call of one stock part taken
// now answers one string instead, "pending:<qty>:<offset>:<limit>", or its
// offset alone when the part was taken in full and its SKU has no limit
// (a table reply costs the node more in a group, and building a string
// more than answering one it has). The state is "pending" (taken
// now; a quota part is taken, and counted, even when the SKU has no
// limit, so a limit set later counts what the user already holds), "none"
// (nothing available, nothing written), "limit" (quota exceeded; qty =
// units held), "elsewhere" (limited, and the units the user's previous
// quota node counts are unknown), or the state of a part that already exists (the fence: a retry
// returns what was taken; a cancel that came first left "cancelled").
// A call with a quota part over the limit takes nothing: its other parts
// that would have been taken answer "none" (the refusal is for good,
// local.go's refusal, so nothing of the call is rolled back or reaches the
// redo log; soldout.go).
var reserveScript = newGroupedScript("reserve", true, luaFile("reserve.lua")).withContext(reserveContext)

// settleScript moves parts of one node from pending to confirmed or
// cancelled, each at most once (compare-and-set on the part state).
//
// KEYS: 1 stamp, 2 pending index, then one part key per part.
// ARGV: 4 action ("confirm", "cancel", or "abort": a cancel by a staged
// attempt before its order is decided, staged.go), 5 retention seconds
// of settled parts, 6 order id, then one part id per part, then, for a
// cancel or an abort and optionally, one pending-index member per part
// ([Settle.Members]: "queue:offset", "" unknown; a confirm sends none,
// so its call costs what it did). Any other action is refused
// (SHARDIS_BADOP) before any write.
//
// Per part it returns "done" (moved now), "already" (was in the target
// state), "tombstoned" (cancel or abort of a part that does not exist: a
// reserve arriving later takes nothing), "lost" (cancel or abort of a
// part whose record does not exist while the node lists it, pending or
// set aside: nothing written), "missing" (confirm of a part that does
// not exist), "held" (abort of a part a probe saw pending: nothing
// changed, it follows its order's decision) or "conflict:<state>".
//
// The tombstone's rule: it is written (state cancelled, qty 0,
// tombstone=1) for a part whose take has not landed, to fence a take
// still on its way; never for a part the node lists (pend_listed of
// lua/pending_index.lua: the pending index holds the member given,
// whose redo-log entry names the part, or its id, or the stuck index its
// id). Such a part was taken here and its record lost while pending
// (deleted, evicted, lost with the node's writes): its units are
// reserved still, and a tombstone would settle it on paper only: its
// redo entry read cancelled with qty 0 (landed so by pgsync), the expiry
// reading it as no longer pending and dropping its member (the units
// reserved for good, nothing reported), and [Inventory.SettleStuckLost]
// refusing it (a record exists). So it answers "lost" and the part stays
// listed: set aside once due, settled by its order's decision once its
// record is repaired, or by the operator's values. The check runs only
// where a record is missing on a cancel or an abort.
// A part named twice is settled once: a repeat answers "already" when the
// first settled it or wrote its tombstone, else as the first.
// A pending stock part whose SKU's stock hash holds fewer reserved units
// than the part is refused before any write: SHARDIS_NOSTOCK when the hash
// does not exist at all (deleted), SHARDIS_CORRUPT otherwise; so is a
// pending part whose kind is neither s (stock) nor q (quota)
// (SHARDIS_CORRUPT naming the part's key and its kind).
var settleScript = newGroupedReleaseScript("settle", luaFile("settle.lua"))

// orderScript is the order record's state machine on the order's home node.
//
// KEYS: 1 stamp, 2 order key. ARGV: 4 op, 5 token, then op-specific
// arguments. Returns {status, token, deadline, parts, reason,
// wait_ms, settled}; settled is the ids of the inline parts (inline.go)
// that the op's decision settled with the record, each followed by \x1f
// ("" for none); what the caller does with it depends on op:
//
//	begin   ARGV 6 lease ms, 7 digest, 8 user, 9 ttl ms, 10 retention s.
//	        A free order (missing or failed) becomes "reserving" under the
//	        caller's token: status "begin". A reserving order whose lease
//	        ran out is taken over the same way. Otherwise the record as is
//	        ("reserving" with wait_ms, "reserved", "confirmed",
//	        "cancelled"), or "mismatch" when the digest differs; a decided
//	        record it answers by lives the retention from now at least
//	        (relied_on: the Reserve's answer relies on it).
//	commit  ARGV 6 parts JSON, 7 retention s. reserving+token or
//	        staging+token → reserved, with no TTL (orderrec.go, "TTL").
//	        Otherwise "lost" with the current status as reason; a record
//	        it answers by lives the retention from now at least
//	        (relied_on: the general path answers ErrCancelled by it).
//	fail    ARGV 6 retention s. reserving+token or staging+token → failed
//	        (the attempt gave up, or a recovery found a promised part
//	        missing), living the retention from now at least (relied_on).
//	release ARGV 6 retention s. As fail; and missing (or only a copy
//	        marked moved: epoch.go) → failed under the caller's token,
//	        reason "no record": the
//	        attempt's begin or stage was not answered, and if it lands
//	        later it meets this record (begin answers "failed" for a
//	        failed record of its own token; a stage writes only where
//	        there is no record) instead of holding the lease.
//	withdraw staging+token → no record ("missing"): only for an attempt
//	        that left nothing on any node (soldout.go); otherwise the
//	        record as is.
//	confirm reserved → confirmed, or → cancelled/"expired" past the deadline.
//	cancel  reserved/reserving/failed → cancelled; missing → tombstone.
//	        A cancelled or confirmed record it answers by lives the
//	        retention from now at least (relied_on).
//	expire  (reconciler, ARGV 5 the due part's token, 6 retention s, 7
//	        the due part's id, 8 its deadline ms, 9 "1" when it was set
//	        aside before) reserved past
//	        deadline → cancelled/"expired"; reserving past lease → failed;
//	        missing (never written; or only a copy marked moved:
//	        epoch.go) → failed under the part's token (a stale stage of
//	        that token, stageTakeScript, is refused afterwards), unless the
//	        part may have outlived the
//	        record (set aside before, or due at least the retention less two
//	        seconds of clock skew ago, order.lua: SKEW):
//	        then nothing is written and the verdict is "gone" (stuck.go).
//	        So for such a part whose order holds a record of another
//	        token begun at or after the part's deadline (created, else
//	        decided_at; neither: after), checked first, before a staging
//	        record is returned: "gone" with reason "another attempt", the
//	        record's token, nothing written (stuck.go: it may follow a
//	        confirmed record of the part's attempt that expired).
//	        Returns the record either way.
//	fence   (a refusal, ARGV 6 retention s) missing (or moved) → failed
//	        under the caller's token, reason "refused" (soldout.go,
//	        "Refusals behind a fence"). Otherwise the record as is.
//
// A "staging" record is never taken over, confirmed, cancelled or expired
// here: every op but commit, fail, release and withdraw returns it as it is ("staging", with
// its promised parts and wait_ms), and the caller decides it first
// (order_ops.go: resolveStaged), then repeats the op.
//
// A record marked moved (epoch.go) is dropped and every op reads no
// record there, as where the key never was.
//
// It runs as two scripts of one body (oom.go): orderScript, refused whole
// on a node out of memory, for begin and fence (they start a record), and
// orderDecideScript, which runs there too, for every other op (they decide
// an order that exists, or tombstone one that does not); orderDecideScript
// refuses begin and fence.
var orderScript = newGroupedScript("order", true, orderBody)

// orderDecideScript is orderScript's body for every op but begin and
// fence, declared memRelease (oom.go).
var orderDecideScript = newGroupedReleaseScript("order", luaFile("order_decide.lua")+orderBody)

// orderDecideInlineUnwrittenScript is orderDecideScript without its
// decisions' inline_settle: sent in its place only when the injected faults
// re-introduce [MutationInlineUnwritten] (test-only, faults.go).
var orderDecideInlineUnwrittenScript = newGroupedReleaseScript("order",
	mustCut(luaFile("order_decide.lua")+orderBody, "  if status == 'reserved' then settled = inline_settle(key, f, st, retention, op == 'expire' and (ARGV[7] or '')) end\n"))

// mustCut is src without its one occurrence of piece; it panics when
// piece is not in src exactly once (a test-only script built from a
// production one).
func mustCut(src, piece string) string {
	if strings.Count(src, piece) != 1 {
		panic(fmt.Sprintf("inventory: %q is not in the script once", piece))
	}
	return strings.Replace(src, piece, "", 1)
}

// orderBody is the order record's state machine (orderScript).
var orderBody = luaFile("order.lua")

// readStock reads and validates the counters of the stock hash KEYS[2]
// into v = {available, reserved, confirmed, loaded, limit}.
var readStock = luaFile("lib_read_stock.lua")

// loadScript adds stock to one node and sets the SKU's per-user limit.
// KEYS: 1 stamp, 2 stock hash. ARGV: 4 quantity to add (may be 0), 5
// per-user limit (-1 = leave as is), 6 the limit's version (limits.go), 7
// the call's deadline by the node's clock (ms; load_deadline.go): a call
// run after it adds nothing (SHARDIS_LATE).
// Returns {available, reserved, confirmed, loaded, limit}.
var loadScript = newScript("load", true, readStock+luaFile("load.lua"))

// stockScript reads one node's counters of a SKU.
// KEYS: 1 stamp, 2 stock hash. ARGV: the header only.
// Returns {available, reserved, confirmed, loaded, limit, exists}: exists
// is 1 when the stock hash exists, 0 when it does not (all counters 0).
var stockScript = newScript("stock", false, readStock+luaFile("stock.lua"))
