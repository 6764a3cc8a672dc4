package inventory

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shardis/shardis/node"
)

// OrderStatus is an order's state as Confirm and Cancel report it.
type OrderStatus int

const (
	// StatusUnspecified is the zero value: no status.
	StatusUnspecified OrderStatus = iota
	// StatusReserved means stock is held, awaiting Confirm or Cancel.
	StatusReserved
	// StatusConfirmed means the stock is sold.
	StatusConfirmed
	// StatusCancelled means the stock was (or is being) returned.
	StatusCancelled
)

// String returns "reserved", "confirmed", "cancelled" or "unspecified".
func (s OrderStatus) String() string {
	switch s {
	case StatusReserved:
		return string(OrderReserved)
	case StatusConfirmed:
		return string(OrderConfirmed)
	case StatusCancelled:
		return string(OrderCancelled)
	}
	return "unspecified"
}

// Outcome is the result of Confirm or Cancel.
type Outcome struct {
	// OrderID is the order Confirm or Cancel was called for.
	OrderID string
	// Status is the order's status after the call: StatusConfirmed or
	// StatusCancelled.
	Status OrderStatus
	// PendingParts counts parts whose node could not be reached: they are
	// settled when it comes back (deferred queue, then the reconciler);
	// for a cancel, also the parts whose record is gone while their node
	// lists them (lost while pending: no tombstone is written, their
	// units stay reserved; set aside once due, see [Inventory.SettleNow]).
	PendingParts int
	// Reason, for Cancel: [ReasonCancelled] for a reservation still
	// undecided (its deadline passed or not); [ReasonExpired] when a
	// Confirm past its deadline, or the reconciler's expiry, decided it
	// first; [ReasonTombstone] when it was never reserved (a later
	// Reserve of the id is refused).
	Reason DecisionReason
}

// orderRecord is the order script's reply.
type orderRecord struct {
	status   recStatus
	token    string
	deadline time.Time
	parts    []part
	reason   DecisionReason
	wait     time.Duration
	// home is the node the record was read on; settledNow the ids of the
	// inline parts (inline.go) this read's decision settled there, in
	// the same script, each followed by \x1f (no id holds a control
	// character): their Confirm or Cancel has nothing to send for them
	home, settledNow string
}

// toSettle returns the parts of rec that a Confirm or Cancel still
// settles: all but those its decision settled on its home.
func (rec orderRecord) toSettle() []part {
	if rec.settledNow == "" {
		return rec.parts
	}
	out := make([]part, 0, len(rec.parts))
	for _, p := range rec.parts {
		if !rec.settledHere(p.Node, p.ID) {
			out = append(out, p)
		}
	}
	return out
}

// settledHere reports whether rec's decision settled part id of node.
func (rec orderRecord) settledHere(node, id string) bool {
	if node != rec.home || id == "" {
		return false
	}
	for s := range strings.SplitSeq(rec.settledNow, "\x1f") {
		if s == id {
			return true
		}
	}
	return false
}

