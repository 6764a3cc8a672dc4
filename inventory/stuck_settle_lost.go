package inventory

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// StuckUnits is what the record of a part set aside on its node held when
// that record is gone (deleted, evicted, lost with the node's writes while
// the part was pending): the units the part holds, as the system of
// record knows them (pgsync's stock_movements row of the part, the shop's
// order). [Inventory.SettleStuckLost] takes it from the operator.
type StuckUnits struct {
	Route    string // the route (route_key) of the SKU the part holds units of
	SKU      string // the SKU (sku_id)
	Quantity int64  // the units the part holds, 1..[MaxQuantity]
}

// SettleStuckLost confirms or cancels (action: [Confirm] or [Cancel]) part
// partID set aside on node nodeName whose own record is gone, by u, the
// operator's account of what the record held, and returns "done". It is
// the way out for the one part [Inventory.SettleStuck] cannot settle:
// nothing on the node says which order, SKU or units it is of, while its
// node still lists it (set aside) and its units stay reserved; its redo
// entry reads as a record that cannot be read, which stops pgsync's queue
// there and the redo trim of that queue (redolog.go, "What a trim
// removes").
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
//   - the stock hash of u's route and SKU on the node holds at least
//     u.Quantity reserved: a missing hash is [ErrStockMissing], a hash
//     that is no hash or holds no integer [ErrCorrupt], fewer reserved
//     units [ErrInvalid] naming the quantity (the part cannot hold more
//     units than its SKU has reserved: a wrong quantity or SKU).
//
// Then it moves u.Quantity units of the hash from reserved to confirmed
// (Confirm: the units are sold) or available (Cancel: they go back),
// writes the part's record settled (state, quantity, counter, SKU, order
// and token, the last two read from the part id, which names them;
// settled now, living the retention), naming the part in the settled log,
// and takes the part out of the pending and stuck indexes: part_settle,
// the settle path of every part (lua/part_settle.lua). The redo entry then
// reads as settled with that state, so pgsync lands it and its queue
// moves on, and the trim removes it once acknowledged.
//
// Refused before any call with an error wrapping [ErrInvalid] naming the
// field: an action other than Confirm or Cancel, an empty partID, a part
// id that is no stock part's (order|token|item, item a decimal index: a
// quota part holds no stock units), an unknown route, an invalid SKU, a
// quantity outside 1..MaxQuantity; a node that is no node of the
// inventory server: [ErrInvalid] wrapping router.ErrUnknownNode.
//
// What the operator must know: nothing on the node checks u against the
// part beyond the hash's reserved count, so u and the decision are the
// system of record's: the SKU and quantity of the part's row (pgsync's
// stock_movements, keyed by the part id) or of the order's item; Confirm
// when the order was paid. A quantity too large takes units other parts
// hold out of reserved (their settle is later refused, naming the hash);
// a wrong SKU moves another SKU's units. A part settled once reads here
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
	orderID, token, item, ok := stockPartIDParts(partID)
	if !ok || strings.HasSuffix(partID, "|q|"+u.Route+"|"+u.SKU) {
		return "", fmt.Errorf("%w: part_id %q is not a stock part's id (order|token|item): only a stock part's units are settled "+
			"from the values given", ErrInvalid, partID)
	}
	if _, err := inv.set(ctx, u.Route); err != nil {
		return "", err
	}
	n, err := inv.ownNode(nodeName)
	if err != nil {
		return "", err
	}
	pk, counter := partKey(partID), stockKey(u.Route, u.SKU)
	v, err := inv.run(ctx, n, stuckSettleLostScript, []string{keyStuck, pk, counter},
		partID, string(action), u.Quantity, seconds(inv.cfg.Retention), orderID, token, u.SKU, item)
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
		"action", string(action), "route", u.Route, "sku", u.SKU, "quantity", u.Quantity, "state", res[1])
	return settleDone, nil
}

// partStateWord is a part record's state as a script read it, "gone" for
// none.
func partStateWord(s string) string {
	if s == "" {
		return "gone"
	}
	return s
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
// KEYS: 1 stamp, 2 stuck index, 3 the part's key, 4 the stock hash.
// ARGV: 4 part id, 5 action ("confirm" or "cancel"; any other is
// SHARDIS_BADOP before any write), 6 quantity, 7 retention seconds of
// settled parts, 8 order id, 9 token, 10 SKU, 11 item index (all three
// of the part record written).
//
// It returns {"done", state} once settled; {"notstuck", state} when the
// part is not in the stuck index, {"settled", state} when its record is
// there settled (confirmed or cancelled) and {"exists", state} when its
// record is there otherwise, all three writing nothing (state "" for a
// record gone). A record that
// cannot be read is SHARDIS_CORRUPT; the stock hash's refusals are
// stock_settle_check's (lua/part_settle.lua), with SHARDIS_RANGE for a
// reserved count below the quantity.
var stuckSettleLostScript = newReleaseScript("stuck-settle-lost", luaFile("stuck_settle_lost.lua"))
