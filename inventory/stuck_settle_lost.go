package inventory

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// A quota part whose own record is lost. A per-user quota part q of
// order O (attempt T), of route R and SKU S, on node N (the user U's quota
// node of R when O was reserved), holds Q units in U's count C
// (quotaKey(R, S, U), a plain integer: its take added Q). Its settle by
// O's decision keeps Q in C (confirmed: U bought them, for good) or takes
// it off (cancelled). When q's record is lost while N lists q pending
// (deleted, evicted, lost with N's writes; a tombstone written over it by
// a cancel that did not know its place stands for it, pend_lost), nothing
// on N links q to C any more, and every automatic path leaves Q in C:
//
//	O cancelled:  Cancel's settle of q answers "lost", writes nothing
//	O expired:    at q's deadline the expiry lists q with its record gone
//	(or failed)   (ResolveExpired: ErrCorrupt), the reconciler sets it aside
//	O confirmed:  Confirm's settle of q answers "missing"; set aside once due
//	afterwards:   RetryDueStuck leaves q aside (its record gone), RetryStuck
//	              moves it and the next pass sets it aside again;
//	              StuckParts lists it PartMissing, without order, SKU or
//	              units; SettleStuck refuses it (its record is gone)
//
// So U's count kept Q for an order that ended unpaid: U was refused every
// order beyond the limit less Q, for good (a stricter limit, never an
// oversell). No automatic path gives Q back: q's record, the only link
// from q to C and Q, is gone, and the decision may have been a Confirm
// (its record may have expired since), after which giving Q back lets U
// buy past the limit. The way out is the operator's, by the system of
// record, as for a stock part: [Inventory.SettleStuckLost] with U
// (StuckUnits.User) and Q (the units of S the order holds on R, summed
// over its items) cancels q when O was not paid (Q off C) or confirms it
// when it was (C kept), once, by the same rule as a stock part's.
//
// StuckUnits is what the record of a part set aside on its node held when
// that record is gone (deleted, evicted, lost with the node's writes while
// the part was pending): the units the part holds, as the system of
// record knows them (pgsync's stock_movements row of a stock part, the
// shop's order). [Inventory.SettleStuckLost] takes it from the operator.
type StuckUnits struct {
	Route    string // the route (route_key) of the SKU the part holds units of
	SKU      string // the SKU (sku_id)
	Quantity int64  // the units the part holds, 1..[MaxQuantity]
	// User is the user (user_id) of a per-user quota part's order, whose
	// count the part holds Quantity units of; "" for a stock part. It is
	// given exactly when the part id is a quota part's
	// (order|token|q|Route|SKU).
	User string
}

