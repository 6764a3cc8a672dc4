package inventory

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/node"
)

// ErrPrecondition is wrapped when the state of the data does not allow
// the operation asked, though its arguments are valid: [Inventory.SettleStuck]
// of a part that is not set aside, or whose order's record exists. The
// message names the part and the state, and says what to do instead.
// Nothing was changed. The service answers it failed_precondition.
var ErrPrecondition = errors.New("precondition failed")

// ErrStuckSettled is wrapped, with [ErrPrecondition], when an operator's
// settle ([Inventory.SettleStuck], [Inventory.SettleStuckLost]) meets a
// part its node's stuck index lists whose record is settled (confirmed
// or cancelled): an entry a settle left behind (every settle takes the
// part out of the stuck index in its script; a release before did so
// only for a record holding stuck_since). The part is never settled
// again; the message names the node, the part and its state, and says
// how to clear the entry. Nothing was changed.
var ErrStuckSettled = errors.New("stuck entry of a settled part")

// stuckSettledErr is the error of an operator's settle of part partID,
// listed by node nodeName's stuck index, whose record is settled as
// state.
func stuckSettledErr(nodeName, partID, state string) error {
	return fmt.Errorf("%w: %w: node %s: part %q is already settled (its state: %s) though the node's stuck index lists it "+
		"(an entry a settle left behind): it is not settled again; `shardis parts retry %s '%s'` takes the entry out "+
		"(the reconciler then drops it as settled)", ErrPrecondition, ErrStuckSettled, nodeName, partID, state, nodeName, partID)
}

