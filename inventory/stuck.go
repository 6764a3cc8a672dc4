package inventory

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/node"
)

// A part that cannot be settled (its SKU's counters are corrupt or were
// deleted, its order record is unreadable, its own record is unreadable
// or gone while the pending index lists it, a script fails on it every
// time) is set aside: the reconciler moves it from the node's pending index
// (inv:pending) to the node's stuck index (inv:stuck, with the reason in
// inv:stuck:why), so it never holds up other parts and every instance sees
// it. Its stock stays reserved until it settles.
//
// Set-aside parts come back by themselves once the data is repaired:
//
//   - Each is retried with exponential backoff: when it is set aside, the
//     time of its next retry goes into inv:stuck:retry (first after
//     the reconciler's first delay, doubling each time it is set aside
//     again, at most its longest: [Inventory.SetAside]), and its count of attempts and first set-aside time into
//     its own part record (fields stuck_tries, stuck_since; they expire
//     with the record). Every reconciler pass first moves the parts whose
//     time has come back to the pending index, due now
//     ([Inventory.RetryDueStuck]), and settles them in the same pass, or
//     sets them aside again; one whose record cannot be read or is gone
//     stays set aside, its next retry pushed back. A part settled while
//     set aside (a deferred settle, its order's Confirm or Cancel, the
//     decision's settle of an inline part, SettleStuck, SettleStuckLost)
//     leaves the stuck index in the script that settles it
//     (lua/part_settle.lua), found there by its id whatever its record
//     holds: one set aside while its record was gone or unreadable, then
//     repaired or restored by hand, or an inline part, has no
//     stuck_since. So an entry never outlives its part's settle: one
//     whose record is gone is a part that never settled, and an
//     operator's settle of an entry whose record reads settled (left by a
//     release before, which went by stuck_since) is refused
//     ([ErrStuckSettled]). Before, such an entry outlived the settled
//     record and read as a lost record's, which SettleStuckLost settled a
//     second time (TestSettledStuckPartLeavesNoEntryToSettleTwice).
//   - LoadStock retries at once the parts of the SKU it touched on every
//     node that took the load ([Inventory.RetryStuckSKU]).
//   - An operator retries one part, or all, or a SKU's, at once
//     ([Inventory.RetryStuck], `shardis parts retry`); an explicit retry
//     restarts the part's backoff.
//
// A part set aside whose own record is gone settles by no retry: an
// operator gives what its record held ([Inventory.SettleStuckLost]); a
// per-user quota part's units stay in its user's count until then,
// whatever its order's decision (stuck_settle_lost.go, "A quota part
// whose own record is lost", holds the states).
//
// A set-aside part settles by its order's record, which lives the
// retention (inventory.retention, [Inventory.Retention]) from the last
// time a reader relied on it: each retry's expire op (order.lua,
// relied_on) is such a reader, so a part retried at least once per
// retention keeps its order's record alive however long it waits for
// its repair. The reconciler's backoff is capped well below the
// retention for that (rollback.Settings.StuckRetryMax). A part that meets
// no record of its order all the same (or only a copy of it marked moved
// by a topology change, which is no record: epoch.go) — one set aside before (its
// record's stuck_since), or due at least the retention ago, less two
// seconds of clock skew (order.lua: SKEW) — is not read
// as one whose attempt never landed (its failure recorded, the part
// cancelled), as a part that comes due within the retention is: the
// record may have been a confirmed order's that lived out its retention
// (retries stopped, a reconciler down, an explicit backoff longer than
// the retention), and cancelling would oversell. Nothing is written: the
// part is set aside again ([Inventory.ResolveExpired] errs wrapping
// [ErrCorrupt], its reason saying the order's record is gone and its
// decision cannot be inferred), its units reserved, until an operator
// decides by the system of record: confirm if the order was paid, else
// cancel ([Inventory.SettleStuck], `shardis parts settle NODE PART_ID
// confirm|cancel`, which settles only such a part).
//
// So is such a part that meets a record of another attempt of its order
// begun at or after the part came due (its created, or for a record
// without one, a tombstone or a fence, its decided_at, at or past the
// part's deadline; none read counts as after): the order id reserved
// again (a new token: a Reserve, a refusal's fence, a Cancel's tombstone)
// once the part's own record had lived out its retention. The states of
// the old attempt T's part p, its order confirmed, its settle not landed
// (the node unreachable, the counter corrupt):
//
//	p pending, T's record confirmed ──retention from p's due──▶ p pending, no record
//	    ──Reserve (or fence, Cancel) of the id──▶ p pending, a record of T' ≠ T
//
// The reconciler that reads the last state must not take T' as excluding
// T (staged.go: a record of another token): that holds only for a record
// that was there, or replaced T's, while T's could still be undecided. The
// rule: a decided record of T lives the retention from its parts' due
// (order.lua, final) and every expire op relies on it again, so a record
// of T' begun before p came due was begun while a confirmed record of T
// would still be there (a begin or stage writes only where there is no
// record, or takes over a failed or lapsed one): T was never confirmed,
// and p is cancelled as before (TestStuckPartOfASupersededAttemptCancels). One begun at or after p's due may follow
// a confirmed record of T that expired: when p may have outlived its
// record (set aside before, or due at least the retention ago less two
// seconds, as for a
// missing record) the expire op writes nothing and answers 'gone'
// (reason "another attempt"), and p is set aside for an operator, whose
// SettleStuck takes it by the same rule. The margin is a whole retention
// (a part's due and a record's created are read on two nodes' clocks):
// a part of an attempt that never committed and met a new one begun
// after its due is left to the operator too, which cancels it (the safe
// side: its units stay reserved until then, nothing is sold twice).
// Before, the new record's token cancelled the part of a confirmed order,
// its units sold again (TestStuckPartMeetsANewAttemptOfItsOrder,
// TestDuePartMeetsANewAttemptOfItsOrder).
//
// Why the state lives on the node and not in a reconciler: any instance's
// reconciler may hold a node's lease on a given pass, instances restart,
// and the stuck index is already there; a retry is one script moving the
// part between two indexes of its node, so two instances retrying at once
// move it once. Moving a part between the indexes never changes its state:
// only the settle script does, once (the fence), by its order's decision.
// StuckPart is a part set aside on a node.
type StuckPart struct {
	Node    string // the configured name of the node the part is on
	PartID  string // the part id, as the node's stuck index holds it
	OrderID string // the order the part belongs to; "" when its record is gone
	SKU     string // the SKU the part holds units of; "" when its record is gone
	// Quantity is the units the part holds (reserved on its node).
	Quantity int64
	// State is the part's state now, or PartMissing when its record is
	// gone: PartPending, or PartCancelled for a tombstone written over its
	// lost record (lua/pending_index.lua, pend_lost). A settle takes the
	// part out of the stuck index as it settles it, so a settled record
	// listed here is that of an entry a release before left behind a
	// settle, which the operator's settles refuse ([ErrStuckSettled]).
	State PartState
	// Since is when the part was first set aside, by the node's clock
	// (automatic retries that set it aside again keep it).
	Since time.Time
	// Reason is the error that set it aside.
	Reason string
	// Problem is "" when the part's record was read; otherwise why it
	// could not be (a corrupt record: the error names the node, the record
	// and the field), and OrderID, SKU, Quantity and State hold only what
	// was read before it (State "" then means unknown, not missing). A
	// part is often set aside because its record is corrupt: it is listed
	// all the same, as are the others.
	Problem string
}