// SettleStuckLost confirms or cancels (action: [Confirm] or [Cancel]) part
// partID set aside on node nodeName whose own record is gone, by u, the
// operator's account of what the record held, and returns "done". It is
// the way out for the one part [Inventory.SettleStuck] cannot settle:
// nothing on the node says which order, SKU or units it is of, while its
// node still lists it (set aside) and its units stay reserved (a stock
// part's: its redo entry reads as a record that cannot be read, which
// stops pgsync's queue there and the redo trim of that queue, redolog.go,
// "What a trim removes"), or counted in its user's count (a quota part's:
// see "A quota part whose own record is lost" above; u.User names the
// user).
//
// In one script on the node it checks, then writes, or writes nothing:
//
//   - the part is in the node's stuck index, else [ErrPrecondition]
//     naming the state its record holds (a retry after a lost answer
//     meets the part settled: refused, naming the state it settled to);
//   - its own record is absent (no record at its key, and no inline part
//     of a reserved order record on the node, inline.go), else
//     [ErrPrecondition]: the record's values decide, u is not used
//     (SettleStuck, or `shardis parts retry`, settles such a part); a
//     record settled (confirmed or cancelled: an entry a settle left
//     behind) also wraps [ErrStuckSettled], naming its state; one that
//     cannot be read: [ErrCorrupt];
//   - a stock part: the stock hash of u's route and SKU on the node holds
//     at least u.Quantity reserved: a missing hash is [ErrStockMissing], a
//     hash that is no hash or holds no integer [ErrCorrupt], fewer
//     reserved units [ErrInvalid] naming the quantity (the part cannot
//     hold more units than its SKU has reserved: a wrong quantity or
//     SKU);
//   - a quota part: u.User's count of u's route and SKU on the node
//     (quotaKey) holds at least u.Quantity: a key that is no integer
//     string is [ErrCorrupt], a count below u.Quantity (none: another
//     user's part, too many units, or a count a topology change moved
//     off the node) [ErrInvalid] naming the quantity and the key; and no
//     topology change migrating (read in the one view the script runs
//     at: a node bumped since refuses it for its epoch), else
//     [ErrUnavailable] and [ErrTopology], retried once `topology apply`
//     has ended: its transfer of a count no pending part holds (a lost
//     record names none, so the apply cannot wait for the part) records
//     the count on the node, adds it at the user's new quota node, then
//     takes it off the node; a settle between the two (the apply died
//     after its out and was run again later) took u.Quantity off the
//     node's count, and the rerun added what it had recorded: the new
//     node counted the units for good, the part unlisted, nothing
//     reporting it (TestSettleStuckLostOfAQuotaPartIsRefusedWhileItsCountMoves).
//     Once the apply has ended the count is on the user's new quota
//     node and the settle is refused as a count moved off the node.
//
// Then it moves u.Quantity units of the hash from reserved to confirmed
// (Confirm: the units are sold) or available (Cancel: they go back), or
// for a quota part keeps them in the user's count (Confirm: the user
// bought them) or takes them off it (Cancel: the key deleted at 0),
// writes the part's record settled (state, quantity, counter, SKU, order
// and token, the last two read from the part id, which names them, and
// its item, -1 for a quota part; settled now, living the retention),
// naming the part in the settled log, and takes the part out of the
// pending and stuck indexes: part_settle, the settle path of every part
// (lua/part_settle.lua). A stock part's redo entry then reads as settled
// with that state, so pgsync lands it and its queue moves on, and the
// trim removes it once acknowledged (a quota part has no redo entry).
//
// Refused before any call with an error wrapping [ErrInvalid] naming the
// field: an action other than Confirm or Cancel, an empty partID, an
// unknown route, an invalid SKU, a quantity outside 1..MaxQuantity; with
// no u.User, a part id that is no stock part's (order|token|item, item a
// decimal index; a quota part's id asks for user_id); with u.User, an
// invalid user id, or a part id that is no quota part of u's route and
// SKU (order|token|q|route|sku: a stock part's id is settled without a
// user); a node that is no node of the inventory server: [ErrInvalid]
// wrapping router.ErrUnknownNode.
//
// What the operator must know: nothing on the node checks u against the
// part beyond the hash's reserved count (a quota part: the user's count),
// so u and the decision are the system of record's: the SKU and quantity
// of the part's row (pgsync's stock_movements, keyed by the part id) or
// of the order's item (a quota part: the order's user, and its units of
// the SKU on the route summed over its items; it has no row); Confirm
// when the order was paid by this part's attempt (the token in the part
// id is the paid attempt's: a part of an earlier attempt of an order paid
// later was never sold, and is cancelled). A quantity too large takes units other parts
// hold out of reserved (their settle is later refused, naming the hash);
// a wrong SKU moves another SKU's units. A Cancel of a quota part of a
// paid order lets its user buy that many units past the limit; a wrong
// user whose count holds the quantity loses units another order holds
// (that order's cancel is then refused, naming the count). Not closed: a
// lost quota part whose count a topology change moved to the user's new
// quota node since (the apply's move waits for the quota parts whose
// records name the count, and a lost record names none) is refused here,
// its count below the quantity on its node: the units stay counted on the
// new node (the operator takes them off by hand there: DECRBY of the key
// the refusal names, on the user's quota node). A part settled once reads here
// as never settled when its stuck entry outlived its settled record:
// every settle takes the part out of the stuck index in its own script
// (lua/part_settle.lua), so none does now; a release before did so only
// for a record holding stuck_since (not one set aside while it was gone
// or unreadable and repaired since, nor an inline part), and the entry
// it left read, once the record expired, as a lost record's, settled
// again here (TestSettledStuckPartLeavesNoEntryToSettleTwice). So a part
// whose row in the system of record is settled already (pgsync's
// stock_movements state confirmed or cancelled) is not settled here: its
// entry is one such, to be removed by hand (ZREM inv:stuck, HDEL
// inv:stuck:why, ZREM inv:stuck:retry of the part id).
func (inv *Inventory) SettleStuckLost(ctx context.Context, nodeName, partID string, action Action, u StuckUnits) (string, error) {
	if action != Confirm && action != Cancel {
		return "", fmt.Errorf("%w: action %q: want %q or %q", ErrInvalid, string(action), string(Confirm), string(Cancel))
	}
	if partID == "" {
		return "", fmt.Errorf("%w: part_id is empty", ErrInvalid)
	}
	if u.Route == "" {
		return "", fmt.Errorf("%w: route_key is empty: the route of the SKU the part holds units of is needed", ErrInvalid)
	}
	if err := checkID("sku_id", u.SKU); err != nil {
		return "", err
	}
	if err := checkQty("quantity", u.Quantity); err != nil {
		return "", err
	}
	kind, orderID, token, item, counter, err := lostPartOf(partID, u)
	if err != nil {
		return "", err
	}
	// one view for the check and the script (pinned): a quota count moves
	// while the topology migrates (see "A quota part whose own record is
	// lost" above), so a quota part is settled only outside a migration
	ctx, tv := inv.pin(ctx)
	if _, err := inv.setIn(tv, u.Route); err != nil {
		return "", err
	}
	if kind == PartQuota && tv.migrating() {
		return "", fmt.Errorf("%w: %w: node %s: part %q: a topology change is moving quota counts (the count %s may be on its way "+
			"to the user's new quota node): settle it when `shardis topology apply` has ended", ErrUnavailable, ErrTopology,
			nodeName, partID, counter)
	}
	n, err := inv.ownNode(nodeName)
	if err != nil {
		return "", err
	}
	pk := partKey(partID)
	v, err := inv.run(ctx, n, stuckSettleLostScript, []string{keyStuck, pk, counter},
		partID, string(action), u.Quantity, seconds(inv.cfg.Retention), orderID, token, u.SKU, item, string(kind), inv.stuckLostMutation())
	if errors.Is(err, ErrInvalid) {
		return "", fmt.Errorf("quantity %d of %s: %w", u.Quantity, counter, err)
	}
	if err != nil {
		return "", err
	}
	res, err := asStrings(n, stuckSettleLostScript, v)
	if err != nil {
		return "", err
	}
	if len(res) != 2 {
		return "", malformed(n, stuckSettleLostScript, v, "a result word and a state")
	}
	switch res[0] {
	case "notstuck":
		return "", fmt.Errorf("%w: node %s: part %q is not set aside (its state: %s): only a part set aside whose own record is gone "+
			"is settled from the values given", ErrPrecondition, n.Name(), partID, partStateWord(res[1]))
	case "settled":
		return "", stuckSettledErr(n.Name(), partID, res[1])
	case "exists":
		return "", fmt.Errorf("%w: node %s: part %q: its record %s exists (state %s): it decides, not the values given; settle it "+
			"without route, SKU and quantity (shardis parts settle NODE PART_ID confirm|cancel) or retry it (shardis parts retry)",
			ErrPrecondition, n.Name(), partID, pk, partStateWord(res[1]))
	case settleDone:
	default:
		return "", malformed(n, stuckSettleLostScript, v, `"done", "notstuck", "settled" or "exists"`)
	}
	inv.log.Warn("stuck part whose record was gone settled by an operator", "node", n.Name(), "part", partID, "order", orderID,
		"action", string(action), "route", u.Route, "sku", u.SKU, "quantity", u.Quantity, "user", u.User, "counter", counter,
		"state", res[1])
	return settleDone, nil
}