// Confirm moves a reserved order to confirmed, then every part: the parts
// an order reserved whole on its home took there (inline.go) in the same
// script as the decision, the others with one settle per node. It is
// idempotent. Errors wrap [ErrNotFound] (never reserved, or its Reserve
// failed), [ErrCancelled], [ErrExpired] (past its deadline: the order is
// cancelled instead), [ErrInProgress], or [ErrUnavailable] (the order's
// home node is down). Parts on unreachable nodes are confirmed later; the
// Outcome counts them. An order confirmed (now or before) whose recorded
// parts no longer exist on their nodes is answered with its Outcome and
// an error wrapping [ErrDataLoss] that names them.
func (inv *Inventory) Confirm(ctx context.Context, orderID string) (Outcome, error) {
	ctx, rec, err := inv.decide(ctx, orderID, opConfirm)
	if err != nil {
		return Outcome{}, err
	}
	switch rec.status {
	case recConfirmed:
		pending, missing := inv.settleDecided(ctx, orderID, Confirm, rec.toSettle())
		if len(missing) > 0 && !inv.partsMayHaveExpired(rec) {
			inv.log.Error("DATA LOSS: confirmed order has parts missing on their nodes", "order", orderID, "parts", missing)
			return Outcome{OrderID: orderID, Status: StatusConfirmed, PendingParts: pending},
				fmt.Errorf("%w: order %q is confirmed, but its part(s) %v no longer exist on their node: the node lost data (see SECURITY.md)",
					ErrDataLoss, orderID, missing)
		}
		return Outcome{OrderID: orderID, Status: StatusConfirmed, PendingParts: pending}, nil
	case recMissing:
		return Outcome{}, fmt.Errorf("%w: order %q was never reserved", ErrNotFound, orderID)
	case recFailed:
		// A one-round attempt's failed record lists its parts, whose
		// cancels after the fail may never have landed (its decider died):
		// the record excludes the attempt, so they are cancelled (again),
		// and the answer "took nothing" holds from here.
		_, _ = inv.settleDecided(ctx, orderID, Cancel, rec.parts)
		return Outcome{}, fmt.Errorf("%w: order %q: its last Reserve attempt failed and took nothing (Reserve it again)", ErrNotFound, orderID)
	case recReserving:
		return Outcome{}, fmt.Errorf("%w: order %q", ErrInProgress, orderID)
	case recCancelled:
		if rec.reason == ReasonExpired {
			_, _ = inv.settleDecided(ctx, orderID, Cancel, rec.toSettle())
			return Outcome{}, fmt.Errorf("%w: order %q passed its deadline %s", ErrExpired, orderID, rec.deadline.UTC().Format(time.RFC3339))
		}
		return Outcome{}, fmt.Errorf("%w: order %q (%s)", ErrCancelled, orderID, rec.reason)
	}
	return Outcome{}, fmt.Errorf("%w: order %q: unexpected state %q", ErrUnavailable, orderID, rec.status)
}

// partsMayHaveExpired reports whether the settled parts of decided record
// rec may be gone by their retention rather than lost: a settled part
// lives inventory.retention from when it comes due (settle.lua), at the
// order's deadline plus partGrace or later, while a record a reader relied
// on lives the retention from that read (order.lua, relied_on), so a
// Confirm retried after the first finds the record and not its parts.
// Missing before then, a part was lost with its node's data. It counts
// from the earliest a part may expire, not the latest: the record cannot
// tell a take that reached its node late (its part comes due, and
// expires, that much later) from a commit that landed late (every part
// came due at the deadline), so a part lost in that lag after its
// earliest expiry is reported as expiry, never the other way round (a
// late commit's parts reported lost, a false DATA LOSS: found by a
// review). The retention counted is the scripts' (whole seconds,
// seconds: a retention of 90.5s keeps a part 90s past its due). It reads
// this instance's clock, for what Confirm reports only.
func (inv *Inventory) partsMayHaveExpired(rec orderRecord) bool {
	return time.Now().After(rec.deadline.Add(partGrace + time.Duration(seconds(inv.cfg.Retention))*time.Second))
}

// Cancel cancels an order and returns its stock and per-user quota. It is
// idempotent. Cancel of an order never reserved records a tombstone, so a
// later Reserve of that order id is refused. Cancel of a confirmed order
// wraps [ErrConfirmed]. Its parts settle as Confirm's do: with the
// decision when the order was reserved whole on its home. Parts on
// unreachable nodes are cancelled when they come back; the Outcome counts
// them.
func (inv *Inventory) Cancel(ctx context.Context, orderID string) (Outcome, error) {
	ctx, rec, err := inv.decide(ctx, orderID, opCancel)
	if err != nil {
		return Outcome{}, err
	}
	switch rec.status {
	case recCancelled:
		pending, _ := inv.settleDecided(ctx, orderID, Cancel, rec.toSettle())
		return Outcome{OrderID: orderID, Status: StatusCancelled, PendingParts: pending, Reason: rec.reason}, nil
	case recConfirmed:
		return Outcome{}, fmt.Errorf("%w: order %q", ErrConfirmed, orderID)
	}
	return Outcome{}, fmt.Errorf("%w: order %q: unexpected state %q", ErrUnavailable, orderID, rec.status)
}

