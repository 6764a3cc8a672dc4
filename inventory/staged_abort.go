package inventory

import (
	"context"

	"github.com/shardis/shardis/node"
)

// actionAbort is the settle action of a staged attempt's abort: cancel a
// pending part unless a probe holds it (staged.go, "Abort"). It is never
// deferred: a part it cannot reach follows its order's decision.
const actionAbort Action = "abort"

// settleHeld is settleScript's answer to an abort of a part a probe holds.
const settleHeld = "held"

// releaseStaged releases what a staged attempt that did not see every take
// succeed took, when its record could not be decided failed now (the
// stage's outcome is unknown, or the fail did not land): first, at once,
// it aborts the parts it took on nodes other than home (staged.go,
// "Abort"); then, off the caller's path, it tries to decide the record
// failed and cancel every promised part (failStaged), which releases the
// home node's parts too once that node answers. It decides with
// opRelease, not opFail: a stage whose caller stopped waiting may still be
// on its way, behind this decision (its group under way on one
// connection, the decision on another), and where the order has no
// record the release writes the failure under the attempt's token, which
// that stage then meets and writes nothing. (A fail wrote nothing there:
// the stage left a staging record whose takes, taken off their queues,
// never came, and a retry of the order id waited out the attempt lease
// before it could decide it.) Whatever it cannot do is
// left to the next reader of the order, or to the reconciler through a
// part the attempt took (it follows pending parts, not records): a record
// none of whose parts was taken, its home unreachable for that one try,
// stays staging, holding no stock, until a retry of the order id, a
// Confirm, a Cancel or a topology change's migration decides it, or its
// retention ends.
func (inv *Inventory) releaseStaged(ctx context.Context, home *node.Node, orderID, token string, taken, promised []part) {
	var away []part
	for _, p := range taken {
		if p.Node != home.Name() {
			away = append(away, p)
		}
	}
	inv.abortParts(ctx, orderID, away)
	inv.offPath(ctx, func(ctx context.Context) {
		if err := inv.failStaged(ctx, home, opRelease, orderID, token, promised); err != nil {
			inv.log.Debug("staged attempt not decided; the next reader of the order decides it", "order", orderID, "err", err)
		}
	})
}

// abortParts aborts parts of a staged attempt, one script per node, nodes
// concurrently, within commitTimeout whatever the caller's context. It
// returns how many parts are left pending (held by a probe, their record
// lost while their node lists them, or their node did not answer): those
// follow their order's decision.
func (inv *Inventory) abortParts(ctx context.Context, orderID string, parts []part) (left int) {
	if len(parts) == 0 {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancel()
	for _, r := range inv.settleRound(ctx, orderID, actionAbort, parts) {
		if r.err != nil {
			inv.log.Warn("staged abort did not land; the parts follow the order's decision", "node", r.s.Node, "order", orderID, "parts", len(r.s.PartIDs), "err", r.err)
			left += len(r.s.PartIDs)
			continue
		}
		for _, w := range r.res {
			// held, or lost (its record gone while the node lists it:
			// set aside once due)
			if w == settleHeld || w == settleLost {
				left++
			}
		}
	}
	inv.stats.rolledBack.Add(int64(len(parts) - left))
	return left
}

// offPath runs f off the caller's path with a context bounded by
// commitTimeout: the caller's cancellation and deadline are not carried
// over, its values are (the fault seam, faults.go, attributes the work to
// the caller's actor); synchronously once Close was called.
func (inv *Inventory) offPath(ctx context.Context, f func(ctx context.Context)) {
	run := func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
		defer cancel()
		f(ctx)
	}
	inv.bg.Lock()
	if inv.bg.closed {
		inv.bg.Unlock()
		run()
		return
	}
	inv.bg.wg.Add(1)
	inv.bg.Unlock()
	go func() {
		defer inv.bg.wg.Done()
		run()
	}()
}