// Unsettleable reports whether err, returned while settling a part, will
// come back on every retry until someone repairs data or code: a corrupt
// value ([ErrCorrupt]), a deleted stock hash ([ErrStockMissing]), a script
// that failed on the node ([ErrScriptFailed]: a Lua runtime error, an
// unknown operation) or a reply of the wrong shape ([ErrMalformedReply]:
// its outcome is unknown, and a settle is fenced by the part's state, so
// setting the part aside and retrying it later is safe). Unreachable
// nodes, timeouts, other error replies (a node loading its data, busy,
// out of memory, at its client limit) and identity or epoch refusals are
// transient: false. It reads only the typed errors nodeErr (lua.go) maps
// replies to.
func Unsettleable(err error) bool {
	return errors.Is(err, ErrCorrupt) || errors.Is(err, ErrStockMissing) ||
		errors.Is(err, ErrScriptFailed) || errors.Is(err, ErrMalformedReply)
}

// SetAside moves an expired part out of its node's pending index into the
// node's stuck index with reason (see [StuckPart]), to be retried by
// itself first after first, twice as long after each further time it is
// set aside, never longer than most (a part with no record, where the
// backoff cannot be kept, after most from the start; the backoff is the
// reconciler's policy: rollback.Settings.StuckRetry, StuckRetryMax).
// It returns how many times the part has been set aside since it was last
// retried explicitly (1 the first time), or 0 when it did not move the
// part (it was no longer indexed as pending, e.g. another instance set it
// aside first). first must be at least 1ms and most at least first
// ([ErrInvalid] naming them otherwise).
func (inv *Inventory) SetAside(ctx context.Context, p PendingPart, reason string, first, most time.Duration) (int, error) {
	if first < time.Millisecond || most < first {
		return 0, fmt.Errorf("%w: stuck part %s: retry backoff first %v, most %v; want first ≥ 1ms and most ≥ first", ErrInvalid, p.PartID, first, most)
	}
	n, err := inv.ownNode(p.Node)
	if err != nil {
		return 0, err
	}
	return inv.setAsideOn(ctx, n, p, reason, first, most)
}

