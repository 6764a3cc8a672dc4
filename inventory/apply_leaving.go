package inventory

import (
	"context"
	"fmt"

	"github.com/shardis/shardis/topology"
)

// A part set aside on a leaving node. No instance of the new topology
// reconciles a node that leaves the topology, so the apply settles its
// due pending parts itself (settleLeaving, each pass of MoveCounters),
// and does what the reconciler's expiry does (rollback/pass.go) with a
// part it cannot settle until someone repairs data or decides by the
// system of record ([Unsettleable]: its own record gone, a tombstone
// written over it, or unreadable; its order's record gone past its
// retention; its counter corrupt or deleted): it sets the part aside on
// that node ([Inventory.SetAside]: it leaves the pending index for the
// stuck index, its units still reserved, nothing settled), and, before
// each pass over the node, moves back the parts set aside there whose
// backoff ran out ([Inventory.RetryDueStuck]: a part whose own record is
// lost stays set aside). A part set aside counts as waiting (leftPending)
// like a pending one: the node's stock cannot move while units are
// reserved on it, and a node that left with a part would strand its
// units for good, so the apply returns still migrating and names each
// such part in its report ([topology.Moved.SetAside]) with the reason.
// The operator settles it through an instance whose configuration names
// the node (the apply's --from configuration), as any part set aside:
// `shardis parts settle --route R --sku S --qty N NODE PART_ID
// confirm|cancel` for a part whose own record is gone
// ([Inventory.SettleStuckLost]), `shardis parts settle NODE PART_ID
// confirm|cancel` for one whose order's record is gone
// ([Inventory.SettleStuck]), or repairs its data and retries it
// (`shardis parts retry`); then runs the apply again, which moves the
// node's stock and finishes. Every settle is the part's one settle
// (fenced by its state), so the apply and the operator never settle it
// twice. Before, settleLeaving returned the part's error on every pass:
// the apply failed each time and nothing set the part aside, so
// SettleStuckLost refused it, and the apply could not finish without
// editing the node by hand.

// leavingBatch is how many parts of a leaving node one pass looks at.
const leavingBatch = 500

// settleLeaving settles the due pending parts of leaving nodes (no
// instance of the new topology reconciles them), sets aside those that
// cannot be settled, and lists the parts set aside there in a.moved.
func (a *migrator) settleLeaving(ctx context.Context) error {
	first, most := StuckBackoffWithin(DefaultStuckRetry, DefaultStuckRetryMax, a.inv.cfg.Retention)
	for _, name := range a.c.Left {
		n, err := a.node(name)
		if err != nil {
			return err
		}
		if _, err := a.inv.stuckRetryOn(ctx, n, "due", leavingBatch, ms(most)); err != nil {
			return fmt.Errorf("retrying the parts set aside on leaving node %s: %w", name, err)
		}
		due, err := a.inv.DueParts(ctx, n, leavingBatch)
		if err != nil {
			return err
		}
		for _, p := range due {
			res, err := a.inv.ResolveExpired(ctx, p)
			if Unsettleable(err) {
				tries, aerr := a.inv.setAsideOn(ctx, n, p, err.Error(), first, most)
				if aerr != nil {
					return fmt.Errorf("setting aside part %s on leaving node %s (%v): %w", p.PartID, name, err, aerr)
				}
				if tries == 1 {
					a.log.Error("topology: part on a leaving node set aside: it cannot be settled until an operator settles it or repairs its data; the node leaves once it is settled",
						"node", name, "part", p.PartID, "order", p.OrderID, "reason", err)
				}
				continue
			}
			if err != nil {
				return fmt.Errorf("settling part %s on leaving node %s: %w", p.PartID, name, err)
			}
			if res == Confirmed || res == Cancelled {
				a.moved.PartsSettled++
			}
		}
		stuck, err := stuckPartsOn(ctx, n, leavingBatch)
		if err != nil {
			return fmt.Errorf("listing the parts set aside on leaving node %s: %w", name, err)
		}
		for _, sp := range stuck {
			a.moved.SetAside = append(a.moved.SetAside, topology.SetAsidePart{Node: name, PartID: sp.PartID, OrderID: sp.OrderID, Reason: sp.Reason})
		}
	}
	return nil
}