// stuckLostMutation is stuckSettleLostScript's mutation argument:
// MutationStuckLostUnfenced when the injected faults re-introduce it
// (test-only, faults.go), else "".
func (inv *Inventory) stuckLostMutation() string {
	if inv.mutated(MutationStuckLostUnfenced) {
		return string(MutationStuckLostUnfenced)
	}
	return ""
}

// partStateWord is a part record's state as a script read it, "gone" for
// none.
func partStateWord(s string) string {
	if s == "" {
		return "gone"
	}
	return s
}

// lostPartOf checks partID and u for SettleStuckLost (u's route and SKU
// checked already) and returns the part's kind, the order id, token and
// item index its record is written with, and its counter: a stock part's
// (u.User empty) SKU's stock hash, a quota part's user's count.
func lostPartOf(partID string, u StuckUnits) (kind PartKind, orderID, token, item, counter string, err error) {
	if u.User == "" {
		orderID, token, item, ok := stockPartIDParts(partID)
		if !ok || strings.HasSuffix(partID, "|q|"+u.Route+"|"+u.SKU) {
			return "", "", "", "", "", fmt.Errorf("%w: part_id %q is not a stock part's id (order|token|item): only a stock "+
				"part's units are settled from the values given without a user; a quota part's (order|token|q|route|sku) "+
				"with the user_id of its order", ErrInvalid, partID)
		}
		return PartStock, orderID, token, item, stockKey(u.Route, u.SKU), nil
	}
	if err := checkID("user_id", u.User); err != nil {
		return "", "", "", "", "", err
	}
	orderID, token, ok := quotaPartIDParts(partID, u.Route, u.SKU)
	if !ok {
		return "", "", "", "", "", fmt.Errorf("%w: part_id %q is not the quota part of route %q, SKU %q (order|token|q|route|sku): "+
			"user_id is given for a quota part only", ErrInvalid, partID, u.Route, u.SKU)
	}
	return PartQuota, orderID, token, "-1", quotaKey(u.Route, u.SKU, u.User), nil
}

