package inventory

import (
	"context"
	"errors"
	"slices"

	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/topology"
)

// One-round reservations (a parallel commit, after CockroachDB's).
//
// An order that its home node cannot meet alone (local.go), but whose items'
// first-choice nodes can each meet in full, is reserved in one round: at
// once, the home node stages the order's record together with its own
// parts (stageTakeScript, all or nothing) and every other node takes its
// parts under the attempt's token (one script per node). Reserve answers as soon as that round
// succeeded; the record is made "reserved" right after (the commit), off
// the caller's path: the commit rides the next write group on the home
// node, or is sent by itself a few ms later (carry.go).
//
// States of a staged record (orderScript):
//
//	(no record) ──stage(T)──▶ staging(T, promised parts) ──commit──▶ reserved ──▶ the usual life cycle
//	                                                     ├──fail────▶ failed (parts cancelled)
//	                                                     └──withdraw─▶ (no record): T took nothing anywhere (soldout.go)
//	(any record, failed included) ──stage(T)──▶ unchanged: "existing", T's takes are rolled back
//	failed(T, its parts) ──begin(T2)──▶ reserving(T2, T's parts); T's parts handed back to the caller, which cancels them
//	reserving(T2, T's parts) ──commit(T2)──▶ reserved(T2's parts);  ──fail/release/confirm──▶ failed(T2, T's parts)
//
// The promised parts are fixed when the record is staged: node, part id,
// kind, SKU, quantity, and the incarnation of the node's stamp as the
// attempt knew it. The rules:
//
//	A staged order is reserved iff every promised part exists on its node,
//	pending under the order's token with the promised quantity — or is
//	lost: absent on a node whose incarnation is no longer the promised one.
//
// Lost parts: a node that lost acknowledged writes (restarted empty, from
// an older snapshot or AOF, a lossy failover) is refused until an operator
// accepts its data, which gives it a new incarnation (node/witness.go). A
// part absent there may have been taken, acknowledged to the caller, and
// lost: it is never turned into "never reserved" (no tombstone is written
// for it). If every other part is pending the order is committed with it,
// like an order whose part was lost after its commit: Confirm confirms
// the rest and answers ErrDataLoss naming it. A node at the promised
// incarnation did not lose what it acknowledged since the stage, so an
// absent part there was never taken. (The attempt reads the incarnation
// from its own probes: if the node was accepted in the instants between
// that and its take, and that take never landed, and the attempt died
// before deciding, the order is committed and reported as data loss
// though Reserve had not succeeded: the safe side.)
//
//	A stage never takes over a record: it writes only where the order
//	has none. Hence a record that does not name a token never comes to
//	name it.
//
// Who moves what:
//   - Only the attempt takes parts, once per part id (the reserve scripts
//     never overwrite an existing part key), and only in its one round;
//     the home node's parts exist iff the record was staged.
//   - Only the attempt's stage creates a record naming its token, and only
//     where the order has no record (a record marked moved by a topology
//     change is none). Any record, failed included, is left as it is and
//     answered "existing": the attempt rolls its takes back and the order
//     takes the general path, whose begin takes over a failed record under
//     its lease rules with a new token (so with new parts).
//   - Replacing a failed record. A failed record of T lists T's promised
//     parts, and the cancels after its fail may never have landed: its
//     decider (the attempt, or a reader's resolveStaged) died right after
//     the fail, or the home answered after the decider's 2 s. It is the
//     last list of those parts anyone reads, so whoever replaces it takes
//     the list: only the general path's begin does (a stage never writes
//     over a record; the local script keeps a failed record that lists
//     parts, order_kept, and the order takes the general path), and in the
//     same script it writes reserving(T2) and answers with T's list, whose
//     parts its caller then cancels (settleReplaced; the parts of this
//     call's own one-round attempt, cancelled in full by its roll-back
//     just before, are not sent again). The cancels answer before T2
//     sends a take (unless T2's caller gives up first: its takes then
//     fail, and the cancels run on detached): T2 wants the order's
//     units again, often the very units T holds (the last of a SKU), and a take sent beside them
//     found those still held and refused the order for a shortage of its
//     own dead attempt's units. Nor does a refusal by reads answer behind
//     such a record as its fence (refuseShort, soldout.go): the fence op
//     answers with the record's parts, and a failed record that lists
//     any makes the refusal step aside to the paths, whose begin replaces
//     it; before, every retry was refused so while T's units stayed held
//     until they came due (TestRetryOverAFailedRecordGetsItsOwnUnitsBack).
//     A Confirm answered by the failed record cancels them as well. The
//     begin's record (reserving(T2)) keeps T's list until T2's commit
//     writes its own: the begin's reply may be lost (the caller's
//     deadline, a timeout), after which T2 releases its attempt
//     (releaseLease: failed(T2), the list kept), or T2 may die before its
//     cancels; before, the list was gone with the begin and T's units
//     stayed held beside the next attempt's until they came due
//     (TestRetryWhoseBeginReplyIsLostReturnsTheFailedAttemptsParts). So a
//     reserving or failed record may list another attempt's parts, never
//     its own before its commit; whoever replaces or decides it hands the
//     list back as above (a begin over a reserving record whose lease ran
//     out, a Confirm or Cancel of it), and the commit, which replaces
//     the list, comes after T2's cancels answered (or were deferred).
//     Why every interleaving is safe: the
//     begin read a record that excludes T (failed under T), the condition
//     below for cancelling a part of T; T is never reserved afterwards (no
//     record names T again but that failed one: a stage writes only where
//     there is none, a commit of T needs staging(T)); the list holds no
//     part of T2 (written by T's stage; part ids carry their token, and
//     settleReplaced drops any of T2's all the same); a settle changes a
//     part at most once, so the reconciler, a deferred settle or a late
//     failStaged cancelling the same parts settles each once; a list
//     handed back again (T2 failed after its cancels landed) costs a
//     round of settles answered "already". A caller that dies before its
//     cancels leaves them in T2's record for the next reader, and to their
//     deadline, where the reconciler cancels them by T2's record (begun
//     before they came due, it excludes T). A list carried on by a begin
//     over a reserving(T2) record names T, which T2's record excludes; a
//     reserving record's list is never T2's own (its commit writes those,
//     and replaces the list).
//   - A probe (probeScript) reads promised parts and marks each pending
//     one held (see Abort below); in "prevent" mode it writes a tombstone
//     for each absent one in the same script, so that part can never be
//     taken afterwards.
//   - The decision is one compare-and-set on the record: commit
//     (staging+token → reserved) or fail (staging+token → failed); or,
//     by the attempt alone when its stage took no part and every take
//     answered definitely without taking, withdraw (staging+token → no
//     record: soldout.go says why that is the state before the stage, and
//     why a reader that saw the record loses nothing). Commit is
//     written only after every promised part was seen pending with its
//     quantity (by the attempt's own take replies, or by a probe, which
//     may also find a part lost). Fail is
//     written only by the attempt when it did not see all of its takes
//     succeed (so it never answered success), or after a probe found a
//     promised part prevented, short, or settled.
//   - The attempt that decides its own record failed cancels the parts it
//     took and tombstones those whose take's outcome it does not know; a
//     promised part whose take answered without taking is left alone: no
//     call of T can take it later (node clients never replay a script,
//     and T's part ids are T's alone), and a probe of the failed record's
//     parts never runs (the record is decided).
//   - A part of attempt T is cancelled only after a record was read that
//     excludes T: failed under T (the attempt's or a probe's fail, a
//     retry's begin replacing it, a Confirm answered by it; or
//     the attempt's release, which it sends when it does not know whether
//     its stage landed, or the reconciler's expire op, each of which
//     writes it where the order has no record at all, a copy marked
//     moved included (epoch.go), so a stage of T that lands later meets
//     it), cancelled or expired, or a record of
//     another token (but one begun at or after the part came due, read
//     for a part that may have outlived T's own record: that may follow
//     a confirmed record of T that lived out its retention, and the part
//     is set aside for an operator instead: stuck.go);
//     or by the attempt's own abort (below). It is confirmed only after a
//     confirm of T is recorded.
//
// Part deadlines: every part comes due by the clock of the node that holds
// it. The stage and the takes send a hold (ttl + partGrace, partDue in
// take.go) that each script adds to its own node's TIME when it runs; this
// instance's clock is never used. A deadline only says when the
// reconciler first looks at a part; what it does then is decided by the
// record, so safety does not rest on it. It keeps an attempt's parts from
// coming due before its calls even reached their nodes (an instance clock
// behind the nodes', a stall between planning and sending, a short ttl).
//
// States of one promised part on its node (probeScript, settleScript):
//
//	absent ──take──▶ pending ──probe──▶ pending+held ──decision──▶ confirmed | cancelled
//	   │                └──abort (attempt, not held)──▶ cancelled
//	   ├──prevent / abort / cancel──▶ tombstone (cancelled; a take is refused)
//	   └──(prevent probe, node of another incarnation)──▶ seen lost: no write
//
// Abort: an attempt that did not see every take succeed may release its
// parts on the nodes it reaches at once, before any record is decided —
// whatever state its home node is in (paused, unreachable, or the stage's
// reply lost). An abort (settleScript, action "abort") cancels a pending
// part only while it is not held, and tombstones an absent one, in one
// script on the part's node; a held part is left to follow the record's
// decision. Every probe, inspect or prevent, marks each pending part it
// sees held in the same script. Why an abort never strands a commit: a
// commit is written only after every promised part was seen pending —
// by a probe, which held it, so no abort on that node can cancel it
// afterwards (both are scripts on that one node: one came first); or by
// the attempt's own takes, and an attempt that saw every take succeed
// never aborts. Why a commit never follows an abort: an aborted part is
// cancelled for good, so every later probe sees it settled and decides
// failed; a stage that lands late (its node was paused) meets the same
// verdict. A lost part (above) is committed without being held: it is
// absent, and the attempt aborts only parts whose take it saw land, so an
// abort of it can only write a tombstone, which holds no stock (none
// where its node still lists it, its record lost while pending: settle
// answers "lost", settleScript; Confirm
// then reports a conflict for it instead of the loss: only for an attempt
// that never answered success, the one that aborts). Retries of the order
// id take parts under a new token, so an abort touches only its own
// attempt's parts; the general path's records are never committed by a
// reader, so it needs no hold.
//
// Parts on a node that left: a topology apply that removes a node decides
// every staging record before it writes stable, and writes stable only
// once the node holds no pending part (its parts settled, its stock moved:
// topology/doc.go); the node's record then names a topology without it,
// so no take lands there again (a take routed there by an older view is
// refused with SHARDIS_EPOCH). A promised part there is therefore absent
// for good or settled. A staging record promising one can still turn up:
// a node restored from an older copy and accepted brings back the record
// as it was before the apply decided it (topology/doc.go, "A node that
// went back"). An instance whose view is of a stable topology without the
// node, and that no longer has the node, reads such a part as gone
// (probeGone: nothing read or written there) instead of refusing to
// decide: the verdict is failed (the part is not pending), and the
// record's other parts are cancelled (settleParts leaves the gone one to
// the apply that settled it). Without this rule the record could never be
// decided and its other parts would hold their stock forever. A view that
// is stale (the node joined again at a newer epoch) decides nothing: the
// probes of the other parts and the fail itself are scripts under the
// view's token, which the nodes at the newer one refuse. A record brought
// back whose order had been reserved or confirmed is failed here: its
// reservation was lost with the node's data (what an accept gives up,
// SECURITY.md); a confirmed part elsewhere refuses the cancel.
//
// Why every interleaving decides once, and never loses an acknowledged
// reservation: a present part stays pending until the record is decided,
// and a prevented part never becomes present, so "all present" and "one
// prevented, short or settled" exclude each other; the compare-and-set
// picks the first of the attempt's own fail and a recovery's commit, and
// the loser follows the record. Once all of the attempt's takes succeeded
// and its stage answered "staged", no part of it was cancelled and none
// will be before a decision (one may be lost, if its node lost it):
// whoever cancels one first read a record that
// excludes the token, and a record that does not name a token never comes
// to name it, so the stage could not have landed after that read. (A
// stage that took over a failed record of another token, safety issue A1,
// broke exactly this: the reconciler cancelled the parts of a late stage's
// attempt by that failed record, their stock was sold again, then the
// stage landed and its attempt answered success: oversold. A retry that
// answered insufficient stock because of the late attempt's hold was
// contradicted the same way.) So every decision is commit, and the attempt
// may answer success before its commit lands. A retry of the
// order id, Confirm, Cancel, the reconciler (through a part of the
// order that came due) and a topology move all meet "staging" and decide
// it first (resolveStaged), then act on the decided record. While the attempt's lease runs, Reserve retries and Confirm only
// inspect (an absent part may still be on its way: "in progress"); Cancel,
// expiry and anything after the lease prevent. The one assumption: a
// stage is not delayed beyond inventory.retention, after which a record
// expires and looks like none (the bound tombstones rely on too),
// counted from the last time a reader relied on the record that keeps it
// out: the ops whose answer relies on a record they read give it at least
// the retention again (order.lua, relied_on: the reconciler's expire op,
// a refusal's fence answered by a failed record, a fail (a refusal for
// good answered behind the attempt's own failed record: its TTL was the
// stage's or begin's, found by a review), a Cancel answered by a
// cancelled or a confirmed one, a Confirm answered by a decided one, a
// Reserve's begin answered by a decided one: ErrCancelled, or a
// confirmed order's receipts, a general-path commit answered "lost" by
// one: ErrCancelled for a Cancel's tombstone (found by a review)), since
// such a record read near its expiry would
// otherwise let a stage sent just before it land after the part it
// excluded was cancelled, or after the refusal or Cancel answered (each
// found by a review). Its twin, for a record that is decided: a part left
// pending (its settle did not land) is looked at by a reconciler within
// inventory.retention of coming due, and one set aside is retried within
// it (each retry's expire op relies on the record again: stuck.go); a
// part that meets no record all the same past that bound is set aside
// for an operator, not cancelled (its decision cannot be inferred). A
// decided record lives the
// retention from when its parts come due, not from its decision
// (order.lua, final: from the deadline plus partGrace, moved on by the
// commit's lag behind the record's created, since a one-round take
// that reached its node late comes due as much later), since a
// reconciler meeting no record reads "never landed" and cancels: a
// Confirm's record counted from the Confirm expired before its part came
// due, and the part of a confirmed order was cancelled (found by a
// review). A settled part lives the retention from when it comes due too
// (settle.lua), so a Confirm retried while its record lives finds its
// parts; a record a reader relied on since lives longer, and a Confirm
// that finds it past its parts' retention reports their absence as
// expiry, not data loss (order.go, partsMayHaveExpired).
//
// Crash points (inventory/staged_test.go stops an attempt at each): before
// the round (nothing written), after the stage only, after some takes,
// after every take and before the commit, after the commit. Each ends with
// every part settled once by the one recorded decision.
//
// The staged path needs a stable topology (no record of the order can be
// on a previous home) and at least one item whose first choice is not the
// home node; anything it cannot do in full (a short node, a refused part,
// an existing record) is rolled back, decided as failed, and the order
// takes the general path (begin → take → commit) in the same call. A take
// refused for good (refusal in local.go: the user's quota is over the
// limit, a limited SKU without a user) is the one exception: after the
// same roll-back and decision the refusal is the answer, because the
// general path, meeting the same counters, could only refuse again. The
// decision and the parts end exactly as on the fallback; only the general
// path's three rounds are not run.