// decide runs op (opConfirm or opCancel) on orderID's record at its home
// node and returns the record after it, and ctx pinned to the topology
// it was decided under (its parts are settled under the same). A
// one-round reservation not committed yet is decided first
// (resolveStaged), then op runs again: a Cancel prevents a part still on
// its way; a Confirm does not cut short an attempt whose lease runs.
func (inv *Inventory) decide(ctx context.Context, orderID string, op orderOp) (context.Context, orderRecord, error) {
	if err := checkID("order_id", orderID); err != nil {
		return ctx, orderRecord{}, err
	}
	ctx, _ = inv.pin(ctx)
	home, err := inv.homeFor(ctx, orderID)
	if err != nil {
		return ctx, orderRecord{}, err
	}
	rec, err := inv.decideOn(ctx, home, orderID, op)
	if err == nil && rec.status == recStaging {
		prevent := op == opCancel || rec.wait == 0
		if err = inv.resolveStaged(ctx, home, orderID, rec, prevent); err == nil {
			rec, err = inv.decideOn(ctx, home, orderID, op)
		}
	}
	return ctx, rec, err
}

// decideOn runs op on orderID's record at home. It sends nothing once the
// caller gave up; once sent, it runs to its reply whatever the caller does
// then (detached): a decision that landed while its caller gave up, its
// reply lost, left Confirm and Cancel with no record to settle by, so they
// sent no settle and deferred none, and the parts on other nodes stayed
// reserved until they came due, the order's ttl on
// (TestDecisionLandingUnderACutCallerSettlesItsParts). The settles after
// it run detached too (Confirm, Cancel).
func (inv *Inventory) decideOn(ctx context.Context, home *node.Node, orderID string, op orderOp) (orderRecord, error) {
	if err := ctx.Err(); err != nil {
		return orderRecord{}, fmt.Errorf("%w: order %q: %w", ErrUnavailable, orderID, err)
	}
	dctx, cancel := detached(ctx)
	defer cancel()
	return inv.orderOp(dctx, home, orderID, op, "", seconds(inv.cfg.Retention))
}

// settleDecided is settleParts for the parts of a decision that landed:
// detached, as the decision was (decideOn), and only when there are
// parts (an order decided with its inline parts has none: no context nor
// timer on that path).
func (inv *Inventory) settleDecided(ctx context.Context, orderID string, action Action, parts []part) (pending int, missing []string) {
	if len(parts) == 0 {
		return 0, nil
	}
	ctx, cancel := detached(ctx)
	defer cancel()
	return inv.settleParts(ctx, orderID, action, parts)
}

// nodeSettled is one node's settle of a settleRound: what it asked, and
// each part's result or the error (SettleNow's).
type nodeSettled struct {
	s   Settle
	res []string
	err error
}

