package inventory

import (
	"fmt"
)

// Refusals without a write (sold-out storms).
//
// Once a sale sells out nearly every Reserve is refused. A refusal that
// took nothing writes nothing: no order record, no part, no tombstone, no
// redo entry. The exceptions are fences: where a take of the attempt may
// still land (a take or stage whose reply was lost), the usual roll-back
// leaves its tombstones and failed record; where the units that refuse the
// order may be held by an earlier attempt of the same order id, a failed
// record alone (below). Both expire with inventory.retention.
//
// States of a new order id (no record on its home node) on the way to a
// refusal, each written by nobody but the last line's fence:
//
//	(no record) ──local: "short"──────────────▶ (no record) ──refuseShort──▶ refused | the next path
//	(no record) ──hint: SKU recently short─────▶ refuseShort first
//	(no record) ──quota parts on several nodes─▶ refuseShort first
//	(no record) ──stage(T) + takes, none landed─▶ staging(T) ──withdraw(T)──▶ (no record) ──refuseShort──▶ …
//	(no record) ──refuseShort: held units may be the order's own──▶ failed(F) (the fence) ──▶ refused
//
// refuseShort reads, writing nothing, the order's record on its home node
// and, on every node of every item's route, the SKU's available and
// reserved units and per-user limit (one read-only script per node, nodes
// concurrently, in batches per node: peekbatch.go). It refuses the order iff
// the topology is stable, every read answered, the home node holds no
// record of the order or a failed one (no attempt that answers for it),
// and some SKU of the order
//
//   - has a per-user limit while the order has no user (ErrLimitExceeded, as
//     refusal in local.go: no attempt of such an order that starts now
//     succeeds), and fewer units reserved on the route than the order
//     wants of it, or
//   - has a per-user limit on every node of its route, the greatest less
//     than the order's items want of it, and the order has a user
//     (ErrLimitExceeded, as refusal in local.go: no attempt of it that
//     starts now passes its quota part) who holds less than the order
//     wants on the quota node, or
//   - was never loaded on any node of its route (no node's stock hash of
//     it has a loaded counter: ErrUnknownSKU, the service's not_found; the
//     same read that counts its units tells it, so telling an unknown SKU
//     from a sold-out one costs nothing), or
//   - has fewer units available on its candidate nodes (itemCandidates:
//     the enabled, usable nodes the general path would take it from) plus
//     units reserved on all its route's nodes than the order's items want
//     of it (ErrInsufficientStock).
//
// It refuses behind a fence (below) when, under the same conditions, some
// SKU would refuse the order but for units held that may be the order's
// own: fewer units available on its candidate nodes than the order wants,
// but enough once the units reserved are counted; or, for an order with a
// user, the user's quota node of the SKU's route (quotaNode) has a limit,
// the units the user holds there plus what the order wants exceed it, and
// the user holds any there (limitMayBeOwn's rule, quotaMayBeOwn: an
// earlier attempt of the same order id may want less than this one); or
// the first two cases above with units held that may be the order's own
// (units reserved, or the user's, at least what the order wants). A limit
// set or lowered after an earlier attempt of the order took its parts
// leaves that attempt holding them, its stage maybe still on its way: the
// limit refuses a new attempt, not that one, so the refusal needs the
// fence as a shortage does (found by a review; the one-round path's take
// refused for the limit keeps its record as a fence the same way:
// needsUserMayBeOwn). An order of a user is refused with no write at all
// when the user holds none there (ErrLimitExceeded).
//
// Otherwise it decides nothing and the order takes its next path, whose
// refusal leaves the usual fence (a failed record, tombstones).
//
// Refusals behind a fence. The fence is a failed record on the order's
// home node under a fresh token, written by orderScript's "fence" op only
// where the order has no record (or one marked moved), kept for
// inventory.retention, and nothing else: no part, no take, no redo entry.
// It starts a record, so a node out of memory refuses it (memGrow, oom.go)
// and the refusal steps aside: the next path is refused there too. A fence
// whose reply is lost is asked once more: the op writes only where there is
// no record, so the second ask answers by the first's record (or by
// whatever came meanwhile); if that one fails too, the refusal steps aside.
// TestFenceReplyLost drives this case.
// States on the home node:
//
//	(no record) ──fence(F)──▶ failed(F)                       refuse
//	failed(any)  ──fence────▶ unchanged                       refuse (a failed record fences already)
//	failed(T, T's parts) ─fence─▶ unchanged                   step aside: the general path's begin hands
//	                                                          T's parts back (staged.go, "Replacing a failed record")
//	any other    ──fence────▶ unchanged                       step aside: its attempt answers
//
// Why every interleaving stays safe. The fence is what the general path's
// refusal would leave, without the takes it would make and roll back
// (whose redo entries the nodes keep and the sync must read): an attempt R0
// of the same order id whose takes landed but whose stage is still on its
// way finds the failed record and rolls back ("existing", staged.go), and
// the reconciler reads a failed record of another token as excluding R0's
// parts, as for any failed record. The op writes only where there is no
// record, atomically with that check, so it never overwrites an attempt
// that began or staged after the reads: it finds that attempt's record and
// the refusal steps aside. An attempt that begins or reserves in one
// script after the fence takes it over as it takes over any failed record
// (begin with a new token; the one-script path replaces it); one that
// stages after it meets "existing" and takes the general path. Either is
// ordered after the refusal: it held nothing when the reads were made, or
// the reads would have seen its record or its units. A retry of the order
// id, Confirm and Cancel meet a failed record, as after any refused
// attempt.
//
// Why the reserved units count: the one write a refusal used to make, the
// failed record on the home node, is also a fence. An earlier attempt R0
// of the same order id whose takes landed but whose stage is still on its
// way (a paused home node, staged.go) finds that record and rolls back;
// without it R0's stage lands, R0 answers success, and the order a
// refusal answered "insufficient stock" for ends reserved by the very
// units whose hold made it short (staged_late_test.go). A staged take is
// all of its part or answers short, so R0 holding its part of a SKU means
// at least the order's want of it reserved on one node of the route. So
// when the units available plus every unit reserved are still short,
// no attempt of the order holds that SKU: an R0 can succeed only by a
// take that lands after these reads, which orders it after the refusal
// (two concurrent Reserves of one id; neither observed the other). When
// held units could be the order's own, the refusal keeps its fence: in a
// storm while the sold units are reserved and not yet confirmed, refusals
// still write their failed record (see "What is left").
//
// That is exactly when the general path, started at the same instant,
// could only refuse: it takes an item from those candidate nodes and no
// others, up to what each holds, and refuses when an item stays short (or
// at the first reply naming a limit for an order without a user). Like the
// general path's takes, the reads of the nodes are not one snapshot: the
// refusal is what the nodes held when each was read. An order of a user
// that wants more of a SKU than its per-user limit (every node of the
// route read has one, and the order wants more than the greatest) is
// refused with ErrLimitExceeded before its stock is looked at, as the
// general path refuses its quota part whatever the stock; so is an order
// over what its user may still take on its quota node (the quota counter
// is read there), as that node's take would refuse its quota part.
//
// Why every interleaving stays safe:
//   - A refusal writes nothing, so it cannot oversell, strand stock or
//     settle a part; it is only an answer. It is never given for an order
//     that has an attempt: a record (reserving, staging, reserved,
//     confirmed, cancelled — a Cancel's tombstone included) makes
//     refuseShort step aside, and the usual path answers for it; an
//     attempt without a record yet holds units (above). A retry of the
//     same order id on another instance either finds such a record or
//     meets the same stock, and is refused the same way.
//   - During a topology change (any phase but stable) refuseShort steps
//     aside: a record may still be on a previous home node, a hold on a
//     node of the previous route. A node of the route that is not usable
//     makes it step aside too (its holds cannot be read).
//   - Confirm, Cancel and the reconciler never meet a refusal: it left
//     nothing to settle. A Cancel that comes later writes its tombstone as
//     for any order it does not know.

