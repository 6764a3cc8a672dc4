package inventory

import (
	"context"
	"fmt"
	"time"

	"github.com/shardis/shardis/node"
)

// pendingDueScript lists pending parts of a node whose deadline passed.
// KEYS: 1 stamp, 2 pending index. ARGV: 4 limit. Returns up to limit
// entries {id, order, token, state, deadline, member, problem,
// stuck_since ms (0: never set aside)}, read from
// each indexed part's record (partPrefix .. id, see lua.go). An index
// member that names no part (a redo-log place with no entry,
// [PendingKey]) is reported as a part whose record is gone, with the
// member as its id, which the drop op of pendingAdjustScript unindexes. A
// part whose record cannot be read, or is gone (for an inline part: its
// order record) while the index lists it, is reported with the problem
// ("" otherwise), so one such part is set aside instead of failing the
// listing of every part behind it.
var pendingDueScript = newScript("pending-due", false, luaFile("pending_due.lua"))

// pendingAdjustScript adjusts a node's index of pending parts.
// KEYS: 1 stamp, 2 pending index, 3 the part's key, 4 stuck index, 5
// stuck reasons, 6 stuck retry times (pendingAdjust builds them). ARGV: 4
// op, then:
//
//	later  5 part id, 6 new deadline ms, 7 the part's member as the due
//	       listing read it (optional): move a part's deadline (only if
//	       it is still indexed).
//	drop   5 part id, 6 the part's member as the due listing read it
//	       (optional): unindex a part that is not pending (not one whose
//	       record cannot be read: it may be).
//	stuck  5 part id, 6 reason, 7 first retry delay ms, 8 most retry
//	       delay ms, 9 the part's member as the due listing read it
//	       (optional): set a part aside (see
//	       [Inventory.SetAside]): move it from the pending index to the
//	       stuck index, with its reason and the time it is retried by
//	       itself (stuck.go). Returns how many times it was set aside
//	       since its last explicit retry (1 the first time, and always
//	       for a record it cannot read or update), or 0 when it was not
//	       indexed as pending.
//	retry  5 part id: move a stuck part back to the pending index, due
//	       now, and restart its backoff. Returns 1, or 0 when it was not
//	       stuck.
//
// The ops given the listing's member take it instead of the one the
// part's record gives ([PendingMember]) when it is a place that stands for
// the part (the redo entry there names it) and the record names none
// (gone, unreadable, or re-created by hand without its redo and offset)
// or another: the index holds a part by its place whatever its record
// says ([PendingKey]). Each removal names the part's id too.
var pendingAdjustScript = newReleaseScript("pending-adjust", luaFile("pending_adjust.lua"))

// pendingAdjust runs pendingAdjustScript's op on part partID of n, with
// args after the part id.
func (inv *Inventory) pendingAdjust(ctx context.Context, n *node.Node, op, partID string, args ...any) (any, error) {
	return inv.run(ctx, n, pendingAdjustScript, []string{PendingKey, partKey(partID), keyStuck, keyStuckWhy, keyStuckRetry},
		append([]any{op, partID}, args...)...)
}

// homeRetry is how long a part whose order home is unreachable waits
// before the reconciler looks at it again.
const homeRetry = 2 * time.Second

// PendingPart is a pending part past its deadline on a node.
type PendingPart struct {
	Node    string    // the configured name of the node whose pending index lists it
	PartID  string    // the part id (the index member itself when its record is gone)
	OrderID string    // the order the part belongs to; "" when its record is gone
	Token   string    // the Reserve attempt that took it
	State   PartState // PartPending unless the index is stale
	// Deadline is the part record's deadline (node clock, ms precision);
	// the Unix epoch (time.UnixMilli(0)), not the zero Time, when the
	// record has none or is gone.
	Deadline time.Time
	// Problem is "" when the part's record was read, or the index member
	// names no part (PartID is the member then, State PartMissing: a
	// stale entry [Inventory.ResolveExpired] drops). Otherwise it says
	// why the part cannot be settled: its record cannot be read (the
	// node's error), or it is gone (for an inline part, its order
	// record) while the index lists it, so the units it holds stay
	// reserved; OrderID, Token, State and Deadline are then unknown
	// (zero), and ResolveExpired returns an error wrapping [ErrCorrupt]:
	// the reconciler sets the part aside ([Inventory.SetAside]).
	Problem string
	member  string // the index member the listing read it under
	// setAside: the part was set aside before (its record's stuck_since),
	// so an expire op met its order's record then: one found missing now
	// may have expired (stuck.go)
	setAside bool
}

// Resolution is what [Inventory.ResolveExpired] did with a part.
type Resolution string

const (
	// Cancelled: the part was cancelled now (its order was cancelled,
	// expired, failed, or never recorded it).
	Cancelled = Resolution(PartCancelled)
	// Confirmed: the part was confirmed now (its order was confirmed).
	Confirmed = Resolution(PartConfirmed)
	// AlreadySettled: another process settled it first.
	AlreadySettled Resolution = "already"
	// Postponed: its order is not decided yet, or its decision is out of
	// reach; the part comes due again later (at the order's deadline, past
	// the attempt's lease while it is being reserved, or in a few seconds).
	Postponed Resolution = "postponed"
)