// SettleStuck confirms or cancels (action: [Confirm] or [Cancel]) part
// partID set aside on node nodeName whose order's record is gone, and
// returns the part's result word as [Inventory.SettleNow] returns it
// ("done" when it settled now). It is the operator's decision for the one
// case no automatic path can decide (stuck.go): a part that meets no
// record of its order when it may have outlived it, kept reserved since.
//
// It settles only a part that is in node's stuck index AND whose order's
// record is absent at the order's home node, or is a record of another
// attempt begun at or after the part came due (its created, else its
// decided_at, at or past the part's deadline: the order id reserved again
// once the part's own record had lived out its retention; the expire op's
// 'gone' verdict, by the same rule: stuck.go). Anything else is refused
// before any write:
//
//   - an action other than Confirm or Cancel, or an empty partID: an
//     error wrapping [ErrInvalid] naming it;
//   - a node that is no node of the inventory server: [ErrInvalid]
//     wrapping router.ErrUnknownNode, naming it;
//   - a part not set aside (never, or settled or retried since): an error
//     wrapping [ErrPrecondition] naming the state its record holds;
//   - a part set aside whose record is settled (an entry a settle left
//     behind: [ErrStuckSettled]): [ErrPrecondition] and ErrStuckSettled,
//     naming the node, the part and its state;
//   - a part whose own record is gone (nothing says which order or
//     counter its units are of): [ErrPrecondition], saying so and naming
//     the way out, [Inventory.SettleStuckLost] with the route, SKU and
//     quantity the record held (`shardis parts settle --route R --sku S
//     --qty N`); one whose record cannot be read: the read's error
//     (wrapping [ErrCorrupt] for a record that cannot be decoded, naming
//     it);
//   - a part whose order's record exists (or cannot be read), of the
//     part's attempt or of another begun before the part came due: its
//     decision is the record's, and `shardis parts retry` lets the
//     reconciler settle the part by it: [ErrPrecondition] saying so (the
//     read's error for a record that cannot be read);
//   - the home node unavailable: [ErrUnavailable]. While a topology
//     change migrates, the record may still be on its previous home, or
//     on its way between the two: the check first moves it to its home
//     (homeFor, as any touch of the order does, and as the expiry does
//     before it reads the record), then reads it there; the previous
//     home unavailable, or a node this instance's configuration does not
//     name: [ErrUnavailable]. A part set aside on a node that leaves the
//     topology is the one the apply waits for (apply_leaving.go), so it
//     must be settled while the apply migrates: refused then, as it was,
//     the apply never finished, the node never left, and the part's
//     quota count stayed on it, counted against its user for good
//     (TestOperatorSettlesAStuckQuotaPartOnALeavingNode).
//
// The order id is the one the part's own record holds (as [StuckPart]
// reads it). Then it settles that one part by SettleNow; the settle's own
// refusals (a corrupt counter: [ErrCorrupt], a deleted stock hash:
// [ErrStockMissing]) come back as they are, nothing written.
//
// Why the check, then the settle, is safe: a record that is gone comes
// back only as the record of a new attempt of the order id (a Reserve
// after the retention), begun after the part came due, whose parts have
// other ids (a part id holds its attempt's token, keys.go), so it decides
// nothing about this part (nor does the reconciler read it so: stuck.go);
// and
// the settle script fences the part: it changes the part's state at most
// once, from pending, so a reconciler or another operator settling the
// part between the check and the settle makes this one answer "already"
// or "conflict:<state>" and change nothing. The check writes nothing
// but, while a topology change migrates, the record's move to its home
// (no expiry relied on).
//
// What the operator must know: nothing in the nodes tells how the order
// was decided any more, so the decision is the system of record's
// (pgsync's database, the shop's order and payment records): Confirm when
// the order was paid (its units are sold), else Cancel (its units go back
// to available). A wrong Confirm withholds units from sale; a wrong Cancel
// sells the units of a paid order again (an oversell).
func (inv *Inventory) SettleStuck(ctx context.Context, nodeName, partID string, action Action) (string, error) {
	if action != Confirm && action != Cancel {
		return "", fmt.Errorf("%w: action %q: want %q or %q", ErrInvalid, string(action), string(Confirm), string(Cancel))
	}
	if partID == "" {
		return "", fmt.Errorf("%w: part_id is empty", ErrInvalid)
	}
	n, err := inv.ownNode(nodeName)
	if err != nil {
		return "", err
	}
	ctx, _ = inv.pin(ctx) // the check and the settle at one topology
	orderID, part, err := inv.stuckGoneOrder(ctx, n, partID)
	if err != nil {
		return "", err
	}
	if err := inv.orderRecordGone(ctx, orderID, n.Name(), partID, part); err != nil {
		return "", err
	}
	res, err := inv.SettleNow(ctx, Settle{Node: n.Name(), Action: action, OrderID: orderID, PartIDs: []string{partID}})
	if err != nil {
		return "", err
	}
	inv.log.Warn("stuck part settled by an operator", "node", n.Name(), "part", partID, "order", orderID,
		"action", string(action), "result", res[0])
	return res[0], nil
}