// Withdraw: a staged attempt (staged.go) whose stage landed but whose
// round took nothing — the home node had no part of the order, and every
// other node answered its take definitely without taking (short, a quota
// over its limit by more than the order's own attempts could hold, see
// "Per-user limits", a part that exists already, or an error reply) —
// deletes its staging record with orderScript's "withdraw" op, a
// compare-and-set on staging under its own token, instead of deciding it
// failed and tombstoning its promised parts. Why that is safe: no part of
// the attempt exists or can come to exist (node clients never replay a
// script; part ids carry the token), so there is nothing for a decision
// to settle, and the key is back to what it was before the stage, which
// wrote only where the order had no record. No reader acts on a staging
// record but by first deciding it with the same compare-and-set (fail or
// commit, resolveStaged), so a reader that saw it staging finds it missing
// and re-reads: a Cancel then writes its tombstone, a Confirm finds no
// order, the reconciler has no part of the attempt to look at, a retry
// begins anew. The key emptied, another attempt's late stage may land
// there: a reader that decided the withdrawn record and reads again may
// find a staging record once more, of any token, and must not act on it
// as decided (the reconciler puts its part off and looks again: a
// withdraw between its decision and its second read let the first
// attempt's late stage land, the attempt answered success, and the
// reconciler cancelled its part as not the record's: an oversell, found
// by a review; reconcile.go, ResolveExpired). If a reader decided it first, the withdraw changes nothing
// and the attempt follows the record as before (staged.go); probes in
// prevent mode may have left tombstones then, which expire with the
// retention. The general path's records are not withdrawn: a record that
// names another token is read by the reconciler as excluding a late stage
// (staged.go), so it must stay until its retention.
//
// The hint: an instance remembers for soldOutHintTTL which (route, SKU)
// refuseShort last refused, and runs refuseShort first for an order that
// wants one of them, so a sold-out SKU costs one round of reads per
// refused order (in batches per node, peekbatch.go) and no stage. The hint only
// decides whether to read first; the answer always comes from the reads.
// Reads that do not refuse clear the hint of the order's SKUs.
//
// Reads in batches (peekbatch.go). refuseShort's reads on one node are
// carried by a batch: a read that finds fewer than peekInFlight batches of
// its node under way is sent at once, alone; one that finds more queues,
// and the next batch carries every read queued by then (up to
// inventory.group_commit, all at one epoch token). A batch is one call of
// peekScript, a read-only script without the shared prelude (lua.go): it
// checks the node's stamp exactly as the prelude does (the configured
// name, else SHARDIS_IDENTITY; the caller's epoch token, else
// SHARDIS_EPOCH; both before it reads anything else), then reads each
// read's order record and each distinct stock hash of the batch once, and
// replies with the raw fields, which the caller parses strictly (int's
// rule in the prelude). What keeps the refusal's rule:
//   - the order's record is read on its home node, under the caller's
//     epoch token, atomically with the stamp check (one script), as
//     before; a refused stamp refuses every read of the batch, and each
//     of its orders steps aside (SHARDIS_EPOCH also marks the view stale,
//     as run does); so does a batch that does not answer;
//   - a stock hash read once serves only the reads of that batch, each
//     queued before the batch was sent: the hash was read after every
//     one of their orders arrived, which is all the refusal asks of a
//     read (what the node held when it was read, after the order came: an
//     attempt of the order that holds units took them before it, so the
//     read sees them). No read ever takes a reply sent before it queued;
//   - a counter that is not an integer fails only the reads of that hash
//     (ErrCorrupt naming node and key): those orders step aside.
//
// Redo log: a refusal decided here produces no redo entry, so nothing of
// it reaches PostgreSQL (pgsync lands the redo queues). An order whose
// first choices come up short is checked here before the general path
// takes across nodes, so an order that could not be met (more units than
// the route holds, an item sold out and confirmed) takes nothing.
//
// What is left: an order short only because units are reserved and not
// yet confirmed is refused behind a fence (a failed record, kept for
// inventory.retention); a short-lived fence would need the reconciler to
// turn it into a lasting failed record before it lets a due part of an
// attempt go by it (else the late stage of safety issue A1 returns). A
// take that races other orders for the last units (enough at the read,
// short at the take), and a multi-item order whose items are on other
// nodes than its home and whose short SKU this instance did not see
// refused within the hint's time, take first and roll back; their parts
// leave redo entries, which the sync leaves out of PostgreSQL once they
// are given back (pgsync, "Refused attempts").
//
// Per-user limits: a reserve script call whose quota part is over the
// limit takes nothing (reserveScript), and an item of an order with a user
// is first asked of the user's quota node (itemCandidates), in the same
// call as the quota part; so an order refused by its quota takes no stock
// on any node when its items share one route (on several routes, with
// several quota nodes, an item's take could run on one quota node while
// another refuses, so such an order is read first: see below). Why it is
// safe: the refusal is for good (local.go's refusal), so a take in the same
// call could only be rolled back; taking less writes less, and the call's
// reply still names the refusal.
//
// An order of a user whose items' routes put its quota parts on two or
// more nodes (spreadQuotas), wanting a SKU this instance saw with a
// per-user limit within limitHintTTL (the limit hint: marked by every
// reserve reply and read that names a limit, and by LoadStock), runs
// refuseShort before any take: its reads include the user's quota counter
// on each quota node, so an order over its limit on one route is refused
// before a take on another could land (with no write when the user holds
// none there, else behind a fence). That costs such
// orders one round of reads; orders of SKUs without a limit pay nothing.
// What still refuses after a take landed: a quota taken by another order
// of the same user between the reads and the takes (as a race for the
// last units), and an order of a limited SKU this instance has not seen
// (its first such order, or a limit set by another instance within the
// hint's time): its takes are rolled back, leaving redo entries that the
// sync leaves out of PostgreSQL (pgsync, "Refused attempts").
//
// A one-round attempt refused so withdraws its stage (above), leaving
// nothing, only when the user holds no units there (limitMayBeOwn,
// quotaMayBeOwn), so that no attempt of the order holds any of what
// refused it. An attempt's quota part holds all it wants or nothing, but
// an earlier attempt of the same order id may want less (an id reused
// with other items: TestReusedIDRefusedByReadsIsFenced).
// When the user holds any, they may be an earlier attempt's of the
// same order whose stage is still on its way (staged.go): the refusal is
// answered behind a failed record, as for a hold that makes an order
// short, and the late stage finds it and rolls back
// (TestStagedLateStageAfterLimitRefusal). Such refusals write their fence
// (a failed record and tombstones, kept for inventory.retention) but no
// redo entry. The one-script path (local.go) refuses by the same rule:
// at once, writing nothing, when the user holds no units there
// (localLimit), else by the general path, fenced.