// stageTakeScript stages an order's record on its home node and takes the
// home node's parts, all or nothing (staged.go). It writes only where the
// order has no record (a record marked moved by a topology change is
// none): any record, failed included, is answered "existing" untouched
// (the rule "A stage never takes over a record" above). It plans the
// home's parts first, then sets the record only if its key is missing
// (SET NX), and reads a record's head only when the key is there or the
// plan refuses (a record to keep answers "existing" before a refusal);
// the parts are taken after the record, in the same atomic script.
//
// KEYS: 1 stamp, 2 order key, then per part: part key, counter key, and
// redo queue (kind s) or stock hash holding the limit (kind q); the
// pending index and the redo offsets hash it names itself (PENDING and
// REDO_OFFSETS of lua/prelude.lua), as every reserve script does
// (localScript).
// ARGV: 4 order id, 5 token, 6 part deadline (partDue.arg: "+" and the
// hold in ms after this node's clock), 7 user, 8 ttl ms, 9 retention s,
// 10 and 11 the staging record's template, the pieces before and after
// its created field (appendStagingOrderPieces, rectemplate.go: lease, digest
// and promised parts are in it), 12 "" (test-only: the name of MutationStageTakeover
// re-introduces the bug of safety issue A1, a stage overwriting a failed
// record of another token; faults.go), then per part as localScript:
// id, kind, want and the template's two pieces (appendPartPieces; the
// path needs a stable topology, so no quota is counted
// on a previous node). A stage with no part on the home (the usual one:
// the stock is on other nodes) comes in a short layout (stageTakeCall):
// ARGV 4 the record's first piece, and a context (group.go, "Contexts";
// stageContext), which the general layout never has: CARGV 1 ttl, 2
// retention, 3 the record's second piece, 4 the mutation; the order id,
// part deadline and user, which only parts read, are left out, and so is
// the token, which the record's first piece holds. So does a stage of
// one stock part on the home, for an order with no user and no mutation:
// KEYS 3 the part's key, ARGV 5 its id, 6 its template's second piece
// (the first is a pending stock part's, which the script knows:
// PNEW_STOCK); CKEYS 1 its counter, 2 its redo queue, CARGV 5 its want;
// its deadline is the order's plus partGrace, as stageDeadline's hold
// says.
//
// Returns "staged:<deadline ms>:<offset>…", an offset per part (one string,
// as the local reserve answers: lua/prelude.lua's staged_head), or, writing nothing,
// {"existing", status, token} (the order has a record: the general path
// handles it) or {"short"} (a part cannot be met in full, or a limited SKU
// has no user).
var stageTakeScript = newGroupedScript("stage-take", true, luaFile("stage_take.lua")).withContext(stageContext)