// The backoff of parts set aside, unless a caller says otherwise: the
// first automatic retry comes DefaultStuckRetry after a part was set
// aside, each further one twice as late, at most DefaultStuckRetryMax
// (the reconciler's Settings; the apply's settle of leaving nodes).
const (
	DefaultStuckRetry    = 5 * time.Second
	DefaultStuckRetryMax = 5 * time.Minute
)

// StuckBackoffWithin returns the backoff first, most capped at a quarter
// of retention (at least 1ms), first at most most: each retry relies on
// the part's order record, which lives the retention.
func StuckBackoffWithin(first, most, retention time.Duration) (time.Duration, time.Duration) {
	most = min(most, max(retention/4, time.Millisecond))
	return min(first, most), most
}

// setAsideOn is SetAside on n, p's node, which may be a node leaving the
// topology (the apply's settle of leaving nodes: apply_leaving.go),
// valid first and most.
func (inv *Inventory) setAsideOn(ctx context.Context, n *node.Node, p PendingPart, reason string, first, most time.Duration) (int, error) {
	v, err := inv.pendingAdjust(ctx, n, "stuck", p.PartID, reason, ms(first), ms(most), p.member)
	if err != nil {
		return 0, err
	}
	tries, err := asInt64(n, pendingAdjustScript, v)
	return int(tries), err
}

// RetryStuck moves a stuck part of node back into its pending index, due
// now, restarting its backoff, so the next reconciler pass settles it (or
// sets it aside again with the error it still meets). It reports whether
// the part was stuck.
func (inv *Inventory) RetryStuck(ctx context.Context, nodeName, partID string) (bool, error) {
	if partID == "" {
		return false, fmt.Errorf("%w: part_id is empty", ErrInvalid)
	}
	n, err := inv.ownNode(nodeName)
	if err != nil {
		return false, err
	}
	v, err := inv.pendingAdjust(ctx, n, "retry", partID)
	if err != nil {
		return false, err
	}
	moved, err := asInt64(n, pendingAdjustScript, v)
	return moved == 1, err
}