// shortSKU is one SKU of an order as refuseShort weighs it.
type shortSKU struct {
	ref   stockRef
	item  int   // the first item of it
	want  int64 // units the order's items want of it
	avail int64 // available on its candidate nodes
	held  int64 // reserved on every node of its route
	limit int64 // the greatest per-user limit read on its route's nodes
	// allLimited: every node of its route read has a limit (so the one
	// the user's quota node applies is at most limit)
	allLimited bool
	nodes      int  // candidate nodes
	known      bool // stock of it was loaded on some node of its route
	// For an order with a user: the limit on the user's quota node of the
	// route and the units the user holds there.
	qlimit, qheld int64
}

// add counts one node's read v of s (cand: the node is one of its
// candidates; quota: the node is the user's quota node of its route).
func (s *shortSKU) add(v stockVals, r peekRead) {
	if r.cand {
		s.avail += max(v.avail, 0)
	}
	if r.quota {
		s.qlimit = v.limit
	}
	s.held += max(v.held, 0)
	s.limit = max(s.limit, v.limit)
	s.allLimited = s.allLimited && v.limit > 0
	s.known = s.known || v.known
}

// refusal returns the error that refuses the order with no write for s
// (the file comment's list), or nil, and whether it marks the hint.
// unfenced re-introduces MutationLimitUnfenced.
func (s *shortSKU) refusal(userID string, unfenced bool) (hint bool, err error) {
	switch {
	case s.limit > 0 && userID == "" && (unfenced || !heldMayBeOwn(s.held, s.want)):
		// no attempt of the order holds its part (a limit set after an
		// attempt took it leaves that attempt holding: fencedRefusal)
		return true, s.needsUserError()
	case userID != "" && s.allLimited && s.want > s.limit && (unfenced || !heldMayBeOwn(s.qheld, s.want)):
		// as the general path: its quota part is refused whatever the
		// stock; but a limit lowered (or set) after an attempt of the
		// order took its quota part leaves that attempt holding what it
		// wants (qheld ≥ want): fencedRefusal answers then, behind a fence
		return false, fmt.Errorf("%w: user %q: the order wants %d of sku %q (route %q), limit %d",
			ErrLimitExceeded, userID, s.want, s.ref.sku, s.ref.route, s.limit)
	case userID != "" && s.overQuota() && !quotaMayBeOwn(s.qheld):
		// no attempt of the order holds its quota part (quotaMayBeOwn)
		return false, s.limitError(userID)
	case s.avail+s.held < s.want && !s.known:
		return true, fmt.Errorf("%w: items[%d] sku %q was never loaded on route %q",
			ErrUnknownSKU, s.item, s.ref.sku, s.ref.route)
	case s.avail+s.held < s.want:
		return true, &shortStockError{*s}
	}
	return false, nil
}