// SettleNow settles parts of one order on one node now and returns each
// part's result ("done", "already", "tombstoned", "lost", "missing" or
// "conflict:<state>"). It is idempotent: a part changes state at most once.
// An error means nothing is known to have changed; retry it later.
//
// A cancel of a part whose record does not exist writes its tombstone
// ("tombstoned": a take still on its way takes nothing) unless the node
// lists the part, pending or set aside, by the member [Settle.Members]
// gives or by its id: then its record was lost while it was pending, its
// units are reserved still, and a tombstone would read as a part settled
// (the expiry would drop it, its units reserved for good): it answers
// "lost" and writes nothing; the part is set aside once due
// ([Inventory.ResolveExpired]), and settled by its order's decision once
// its record is repaired, or by [Inventory.SettleStuckLost]. A part
// listed by its place alone, its member not given, is not seen listed:
// it gets its tombstone (which fences a take still on its way, as the
// node cannot tell the two apart), and a tombstone of a part its node
// lists is read by the node's listing, redo-log and stuck readers as the
// lost record it was written over (lua/pending_index.lua, pend_lost): set
// aside once due as above, never dropped as settled; a cancel given the
// member answers "lost" for it.
//
// A Settle whose Action is neither [Confirm] nor [Cancel], naming one
// part id twice, or whose Members is neither nil nor one per part, is
// refused with an error wrapping [ErrInvalid] naming the action, the id
// or the counts, before any call (settle.lua refuses any other action
// word, and settles a part named twice once, the repeat answering
// "already").
func (inv *Inventory) SettleNow(ctx context.Context, s Settle) ([]string, error) {
	if s.Action != Confirm && s.Action != Cancel {
		return nil, fmt.Errorf("%w: settle of order %q on %s: action %q is neither %q nor %q", ErrInvalid, s.OrderID, s.Node,
			string(s.Action), string(Confirm), string(Cancel))
	}
	for i, id := range s.PartIDs {
		if slices.Contains(s.PartIDs[:i], id) {
			return nil, fmt.Errorf("%w: settle of order %q on %s names part %q twice", ErrInvalid, s.OrderID, s.Node, id)
		}
	}
	if s.Members != nil && len(s.Members) != len(s.PartIDs) {
		return nil, fmt.Errorf("%w: settle of order %q on %s: %d members for %d parts", ErrInvalid, s.OrderID, s.Node,
			len(s.Members), len(s.PartIDs))
	}
	c := inv.settleCall(s)
	if c.err != nil {
		return nil, c.err
	}
	var r callReply
	r.v, r.err = inv.run(ctx, c.n, c.s, c.keys, c.args...)
	return inv.settleResult(s, c.n, r)
}

// settleCall is settleScript's call for s on its node, or the error that
// the node is not a member of the topology. A cancel or an abort with
// s.Members (one per part) sends them after the ids; a confirm never
// does (it writes no tombstone).
func (inv *Inventory) settleCall(s Settle) scriptCall {
	n, err := inv.r.Node(s.Node)
	if err != nil {
		return scriptCall{err: err}
	}
	members := s.Action != Confirm && len(s.Members) == len(s.PartIDs)
	keys := make([]string, 0, 1+len(s.PartIDs))
	keys = append(keys, PendingKey)
	na := 3 + len(s.PartIDs)
	if members {
		na += len(s.PartIDs)
	}
	args := make([]any, 0, na)
	args = append(args, string(s.Action), seconds(inv.cfg.Retention), s.OrderID)
	for _, id := range s.PartIDs {
		keys = append(keys, partKey(id))
		args = append(args, id)
	}
	if members {
		for _, m := range s.Members {
			args = append(args, m)
		}
	}
	return scriptCall{n: n, s: settleScript, keys: keys, args: args}
}

// partMember is part p's member of its node's pending index when the
// order record tells it (a stock part with its redo-log place:
// [PendingMember]), else "" (the script looks the part up by its id).
func partMember(p part) string {
	if p.Kind != PartStock || p.Offset <= 0 {
		return ""
	}
	q, ok := redoQueueNumber(p.Redo)
	if !ok {
		return ""
	}
	return q + ":" + strconv.FormatInt(p.Offset, 10)
}

// settleResult reads the outcome r of s's settleCall on n: one result word
// per part (a conflict logged), or the call's error.
func (inv *Inventory) settleResult(s Settle, n *node.Node, r callReply) ([]string, error) {
	if r.err != nil {
		return nil, r.err
	}
	res, err := asStrings(n, settleScript, r.v)
	if err != nil {
		return nil, err
	}
	if len(res) != len(s.PartIDs) {
		return nil, malformed(n, settleScript, r.v, fmt.Sprintf("a list of %d result words (one per part)", len(s.PartIDs)))
	}
	for i, w := range res {
		if len(w) > 9 && w[:9] == "conflict:" {
			inv.log.Error("part settle conflict", "node", n.Name(), "order", s.OrderID, "part", s.PartIDs[i],
				"action", string(s.Action), "state", w[9:])
		}
	}
	return res, nil
}