// stuckRetryScript moves set-aside parts of a node back to its pending
// index, due now (see the file comment).
//
// KEYS: 1 stamp, 2 pending index, 3 stuck index, 4 stuck reasons, 5 stuck
// retry times. ARGV: 4 op, 5 the most parts looked at, then:
//
//	due  6 most retry delay ms: the parts whose retry time has come
//	     (their backoff goes on); one whose record cannot be read or is
//	     gone stays, its retry time pushed back (RetryDueStuck).
//	sku  6 a stock hash, 7 its quota key prefix: the parts whose counter
//	     is that hash or a quota counter of that SKU (their backoff
//	     restarts).
//
// Part records are named partPrefix .. id (ids read from an index, lua.go).
// Returns the number of parts moved.
var stuckRetryScript = newScript("stuck-retry", true, luaFile("stuck_retry.lua"))

// stuckRetry runs stuckRetryScript's op on node nodeName.
func (inv *Inventory) stuckRetry(ctx context.Context, nodeName string, args ...any) (int, error) {
	n, err := inv.ownNode(nodeName)
	if err != nil {
		return 0, err
	}
	return inv.stuckRetryOn(ctx, n, args...)
}

// stuckRetryOn runs stuckRetryScript's op on n.
func (inv *Inventory) stuckRetryOn(ctx context.Context, n *node.Node, args ...any) (int, error) {
	v, err := inv.run(ctx, n, stuckRetryScript, []string{PendingKey, keyStuck, keyStuckWhy, keyStuckRetry}, args...)
	if err != nil {
		return 0, err
	}
	moved, err := asInt64(n, stuckRetryScript, v)
	return int(moved), err
}

// RetryDueStuck moves up to limit (1..10000) parts set aside on node whose
// backoff has run out back into its pending index, due now, and returns
// how many it moved. The reconciler calls it before each pass over a node.
// A part whose record cannot be read, or is gone (for an inline part: its
// order record; or a tombstone written over it: lua/pending_index.lua,
// pend_lost), stays set aside with its reason, since moving it would
// only set it aside again: its next automatic retry comes as long after
// now as it has been set aside (at least a second), at most most (≥ 1ms).
func (inv *Inventory) RetryDueStuck(ctx context.Context, nodeName string, limit int, most time.Duration) (int, error) {
	if limit <= 0 || limit > 10000 {
		return 0, fmt.Errorf("%w: limit %d, want 1..10000", ErrInvalid, limit)
	}
	if most < time.Millisecond {
		return 0, fmt.Errorf("%w: most retry delay %v, want ≥ 1ms", ErrInvalid, most)
	}
	return inv.stuckRetry(ctx, nodeName, "due", limit, ms(most))
}

// RetryStuckSKU moves the parts of route/sku set aside on node (stock
// parts and per-user quota parts; among the node's 10000 oldest set-aside
// parts) back into its pending index, due now, restarting their backoff,
// and returns how many it moved. LoadStock calls it on the nodes it
// loaded.
func (inv *Inventory) RetryStuckSKU(ctx context.Context, nodeName, route, sku string) (int, error) {
	if err := checkID("sku_id", sku); err != nil {
		return 0, err
	}
	if _, err := inv.set(ctx, route); err != nil {
		return 0, err
	}
	return inv.stuckRetry(ctx, nodeName, "sku", 10000, stockKey(route, sku), quotaKey(route, sku, ""))
}

// retryStuckOf retries at once the parts of route/sku set aside on nodes
// (LoadStock loaded the SKU there, perhaps after a repair). A failure is
// logged, not returned: the backoff retries those parts anyway.
func (inv *Inventory) retryStuckOf(ctx context.Context, nodes []*node.Node, route, sku string) {
	for _, n := range nodes {
		k, err := inv.RetryStuckSKU(ctx, n.Name(), route, sku)
		if err != nil {
			inv.log.Warn("retrying stuck parts of a loaded SKU", "node", n.Name(), "route", route, "sku", sku, "err", err)
		} else if k > 0 {
			inv.log.Info("stuck parts retried: their SKU was loaded", "node", n.Name(), "route", route, "sku", sku, "parts", k)
		}
	}
}