// needsUserError is the ErrLimitExceeded of an order without a user of a
// SKU with a per-user limit.
func (s *shortSKU) needsUserError() error {
	return fmt.Errorf("%w: items[%d] sku %q (route %q) has a per-user limit of %d: an order of it needs user_id",
		ErrLimitExceeded, s.item, s.ref.sku, s.ref.route, s.limit)
}

// overQuota reports whether the user's quota node has a limit that the
// units the user holds there plus the order's want exceed.
func (s *shortSKU) overQuota() bool { return s.qlimit > 0 && s.qheld+s.want > s.qlimit }

// limitError is the ErrLimitExceeded of an order over the user's quota.
func (s *shortSKU) limitError(userID string) error {
	return limitExceeded(userID, s.qheld, s.ref.route, s.ref.sku, s.qlimit, s.want)
}

// shortStockError is refuseShort's ErrInsufficientStock for sku s: its
// text is made only when read (in a storm most callers only ask
// errors.Is).
type shortStockError struct{ s shortSKU }

func (e *shortStockError) Error() string {
	s := e.s
	return fmt.Sprintf("%v: items[%d] sku %q (route %q): wanted %d, %d available on %d usable node(s)",
		ErrInsufficientStock, s.item, s.ref.sku, s.ref.route, s.want, s.avail, s.nodes)
}

// Unwrap makes the error match ErrInsufficientStock.
func (e *shortStockError) Unwrap() error { return ErrInsufficientStock }