// DueParts returns up to limit (0..10000) pending parts of n whose
// deadline has passed, by n's clock.
func (inv *Inventory) DueParts(ctx context.Context, n *node.Node, limit int) ([]PendingPart, error) {
	if limit < 0 || limit > 10000 {
		// a negative one reached ZRANGEBYSCORE's LIMIT as "no limit"
		return nil, fmt.Errorf("%w: limit %d, want 0..10000", ErrInvalid, limit)
	}
	v, err := inv.run(ctx, n, pendingDueScript, []string{PendingKey}, limit)
	if err != nil {
		return nil, err
	}
	return decodeDue(n.Name(), v)
}

// decodeDue reads pendingDueScript's reply: a list of {id, order, token,
// state, deadline ms, member, problem, stuck_since ms} (the script writes
// "" and 0 for absent fields).
func decodeDue(nodeName string, v any) ([]PendingPart, error) {
	r := newReplyReader(nodeName, pendingDueScript.name)
	raw := r.list(v, -1)
	out := make([]PendingPart, 0, len(raw))
	for i := range raw {
		t := r.listAt(raw, i, 8)
		if r.err != nil {
			break
		}
		r.enter(i)
		p := PendingPart{Node: nodeName, PartID: r.str(t, 0), OrderID: r.str(t, 1), Token: r.str(t, 2),
			State: PartState(r.str(t, 3)), Deadline: time.UnixMilli(r.int(t, 4)), member: r.str(t, 5),
			Problem: r.str(t, 6), setAside: r.int(t, 7) > 0}
		r.leave()
		out = append(out, p)
	}
	if r.err != nil {
		return nil, r.err
	}
	return out, nil
}

// byDecision is what the decided record rec of due part p's order says
// of p: confirm it (confirmed by p's attempt), put it off to the order's
// deadline (reserved or being reserved by that attempt: later, done
// here), or cancel it (anything else).
func (inv *Inventory) byDecision(ctx context.Context, n *node.Node, p PendingPart, rec orderRecord) (action Action, later bool, err error) {
	if rec.token != p.Token {
		return Cancel, false, nil
	}
	switch rec.status {
	case recConfirmed:
		return Confirm, false, nil
	case recReserved, recReserving:
		at := fmt.Sprint(rec.deadline.Add(partGrace).UnixMilli())
		if rec.status == recReserving {
			// a wait from now, on the part node's clock (the index's)
			at = "+" + fmt.Sprint((rec.wait + partGrace).Milliseconds())
		}
		_, err := inv.pendingAdjust(ctx, n, "later", p.PartID, at, p.member)
		return Cancel, true, err
	}
	return Cancel, false, nil
}

// expiredRecord runs the expiry's compare-and-set on the record of p's
// order on home and returns the record decided: a staging record (long
// past its lease) is decided first (resolveStaged) and read again. One
// found staging again after that is an error wrapping ErrUnavailable:
// a withdraw deleted the record decided, and a late stage (this part's
// own attempt's, or another's) landed on the empty key. Only a record
// decided, or one this pass decided itself, is acted on: cancelling now
// would give back the units of an attempt that may yet answer success.
func (inv *Inventory) expiredRecord(ctx context.Context, home *node.Node, p PendingPart) (orderRecord, error) {
	// the part's deadline and whether it was set aside tell the op
	// whether a missing record may have expired (stuck.go)
	aside := "0"
	if p.setAside {
		aside = "1"
	}
	expire := func() (orderRecord, error) {
		return inv.orderOp(ctx, home, p.OrderID, opExpire, p.Token, seconds(inv.cfg.Retention), p.PartID,
			p.Deadline.UnixMilli(), aside)
	}
	rec, err := expire()
	if err != nil || rec.status != recStaging {
		return rec, err
	}
	if err := inv.resolveStaged(ctx, home, p.OrderID, rec, true); err != nil {
		return orderRecord{}, err
	}
	rec, err = expire()
	if err == nil && rec.status == recStaging {
		return orderRecord{}, fmt.Errorf("%w: order %q is staging again", ErrUnavailable, p.OrderID)
	}
	return rec, err
}