// StuckParts returns up to limit (1..10000) parts set aside on node, the
// oldest first.
func (inv *Inventory) StuckParts(ctx context.Context, nodeName string, limit int) ([]StuckPart, error) {
	if limit <= 0 || limit > 10000 {
		return nil, fmt.Errorf("%w: limit %d, want 1..10000", ErrInvalid, limit)
	}
	n, err := inv.ownNode(nodeName)
	if err != nil {
		return nil, err
	}
	return stuckPartsOn(ctx, n, limit)
}

// stuckPartsOn is StuckParts on n, limit valid.
func stuckPartsOn(ctx context.Context, n *node.Node, limit int) ([]StuckPart, error) {
	ids, err := n.Client().ZRangeWithScores(ctx, keyStuck, 0, int64(limit-1)).Result()
	if err != nil {
		return nil, nodeErr(n, err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	pipe := n.Client().Pipeline()
	why := make([]*redis.StringCmd, len(ids))
	rec := make([]*PartRead, len(ids))
	for i, z := range ids {
		id, ok := z.Member.(string)
		if !ok {
			return nil, &ReplyError{Node: n.Name(), Script: "ZRANGE " + keyStuck, At: fmt.Sprintf("reply[%d]", i), Want: "a string member", Got: z.Member}
		}
		why[i] = pipe.HGet(ctx, keyStuckWhy, id)
		rec[i] = ReadPart(ctx, pipe, id)
	}
	_, _ = pipe.Exec(ctx) // each read's own error is checked below (ReadPart's layouts)
	out := make([]StuckPart, len(ids))
	for i, z := range ids {
		id := z.Member.(string) // checked above
		sp := StuckPart{Node: n.Name(), PartID: id, Since: time.UnixMilli(int64(z.Score)), State: PartMissing}
		if err := why[i].Err(); err != nil && !errors.Is(err, redis.Nil) {
			return nil, nodeErr(n, err)
		}
		sp.Reason = why[i].Val()
		if err := readStuckRecord(n, id, rec[i], &sp); err != nil {
			var re *ReplyError
			if !errors.Is(err, ErrCorrupt) && !errors.As(err, &re) {
				return nil, nodeErr(n, err)
			}
			sp.Problem = err.Error()
		}
		out[i] = sp
	}
	return out, nil
}

// readStuckRecord fills sp's fields from the part record read by rec. A
// record that cannot be decoded gives an error wrapping ErrCorrupt or a
// *ReplyError; any other error is the node's.
func readStuckRecord(n *node.Node, id string, rec *PartRead, sp *StuckPart) error {
	fields, err := rec.Fields()
	if err != nil {
		return err
	}
	r := newReplyReader(n.Name(), "read of "+partKey(id))
	f := make([]any, 4)
	for j, name := range []string{"state", "order", "sku", "qty"} {
		if v, ok := fields[name]; ok {
			f[j] = v
		}
	}
	if st := r.optStr(f, 0); st != "" {
		sp.State = PartState(st)
	}
	sp.OrderID = r.optStr(f, 1)
	sp.SKU = r.optStr(f, 2)
	sp.Quantity = r.optIntStr(f, 3)
	return r.err
}

// Retention is inventory.retention: how long a decided order record, a
// settled part and a tombstone live after the last reader relied on them.
// A reconciler retries set-aside parts well within it (stuck.go).
func (inv *Inventory) Retention() time.Duration { return inv.cfg.Retention }

// StuckCount returns how many parts are set aside on node.
func (inv *Inventory) StuckCount(ctx context.Context, nodeName string) (int64, error) {
	n, err := inv.ownNode(nodeName)
	if err != nil {
		return 0, err
	}
	v, err := n.Client().ZCard(ctx, keyStuck).Result()
	if err != nil {
		return 0, nodeErr(n, err)
	}
	return v, nil
}
