package inventory

import "fmt"

// The order and part state machines, in one place: the words the scripts
// store in an order record's `status` field and a part record's `state`
// field, and which write may follow which. The scripts (scripts.go,
// local.go, staged.go) write these words; state_test.go reads every
// script's source and fails on a status or state word written that is not
// one of them.
//
// States of an order record on its home node (orderScript, localScript,
// stageTakeScript):
//
//	missing ──begin──▶ reserving ──commit──▶ reserved ──confirm──▶ confirmed
//	   │                 │  ▲ └──fail / lease out──▶ failed   └──cancel / expire / confirm past deadline──▶ cancelled
//	   │                 │  └─ begin after the lease ran out (take over, new token)
//	   │                 └──cancel──▶ cancelled
//	   ├──stage(T)──▶ staging ──commit──▶ reserved
//	   │                 ├──fail──────▶ failed
//	   │                 └──withdraw (its own token; nothing of the attempt on any node, soldout.go)──▶ missing
//	   ├──local (one script, local.go)──▶ reserved
//	   ├──cancel──▶ cancelled (a tombstone: a later Reserve of the id is refused)
//	   ├──expire (a due part's attempt left no record)──▶ failed
//	   └──fence (a refusal after reads, soldout.go)──▶ failed
//	failed ──begin──▶ reserving;  failed ──local──▶ reserved;  failed ──cancel──▶ cancelled
//
// A begin that replaces a failed record hands its parts back to be
// cancelled and keeps them in its reserving record until its commit (so a
// failed or reserving record may list another attempt's parts), and the
// local script replaces only a failed record that lists none (staged.go,
// "Replacing a failed record").
//
// confirmed and cancelled are final. Withdraw is the one write that makes
// a record missing: the attempt that staged it deletes it when its round
// took nothing anywhere (soldout.go, "Withdraw"). Otherwise a record's end
// is not a transition of the machine: every record expires after
// inventory.retention, and a topology change marks a record moved, after
// which it is read as missing where it was and installed verbatim (its
// status unchanged) on its new home (migrate.go). A staging record is
// decided (commit or fail) or withdrawn before anything else is done to
// it (staged.go).
//
// States of a part record on its node (reserveScript, localScript,
// stageTakeScript, settleScript, probeScript):
//
//	missing ──take──▶ pending ──confirm──▶ confirmed
//	   │                 └──cancel / abort / expiry──▶ cancelled
//	   └──cancel / abort / prevent──▶ cancelled (a tombstone: a take of it is refused)
//
// confirmed and cancelled are final (each part is settled at most once:
// the settle script compare-and-sets pending). "held" (a probe saw it,
// staged.go), "tombstone" and being set aside (stuck.go) are flags or
// indexes beside the state, not states.

// OrderState is the status of an order record, as its `status` field
// stores it. The zero value, [OrderMissing], is no record. (What Confirm
// and Cancel answer is the coarser [OrderStatus]; the RPC API's enum is
// that one.)
type OrderState string

// The order record's states (see the file comment for the diagram).
const (
	// OrderMissing is no record: never written, expired after
	// inventory.retention, or moved away by a topology change. It is never
	// stored; String gives "missing", the order script's word for it.
	OrderMissing OrderState = ""
	// OrderReserving: a general-path attempt holds the record under its
	// token until its lease runs out.
	OrderReserving OrderState = "reserving"
	// OrderStaging: a one-round attempt staged the record with its
	// promised parts; it is decided before anything else (staged.go).
	OrderStaging OrderState = "staging"
	// OrderReserved: the order's parts hold its stock until its deadline.
	OrderReserved OrderState = "reserved"
	// OrderConfirmed: sold (final).
	OrderConfirmed OrderState = "confirmed"
	// OrderCancelled: cancelled, expired or a tombstone (the record's
	// reason says which); final.
	OrderCancelled OrderState = "cancelled"
	// OrderFailed: the attempt under the record's token took nothing for
	// good; a new attempt may take the record over.
	OrderFailed OrderState = "failed"
)

// orderStates are the states a record stores, in the diagram's order.
var orderStates = []OrderState{OrderReserving, OrderStaging, OrderReserved, OrderConfirmed, OrderCancelled, OrderFailed}

// orderMoves is the order record's transition table: from → the states a
// script may write over it (the file comment's diagram, edge for edge).
var orderMoves = map[OrderState][]OrderState{
	OrderMissing:   {OrderReserving, OrderStaging, OrderReserved, OrderCancelled, OrderFailed},
	OrderReserving: {OrderReserving, OrderReserved, OrderFailed, OrderCancelled},
	OrderStaging:   {OrderReserved, OrderFailed, OrderMissing},
	OrderReserved:  {OrderConfirmed, OrderCancelled},
	OrderFailed:    {OrderReserving, OrderReserved, OrderCancelled},
}

// String returns the stored word ("reserving" …), "missing" for
// OrderMissing, and OrderState("x") quoted for a word that is no state.
func (s OrderState) String() string {
	if s == OrderMissing {
		return "missing"
	}
	if !s.stored() {
		return fmt.Sprintf("OrderState(%q)", string(s))
	}
	return string(s)
}

// stored reports whether s is a word an order record stores.
func (s OrderState) stored() bool {
	for _, t := range orderStates {
		if s == t {
			return true
		}
	}
	return false
}