// probeScript reads promised parts of one staged order on one node.
//
// KEYS: 1 stamp, then one part key per part. ARGV: 4 mode ("inspect" or
// "prevent"), 5 order id, 6 retention s of a tombstone, then per part the
// node's incarnation the attempt promised ("" unknown).
// Per part it returns {state, token, qty, offset}: the part's fields, or
// {"lost", "", 0, 0} (either mode: absent on a node whose stamp is of
// another incarnation, which lost it; nothing written, and a take of the
// attempt landing there later is settled by the order's decision like any
// part), {"prevented", "", 0, 0} (prevent: a
// tombstone was written, so the part can never be taken) or {"absent",
// "", 0, 0} (inspect). A pending part is marked held, in either mode: the
// attempt can no longer abort it (the file comment).
var probeScript = newReleaseScript("probe", luaFile("probe.lua"))

// stagedVerdict is what a probe of every promised part shows.
type stagedVerdict int

const (
	// verdictReserved: every promised part is pending under the token
	// with its quantity, or lost (the file comment).
	verdictReserved stagedVerdict = iota
	// verdictFailed: a part was prevented, is short, or is settled.
	verdictFailed
	// verdictInFlight: a part is absent (inspect mode): the attempt may
	// still be taking it.
	verdictInFlight
)