// stuckGoneOrder reads, on n, whether part partID is set aside and its
// record, and returns the order id the record holds and the record; an
// error when the part is not set aside, its record is gone, unreadable or
// names no order (SettleStuck).
func (inv *Inventory) stuckGoneOrder(ctx context.Context, n *node.Node, partID string) (string, map[string]string, error) {
	pipe := n.Client().Pipeline()
	score := pipe.ZScore(ctx, keyStuck, partID)
	rec := ReadPart(ctx, pipe, partID)
	_, _ = pipe.Exec(ctx) // each read's own error is checked below (ReadPart's layouts)
	stuck := true
	if err := score.Err(); errors.Is(err, redis.Nil) {
		stuck = false
	} else if err != nil {
		return "", nil, nodeErr(n, err)
	}
	fields, err := rec.Fields()
	var re *ReplyError
	if err != nil && !errors.Is(err, ErrCorrupt) && !errors.As(err, &re) {
		return "", nil, nodeErr(n, err)
	}
	if !stuck {
		state := PartState(fields["state"]).String()
		if err != nil {
			state = "unknown, its record cannot be read"
		}
		return "", nil, fmt.Errorf("%w: node %s: part %q is not set aside (its state: %s): only a part set aside whose order's record "+
			"is gone is settled by an operator; a pending part settles by its order's decision", ErrPrecondition, n.Name(), partID, state)
	}
	if err != nil {
		return "", nil, fmt.Errorf("node %s: part %q: its record cannot be read, so neither its order nor its units are known: "+
			"repair it first (shardis parts stuck shows the problem): %w", n.Name(), partID, err)
	}
	if st := PartState(fields["state"]); fields["tombstone"] != "1" && (st == PartConfirmed || st == PartCancelled) {
		return "", nil, stuckSettledErr(n.Name(), partID, string(st))
	}
	if len(fields) == 0 || fields["tombstone"] == "1" {
		// a tombstone of a part set aside stands for its lost record: a
		// cancel that did not know the part's place wrote it
		// (lua/pending_index.lua, pend_lost)
		return "", nil, fmt.Errorf("%w: node %s: part %q is set aside but its record %s is gone (or a tombstone written over it): nothing on the node tells its "+
			"order, its SKU or its units; settle it with the route, SKU and quantity its record held, read from the system of "+
			"record (pgsync's row of the part, the order): shardis parts settle --route R --sku S --qty N %s '%s' confirm|cancel",
			ErrPrecondition, n.Name(), partID, partKey(partID), n.Name(), partID)
	}
	orderID := fields["order"]
	if orderID == "" {
		return "", nil, fmt.Errorf("%w: node %s: part %q: its record %s names no order", ErrCorrupt, n.Name(), partID, partKey(partID))
	}
	return orderID, fields, nil
}

// orderRecordGone returns nil when orderID's record is absent at its home
// node, or is of another attempt begun at or after part partID came due
// (afterPart: part is the part's record), read with no write but its
// move home while a topology change migrates (homeFor; no expiry relied
// on); otherwise why part partID of node nodeName is not settled by an
// operator (SettleStuck).
func (inv *Inventory) orderRecordGone(ctx context.Context, orderID, nodeName, partID string, part map[string]string) error {
	// while a topology change migrates, the record may still be on its
	// previous home, or on its way: homeFor moves it home first (as any
	// touch of the order does), so what the read below finds there is all
	// there is
	home, err := inv.homeFor(ctx, orderID)
	if err != nil {
		return err
	}
	rec := ReadOrder(ctx, home.Client(), orderID)
	fields, err := rec.Fields()
	if err != nil {
		var re *ReplyError
		if !errors.Is(err, ErrCorrupt) && !errors.As(err, &re) {
			return nodeErr(home, err)
		}
		return fmt.Errorf("node %s: part %q: the record of its order %q on its home node %s cannot be read, "+
			"so it is not known to be gone: %w", nodeName, partID, orderID, home.Name(), err)
	}
	if len(fields) > 0 && !afterPart(fields, part) {
		return fmt.Errorf("%w: node %s: part %q: the record of its order %q exists on its home node %s (status %q): "+
			"the decision is the record's, not an operator's: run `shardis parts retry %s '%s'` and the reconciler settles the part by it",
			ErrPrecondition, nodeName, partID, orderID, home.Name(), fields["status"], nodeName, partID)
	}
	return nil
}

// afterPart reports whether the order record of fields is of another
// attempt than part's (part's record) begun at or after part came due:
// its created, else its decided_at (a tombstone, a fence), at or past
// part's deadline, or neither readable (stuck.go; order.lua's expire op
// answers 'gone' by the same rule).
func afterPart(fields, part map[string]string) bool {
	if fields["token"] == part["token"] {
		return false
	}
	since := fields["created"]
	if since == "" {
		since = fields["decided_at"]
	}
	at, err := strconv.ParseInt(since, 10, 64)
	due, derr := strconv.ParseInt(part["deadline"], 10, 64)
	return err != nil || derr != nil || at >= due
}