// ResolveExpired settles one expired part by the decision recorded for its
// order: confirmed by the same attempt → confirm; still reserved or being
// reserved by that attempt → postpone (to the order's deadline, or past
// the attempt's lease while it is being reserved); anything
// else (cancelled, expired, failed, superseded or missing) → cancel. A
// missing record is read as an attempt that never landed (its failure
// recorded) only for a part that may not have outlived it: one set aside
// before, or due at least inventory.retention less two seconds
// ago, that meets no record (or only a copy marked moved by a topology
// change, dead there) is not settled (the record may have been a confirmed order's that lived
// out its retention), nor is such a part that meets a record of another
// attempt begun at or after it came due (the order id reserved again
// since: stuck.go): the error wraps [ErrCorrupt], says the decision
// cannot be inferred, and the caller sets the part aside for an operator
// (stuck.go). A part listed with a [PendingPart.Problem] (its record unreadable or gone)
// is not settled: the error wraps [ErrCorrupt]. The
// order's expiry itself is decided first, by compare-and-set on the order
// record, so a racing Confirm either wins (the part is confirmed) or loses
// (Confirm reports ErrExpired). When the decision is out of reach (the
// order's home node, or the node of another promised part of a staged
// order, is unreachable or refuses, for a reason other than data to
// repair: see [Unsettleable]) the part is postponed by a few seconds and
// the error returned, so the parts behind it are not held up; so is a
// part whose order it found staging, decided, and then found staging
// again (a withdraw deleted the record, and a late stage landed on the
// empty key: ErrUnavailable): it acts only on a record decided, or one it
// decided itself. Safe to run from several processes at once: each part
// changes state at most once.
func (inv *Inventory) ResolveExpired(ctx context.Context, p PendingPart) (Resolution, error) {
	n, err := inv.r.Node(p.Node)
	if err != nil {
		return "", err
	}
	ctx, _ = inv.pin(ctx)
	if p.Problem != "" {
		// data only a repair can fix: the caller sets the part aside
		return "", fmt.Errorf("%w: node %s: pending part %q: %s", ErrCorrupt, p.Node, p.PartID, p.Problem)
	}
	if p.State != PartPending {
		if _, err := inv.pendingAdjust(ctx, n, "drop", p.PartID, p.member); err != nil {
			return "", err
		}
		return AlreadySettled, nil
	}
	// putOff looks at the part again later when its order's decision is
	// out of reach (its home, or the node of another promised part of a
	// staged order, down, timing out, or refusing), so the parts of other
	// orders behind it in the pending index are not held up.
	putOff := func(err error) (Resolution, error) {
		// homeRetry from now on the part node's clock, which the index is
		// read by: the process's clock behind it made the part due at once
		if _, lerr := inv.pendingAdjust(ctx, n, "later", p.PartID, "+"+fmt.Sprint(homeRetry.Milliseconds()), p.member); lerr != nil {
			return "", lerr
		}
		return Postponed, err
	}
	action := Cancel
	if p.OrderID != "" {
		home, err := inv.homeFor(ctx, p.OrderID)
		if err != nil {
			if Unsettleable(err) {
				// the record on its previous home (a move not done)
				// unreadable: data to repair, set aside as below
				return "", err
			}
			return putOff(err)
		}
		rec, err := inv.expiredRecord(ctx, home, p)
		if err != nil {
			if Unsettleable(err) {
				// an unreadable record, or a promised part's data to
				// repair: the caller sets the part aside
				return "", err
			}
			return putOff(err)
		}
		if rec.status == recGone && inv.mutated(MutationStuckGoneCancel) {
			// the mutation: read as an attempt that never landed
			return inv.settleExpired(ctx, p, Cancel)
		}
		if rec.status == recGone {
			// no record of the part's attempt, and the part may have
			// outlived it: nothing was written, the caller sets the part
			// aside (stuck.go)
			gone := "is gone"
			if rec.reason == reasonAnotherAttempt {
				gone = "is gone, replaced by a new attempt of the order id begun after the part came due"
			}
			return "", fmt.Errorf("%w: node %s: part %q: the record of its order %q %s (the part was set aside, or came due "+
				"about inventory.retention ago or more: the record may have lived out its retention), so the order's decision cannot be "+
				"inferred: an operator decides by the system of record (`shardis parts settle %s '%s' confirm|cancel`)", ErrCorrupt, p.Node,
				p.PartID, p.OrderID, gone, p.Node, p.PartID)
		}
		if rec.settledHere(p.Node, p.PartID) {
			return Cancelled, nil // this expiry settled it with the record (inline.go)
		}
		var later bool
		if action, later, err = inv.byDecision(ctx, n, p, rec); err != nil {
			return "", err
		}
		if later {
			return Postponed, nil
		}
	}
	return inv.settleExpired(ctx, p, action)
}

// settleExpired settles the expired part p by action (ResolveExpired's
// last step).
func (inv *Inventory) settleExpired(ctx context.Context, p PendingPart, action Action) (Resolution, error) {
	res, err := inv.SettleNow(ctx, Settle{Node: p.Node, Action: action, OrderID: p.OrderID, PartIDs: []string{p.PartID},
		Members: []string{p.member}})
	if err != nil {
		return "", err
	}
	if res[0] == settleLost {
		// its record lost since the listing read it: set aside, as a
		// part listed with its record gone
		return "", fmt.Errorf("%w: node %s: pending part %q: its record is gone while the node lists it", ErrCorrupt, p.Node, p.PartID)
	}
	if res[0] != settleDone {
		return AlreadySettled, nil
	}
	if action == Confirm {
		return Confirmed, nil
	}
	return Cancelled, nil
}