// errStagedInFlight is returned by resolveStaged when the attempt of a
// staged order may still be running.
var errStagedInFlight = errors.New("the order's reserve attempt is still running")

// departed reports whether node name left the topology: this instance's
// view is of a stable topology without it (see "Parts on a node that
// left").
func (inv *Inventory) departed(ctx context.Context, name string) bool {
	v := inv.topology(ctx)
	return v.notReady == nil && v.phase == topology.PhaseStable && !slices.Contains(v.applied.Nodes(), name)
}

// probedPart is what a probe saw of one promised part.
type probedPart struct {
	state       probeWord
	token       string
	qty, offset int64
}

// probeResult reads the outcome r of a probeCall of k parts on n
// strictly: one {state, token, qty, offset} per part, or a
// malformed-reply error naming the script, or the call's error.
func probeResult(n *node.Node, k int, r callReply) ([]probedPart, error) {
	if r.err != nil {
		return nil, r.err
	}
	rr := newReplyReader(n.Name(), probeScript.name)
	raw := rr.list(r.v, k)
	out := make([]probedPart, len(raw))
	for j := range raw {
		t := rr.listAt(raw, j, 4) // {state word, token, qty, offset}
		if rr.err != nil {
			break
		}
		rr.enter(j)
		out[j] = probedPart{state: probeWord(rr.oneOf(t, 0, probeWords)), token: rr.str(t, 1), qty: rr.int(t, 2), offset: rr.int(t, 3)}
		rr.leave()
	}
	if rr.err != nil {
		return nil, rr.err
	}
	return out, nil
}

// verdict decides a staged record from what probes saw of each of its
// promised parts (seen[i] of rec.parts[i]; the rule is in the file
// comment): reserved when every part is pending under the record's token
// with its quantity or lost (returned as node/part, for the data-loss
// report), in flight while one is absent, failed otherwise.
func (rec orderRecord) verdict(seen []probedPart) (stagedVerdict, []string) {
	verdict := verdictReserved
	var lost []string
	for i, s := range seen {
		p := rec.parts[i]
		switch {
		case s.state == probeAbsent:
			if verdict == verdictReserved {
				verdict = verdictInFlight
			}
		case s.state == probeLost:
			lost = append(lost, p.Node+"/"+p.ID)
		case s.state != probePending || s.token != rec.token || s.qty != p.Qty:
			verdict = verdictFailed
		}
	}
	return verdict, lost
}