// quotaPartIDParts reads quotaPartID's order id and token back from id,
// the quota part of route and sku (the token split off at the last '|'
// before "|q|route|sku": an order id may hold '|', a token does not); ok
// is false when id is not of that form.
func quotaPartIDParts(id, route, sku string) (orderID, token string, ok bool) {
	head, found := strings.CutSuffix(id, "|q|"+route+"|"+sku)
	i := strings.LastIndexByte(head, '|')
	if !found || i <= 0 || i == len(head)-1 {
		return "", "", false
	}
	return head[:i], head[i+1:], true
}

// stockPartIDParts reads stockPartID's order id, token and item index
// back from id (the last two fields split off at its last two '|': an
// order id may hold '|', a token and an index do not); ok is false when
// id is not of that form.
func stockPartIDParts(id string) (orderID, token, item string, ok bool) {
	i := strings.LastIndexByte(id, '|')
	if i <= 0 {
		return "", "", "", false
	}
	item = id[i+1:]
	j := strings.LastIndexByte(id[:i], '|')
	if j <= 0 || item == "" || strings.Trim(item, "0123456789") != "" {
		return "", "", "", false
	}
	return id[:j], id[j+1 : i], item, id[j+1:i] != ""
}

// stuckSettleLostScript settles a part set aside whose own record is gone
// by the operator's values ([Inventory.SettleStuckLost]).
//
// KEYS: 1 stamp, 2 stuck index, 3 the part's key, 4 its counter (a
// stock part's stock hash, a quota part's user's count). ARGV: 4 part id,
// 5 action ("confirm" or "cancel"; any other is SHARDIS_BADOP before any
// write), 6 quantity, 7 retention seconds of settled parts, 8 order id, 9
// token, 10 SKU, 11 item index (all three of the part record written),
// 12 the part's kind ("s" stock, "q" quota; any other is SHARDIS_BADOP),
// 13 a mutation (test-only: MutationStuckLostUnfenced; "" otherwise).
//
// It returns {"done", state} once settled; {"notstuck", state} when the
// part is not in the stuck index, {"settled", state} when its record is
// there settled (confirmed or cancelled) and {"exists", state} when its
// record is there otherwise, all three writing nothing (state "" for a
// record gone). A record that
// cannot be read is SHARDIS_CORRUPT; the stock hash's refusals are
// stock_settle_check's (lua/part_settle.lua), with SHARDIS_RANGE for a
// reserved count below the quantity; a quota count that is no integer
// string is SHARDIS_CORRUPT, one below the quantity SHARDIS_RANGE.
var stuckSettleLostScript = newReleaseScript("stuck-settle-lost", luaFile("stuck_settle_lost.lua"))