// ParseOrderState returns the state an order record's `status` field
// holds. Anything but a stored word (the empty string included: a record
// always has a status) is refused with an error wrapping [ErrCorrupt] that
// quotes it.
func ParseOrderState(status string) (OrderState, error) {
	if s := OrderState(status); s.stored() {
		return s, nil
	}
	return OrderMissing, fmt.Errorf("%w: order status %q is not one of reserving, staging, reserved, confirmed, cancelled, failed", ErrCorrupt, status)
}

// CanMoveTo reports whether a script may write state t over a record in
// state s (t == s only for a take-over of a reserving record). Final
// states move nowhere; the one write that makes a record missing is a
// staging record's withdraw (any other end is not a transition, see the
// file comment).
func (s OrderState) CanMoveTo(t OrderState) bool {
	for _, to := range orderMoves[s] {
		if to == t {
			return true
		}
	}
	return false
}

// DecisionReason is why an order record was decided: the word order.lua
// writes in the record's `reason` field with a final or failed status, and
// the reason [Outcome] and [OrderRecord] carry. A record not decided yet
// has none (""). state_test.go reads the scripts' sources and fails on a
// reason written that is not one of these.
type DecisionReason string

// The reasons a decided record gives.
const (
	// ReasonConfirmed: a Confirm before the deadline (status confirmed).
	ReasonConfirmed DecisionReason = "confirmed"
	// ReasonCancelled: a Cancel of a reserved order (status cancelled).
	ReasonCancelled DecisionReason = "cancelled"
	// ReasonExpired: the order ran past its deadline undecided, and a
	// Confirm after the deadline or the reconciler's expiry decided it
	// (status cancelled; a Cancel of a reserved record writes
	// ReasonCancelled, deadline or not).
	ReasonExpired DecisionReason = "expired"
	// ReasonTombstone: a Cancel of an order never reserved (no record, or
	// an attempt that failed or had not committed; status cancelled): a
	// later Reserve of the id is refused.
	ReasonTombstone DecisionReason = "tombstone"
	// ReasonRefused: a refusal by reads alone fenced an id with no record
	// (soldout.go; status failed).
	ReasonRefused DecisionReason = "refused"
	// ReasonNoRecord: an attempt whose begin or stage never landed was
	// released, or one of its parts came due (status failed).
	ReasonNoRecord DecisionReason = "no record"
)

// decisionReasons are the reasons the scripts write.
var decisionReasons = []DecisionReason{ReasonConfirmed, ReasonCancelled, ReasonExpired, ReasonTombstone, ReasonRefused, ReasonNoRecord}

// PartState is the state of a part record, as its `state` field stores
// it. The zero value, [PartMissing], is no record. A part moves from
// pending to confirmed or cancelled at most once.
type PartState string

// PartStatus is the former name of [PartState].
//
// Deprecated: use PartState.
type PartStatus = PartState

// The part record's states (see the file comment for the diagram).
const (
	// PartMissing is no record: never taken (nor tombstoned), or expired
	// after inventory.retention. It is never stored; String gives
	// "missing".
	PartMissing PartState = ""
	// PartPending holds its units until the part is settled.
	PartPending PartState = "pending"
	// PartConfirmed sold its units (final).
	PartConfirmed PartState = "confirmed"
	// PartCancelled returned its units (or, as a tombstone, took none;
	// final).
	PartCancelled PartState = "cancelled"
	// PartUnreadable is what a read reports ([PartSnapshot].State) of a
	// part whose record is on its node but cannot be read, or is gone
	// while the node lists the part pending or set aside (its record lost
	// while it was pending: [Inventory.PartStatesAt]). It is no state
	// a record stores (never written, never moved to or from) and not
	// PartMissing: a consumer leaves what it knows of the part as it is
	// until the record is repaired.
	PartUnreadable PartState = "unreadable"
)

// partStates are the states a part record stores.
var partStates = []PartState{PartPending, PartConfirmed, PartCancelled}

// partMoves is the part record's transition table (the file comment).
var partMoves = map[PartState][]PartState{
	PartMissing: {PartPending, PartCancelled},
	PartPending: {PartConfirmed, PartCancelled},
}

// String returns the stored word ("pending" …), "missing" for
// PartMissing, "unreadable" for [PartUnreadable], and PartState("x")
// quoted for a word that is no state.
func (s PartState) String() string {
	if s == PartMissing {
		return "missing"
	}
	if !s.stored() && s != PartUnreadable {
		return fmt.Sprintf("PartState(%q)", string(s))
	}
	return string(s)
}

// stored reports whether s is a word a part record stores.
func (s PartState) stored() bool {
	for _, t := range partStates {
		if s == t {
			return true
		}
	}
	return false
}

// ParsePartState returns the state a part record's `state` field holds.
// Anything but a stored word (the empty string included) is refused with
// an error wrapping [ErrCorrupt] that quotes it.
func ParsePartState(state string) (PartState, error) {
	if s := PartState(state); s.stored() {
		return s, nil
	}
	return PartMissing, fmt.Errorf("%w: part state %q is not one of pending, confirmed, cancelled", ErrCorrupt, state)
}

// CanMoveTo reports whether a script may write state t over a part in
// state s. Final states move nowhere, nor does a state to itself.
func (s PartState) CanMoveTo(t PartState) bool {
	for _, to := range partMoves[s] {
		if to == t {
			return true
		}
	}
	return false
}
