package inventory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
)

// The order record's steps, one script call each on the order's home
// (orderOp: begin, commit, abandon, decide, release; lua/order.lua), the
// settle rounds that follow a decision to the parts (settleParts,
// settleRound, defer_ to the rollback queue), resolving a staged record
// whose attempt is over (resolveStaged, probeStaged) and releasing what a
// failed one-round attempt took (releaseStaged, failStaged), and the
// general reserve path built of them: begin, the takes (take.go), commit
// or abandon. The states these steps move between are protocol.go's.

// actionAbort is the settle action of a staged attempt's abort: cancel a
// pending part unless a probe holds it (staged.go, "Abort"). It is never
// deferred: a part it cannot reach follows its order's decision.
const actionAbort Action = "abort"

// settleHeld is settleScript's answer to an abort of a part a probe holds.
const settleHeld = "held"

// orderOp runs one step of the order state machine on the home node.
func (inv *Inventory) orderOp(ctx context.Context, home *node.Node, orderID string, op orderOp, token string, args ...any) (orderRecord, error) {
	argv := append([]any{string(op), token}, args...)
	script := orderDecideScript // runs on a node out of memory too (oom.go)
	if op == opBegin || op == opFence {
		script = orderScript // a new record: refused on a full node
	} else if inv.mutated(MutationInlineUnwritten) {
		script = orderDecideInlineUnwrittenScript // test-only (faults.go)
	}
	v, err := inv.run(ctx, home, script, []string{orderKey(orderID)}, argv...)
	if err != nil {
		return orderRecord{}, err
	}
	// {status, token, deadline ms, parts blob, reason, wait ms, settled}
	r := newReplyReader(home.Name(), script.name)
	raw := r.list(v, 7)
	if r.err != nil {
		return orderRecord{}, r.err
	}
	status, token, dl, blob, reason, wait := r.oneOf(raw, 0, recStatuses), r.str(raw, 1), r.int(raw, 2), r.str(raw, 3), r.str(raw, 4), r.int(raw, 5)
	rec := orderRecord{home: home.Name(), settledNow: r.str(raw, 6)}
	if r.err != nil {
		return orderRecord{}, r.err
	}
	rec.status, rec.token, rec.reason = recStatus(status), token, DecisionReason(reason)
	rec.deadline = time.UnixMilli(dl)
	rec.wait = time.Duration(wait) * time.Millisecond
	if blob != "" {
		if rec.parts, err = unmarshalOrderParts(orderID, blob); err != nil && rec.status == recBegun {
			// the parts of the failed record the begin replaced (its
			// attempt's, settleReplaced): the begin stands, those parts
			// are left to come due
			inv.log.Error("replaced failed record held unreadable parts; they are left to come due", "node", home.Name(), "order", orderID, "err", err)
			rec.parts = nil
		} else if err != nil {
			// the script ran: a decision it made stands (status)
			return orderRecord{}, fmt.Errorf("node %s: order %q (status %s) holds unreadable parts: %w", home.Name(), orderID, status, err)
		}
	}
	return rec, nil
}

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
	ctx, cancel := detached(ctx)
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

// settleRound settles parts of an order by action, one settle script per
// node, all at once (sendRound), and returns each node's settle with its
// outcome, in the order the parts name their nodes first. A node that is
// not a member of the topology gets no call: its error wraps
// router.ErrUnknownNode.
func (inv *Inventory) settleRound(ctx context.Context, orderID string, action Action, parts []part) []nodeSettled {
	// grouped straight into the settles' id lists, not by byNode (every
	// Confirm and Cancel of an order with parts on other nodes comes here:
	// byNode's index lists cost it 5 allocations more)
	out := make([]nodeSettled, 0, min(len(parts), 4))
	for _, p := range parts {
		k := slices.IndexFunc(out, func(r nodeSettled) bool { return r.s.Node == p.Node })
		if k < 0 {
			out = append(out, nodeSettled{s: Settle{Node: p.Node, Action: action, OrderID: orderID}})
			k = len(out) - 1
		}
		out[k].s.PartIDs = append(out[k].s.PartIDs, p.ID)
		if action != Confirm {
			// only a cancel or an abort writes a tombstone, which a part
			// its node lists by this member must not get (settle.lua);
			// a confirm's call stays as it was
			out[k].s.Members = append(out[k].s.Members, partMember(p))
		}
	}
	var callArr [4]scriptCall // an order of up to 4 nodes: no allocation
	var replyArr [4]callReply
	calls := callArr[:0]
	for _, r := range out {
		calls = append(calls, inv.settleCall(r.s))
	}
	for i, r := range inv.sendRound(ctx, calls, replyArr[:0]) {
		out[i].res, out[i].err = inv.settleResult(out[i].s, calls[i].n, r)
	}
	return out
}

// offPath runs f off the caller's path with a context bounded by
// commitTimeout: the caller's cancellation and deadline are not carried
// over, its values are (the fault seam, faults.go, attributes the work to
// the caller's actor); synchronously once Close was called.
func (inv *Inventory) offPath(ctx context.Context, f func(ctx context.Context)) {
	run := func() {
		ctx, cancel := detached(ctx)
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

// failStaged records the failure of a staged attempt (op: opFail, or
// opRelease from the attempt that does not know whether its stage landed:
// where the order has no record, the failure is written under token, so
// a stage that lands later meets it and writes nothing), then cancels its
// parts (tombstones for absent ones). If the record was decided otherwise
// first (a recovery committed it), nothing is cancelled.
func (inv *Inventory) failStaged(ctx context.Context, home *node.Node, op orderOp, orderID, token string, parts []part) error {
	rec, err := inv.orderOp(ctx, home, orderID, op, token, seconds(inv.cfg.Retention))
	if err != nil {
		return err
	}
	if rec.status != recFailed || rec.token != token {
		return nil // decided otherwise first: follow the record
	}
	if pending, _ := inv.settleParts(ctx, orderID, Cancel, parts); pending > 0 {
		inv.log.Warn("staged reserve rollback deferred", "order", orderID, "pending_parts", pending)
	}
	return nil
}

// settleParts settles parts, one script per node, nodes concurrently. Parts
// whose node cannot be reached go to the Deferrer. It returns how many
// parts were not settled now (those, and the parts a cancel found lost:
// their record gone while their node lists them, left to be set aside
// once due), and the parts a confirm found missing on their node
// ("node/part"): a part of a decided order that does not exist is data
// its node lost.
func (inv *Inventory) settleParts(ctx context.Context, orderID string, action Action, parts []part) (pending int, missing []string) {
	for _, r := range inv.settleRound(ctx, orderID, action, parts) {
		switch {
		case errors.Is(r.err, router.ErrUnknownNode):
			// The node left the topology: `shardis topology apply`
			// settles its parts by their orders' decisions after their
			// deadlines (apply_migrate.go).
			pending += len(r.s.PartIDs)
		case r.err != nil:
			inv.log.Warn("settle deferred", "node", r.s.Node, "order", orderID, "action", string(action), "parts", len(r.s.PartIDs), "err", r.err)
			inv.defer_(r.s)
			pending += len(r.s.PartIDs)
		default:
			for i, w := range r.res {
				switch w {
				case settleMissing:
					missing = append(missing, r.s.Node+"/"+r.s.PartIDs[i])
				case settleLost:
					// not deferred: a settle answers so until the record
					// is repaired; the expiry sets the part aside once due
					pending++
					inv.log.Error("part's record is gone while its node lists it: not settled, its units stay reserved; "+
						"set aside once due, then settled by its order's decision once repaired, or by an operator "+
						"(shardis parts settle --route --sku --qty)", "node", r.s.Node, "order", orderID,
						"part", r.s.PartIDs[i], "action", string(action))
				}
			}
		}
	}
	sort.Strings(missing)
	return pending, missing
}

func (inv *Inventory) defer_(s Settle) {
	if inv.opts.Deferrer != nil && len(s.PartIDs) > 0 {
		inv.stats.deferred.Add(int64(len(s.PartIDs)))
		inv.opts.Deferrer.Enqueue(s)
	}
}

// reserveGeneral is the general path: begin on the home node, the reserve
// rounds (take.go), commit. settled is a one-round attempt of this call
// whose parts it cancelled already ("" for none; settleReplaced).
func (inv *Inventory) reserveGeneral(ctx context.Context, home *node.Node, orderID string, items []Item, userID string, ttl time.Duration, settled string) (Reservation, error) {
	token := newToken()
	rec, err := inv.begin(ctx, home, orderID, token, digestOf(items, userID), userID, ttl)
	if err != nil {
		if outcomeUnknown(err) {
			inv.releaseLease(ctx, home, orderID, token)
		}
		return Reservation{}, err
	}
	if rec.status != recBegun {
		return inv.existing(orderID, rec)
	}
	inv.settleReplaced(ctx, orderID, token, settled, rec.parts)

	parts, unknown, err := inv.take(ctx, home, orderID, token, partDue{at: rec.deadline.Add(partGrace)}, items, userID)
	if err != nil {
		inv.abandon(ctx, home, orderID, token, parts, unknown)
		return Reservation{}, err
	}
	if err := ctx.Err(); err != nil {
		// The caller gave up before the commit: undo now rather than hold
		// the stock until the attempt's lease runs out.
		inv.abandon(ctx, home, orderID, token, parts, nil)
		return Reservation{}, fmt.Errorf("order %q: %w", orderID, err)
	}
	blob := encodeOrderParts(orderID, token, parts)
	// The commit runs to completion even if the caller cancels now, so its
	// outcome is known whenever the node answers.
	cctx, cancel := detached(ctx)
	defer cancel()
	rec, err = inv.orderOp(cctx, home, orderID, opCommit, token, blob, seconds(inv.cfg.Retention))
	if err != nil {
		if !outcomeUnknown(err) {
			// Refused before the network, or answered with an error reply
			// (OOM …): the commit did not apply. Return the parts now
			// rather than hold them until their deadline.
			inv.abandon(ctx, home, orderID, token, parts, nil)
			return Reservation{}, fmt.Errorf("order %q: commit refused: %w", orderID, err)
		}
		// Unknown outcome: committed or not, the parts are safe. A retry
		// returns the receipts if it committed; otherwise the lease runs
		// out and the reconciler cancels the parts after their deadline.
		return Reservation{}, fmt.Errorf("%w: order %q: commit outcome unknown, retry Reserve with the same order id: %w",
			ErrUnavailable, orderID, err)
	}
	if rec.status != recReserved {
		inv.abandon(ctx, home, orderID, token, parts, nil)
		if rec.reason == ReasonCancelled {
			return Reservation{}, fmt.Errorf("%w: order %q was cancelled while it was being reserved", ErrCancelled, orderID)
		}
		return Reservation{}, fmt.Errorf("%w: order %q: the attempt lost its lease (order is %s); retry", ErrUnavailable, orderID, rec.reason)
	}
	return Reservation{OrderID: orderID, Receipts: receipts(parts), Deadline: rec.deadline}, nil
}

// begin opens an attempt on the order record, waiting while another
// attempt holds it. A staged record (staged.go) is decided first: while
// its attempt's lease runs only by finding every part, after it by
// preventing the missing ones. A begin that replaces a failed record, or
// a reserving one whose lease ran out, answers with that record's parts
// (recBegun's parts: another attempt's, for the caller to cancel,
// settleReplaced; kept in the new record until its commit), none for one
// that lists none.
func (inv *Inventory) begin(ctx context.Context, home *node.Node, orderID, token, digest, userID string, ttl time.Duration) (orderRecord, error) {
	for {
		rec, err := inv.orderOp(ctx, home, orderID, opBegin, token,
			ms(inv.opts.AttemptLease), digest, userID, ms(ttl), seconds(inv.cfg.Retention))
		if err == nil && rec.status == recStaging {
			err = inv.resolveStaged(ctx, home, orderID, rec, rec.wait == 0)
			if err == nil {
				continue
			}
			if !errors.Is(err, errStagedInFlight) {
				return rec, err
			}
		} else if err != nil || rec.status != recReserving {
			return rec, err
		}
		wait := min(rec.wait, 20*time.Millisecond) + time.Millisecond
		select {
		case <-ctx.Done():
			return rec, fmt.Errorf("%w: order %q: another attempt is still reserving it: %w", ErrUnavailable, orderID, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// resolveStaged decides a staging record (see staged.go's file comment); the
// caller then repeats its own step on the decided record. prevent is false only while the
// attempt's lease may still run and the caller must not cut it short;
// then an absent part gives errStagedInFlight.
//
// Once the probe has a verdict, the decision and the cancels after a
// failure run to completion whatever the caller's context, within
// commitTimeout (as a commit does): a failure that landed while its
// caller gave up, its cancels never sent nor deferred, left the parts
// reserved until they came due, the attempt's ttl after its stage
// (TestStagedFailDecidedUnderACutCallerReturnsTheParts). Cancels that
// still do not land (this process dies, the home answers too late) are
// sent again by whoever next reads the failed record and answers by it:
// a retry's begin that replaces it (settleReplaced), a Confirm, a Cancel
// (staged.go, "Replacing a failed record").
func (inv *Inventory) resolveStaged(ctx context.Context, home *node.Node, orderID string, rec orderRecord, prevent bool) error {
	verdict, parts, err := inv.probeStaged(ctx, orderID, rec, prevent)
	if err != nil {
		return err
	}
	if verdict == verdictInFlight {
		return fmt.Errorf("%w: order %q: %w", ErrInProgress, orderID, errStagedInFlight)
	}
	ctx, cancel := detached(ctx)
	defer cancel()
	switch verdict {
	case verdictReserved:
		blob := encodeOrderParts(orderID, rec.token, parts)
		got, err := inv.orderOp(ctx, home, orderID, opCommit, rec.token, blob, seconds(inv.cfg.Retention))
		if err == nil && got.status == recReserved {
			inv.stats.stagedRecovered.Add(1)
		}
		return err
	}
	return inv.failStaged(ctx, home, opFail, orderID, rec.token, rec.parts)
}

// probeStaged probes every promised part of rec, nodes concurrently, and
// returns the verdict and, for verdictReserved, the parts with their redo
// offsets.
func (inv *Inventory) probeStaged(ctx context.Context, orderID string, rec orderRecord, prevent bool) (stagedVerdict, []part, error) {
	mode := "inspect"
	if prevent {
		mode = "prevent"
	}
	seen := make([]probedPart, len(rec.parts))
	var (
		calls []scriptCall
		asked []nodeParts // asked[k]: the parts calls[k] probes
	)
	for _, g := range byNode(rec.parts) {
		n, err := inv.r.Node(g.node)
		if err != nil && inv.departed(ctx, g.node) {
			for _, i := range g.idx {
				seen[i] = probedPart{state: probeGone}
			}
			continue
		}
		if err != nil {
			return 0, nil, fmt.Errorf("%w: order %q: promised part on node %s, which is not in the topology: %w", ErrUnavailable, orderID, g.node, err)
		}
		calls = append(calls, inv.probeCall(n, mode, orderID, rec.parts, g.idx))
		asked = append(asked, g)
	}
	for k, r := range inv.sendRound(ctx, calls, make([]callReply, 0, len(calls))) {
		got, err := probeResult(calls[k].n, len(asked[k].idx), r)
		if err != nil {
			return 0, nil, err
		}
		for j, i := range asked[k].idx {
			seen[i] = got[j]
		}
	}
	verdict, lost := rec.verdict(seen)
	if verdict != verdictReserved {
		return verdict, nil, nil
	}
	if len(lost) > 0 {
		inv.log.Error("DATA LOSS: staged order has parts its nodes lost since the stage; committing it", "order", orderID, "parts", lost)
	}
	parts := append([]part(nil), rec.parts...)
	for i := range parts {
		parts[i].Offset = seen[i].offset
	}
	return verdictReserved, parts, nil
}

// probeCall is probeScript's call in mode on node n for the promised
// parts parts[i], i in idx.
func (inv *Inventory) probeCall(n *node.Node, mode, orderID string, parts []part, idx []int) scriptCall {
	keys := make([]string, len(idx))
	args := []any{mode, orderID, seconds(inv.cfg.Retention)}
	for j, i := range idx {
		keys[j] = partKey(parts[i].ID)
		args = append(args, parts[i].Incarnation)
	}
	return scriptCall{n: n, s: probeScript, keys: keys, args: args}
}

// releaseLease ends an attempt whose begin may have landed on the home
// node but whose answer was lost (the caller gave up mid-call, a
// timeout): its record would stay "reserving" under token, and every
// retry of the order wait out inventory.attempt_lease as after a crashed
// attempt, though this one took nothing and answered. It marks the
// attempt failed, whatever the caller's context, so a retry begins at
// once (opRelease): a record of this token's, reserving, becomes failed;
// where the order has no record, a failed one under this token is
// written, so the begin, if it lands after this (sent later by a group
// that had already taken it), meets it and answers failed instead of
// holding the lease (under load in CI a retry waited out a lease so).
// Any other record is left as is.
func (inv *Inventory) releaseLease(ctx context.Context, home *node.Node, orderID, token string) {
	cctx, cancel := detached(ctx)
	defer cancel()
	if _, err := inv.orderOp(cctx, home, orderID, opRelease, token, seconds(inv.cfg.Retention)); err != nil {
		inv.log.Debug("could not release an attempt whose begin was not answered; its lease will expire", "order", orderID, "err", err)
	}
}

// existing answers a Reserve whose order already has an outcome.
func (inv *Inventory) existing(orderID string, rec orderRecord) (Reservation, error) {
	switch rec.status {
	case recReserved, recConfirmed:
		return Reservation{OrderID: orderID, Receipts: receipts(rec.parts), Deadline: rec.deadline}, nil
	case recCancelled:
		return Reservation{}, fmt.Errorf("%w: order %q (%s)", ErrCancelled, orderID, rec.reason)
	case recMismatch:
		return Reservation{}, fmt.Errorf("%w: order %q", ErrOrderMismatch, orderID)
	}
	return Reservation{}, fmt.Errorf("%w: order %q: unexpected order state %q", ErrUnavailable, orderID, rec.status)
}

// abandon rolls an attempt back: cancel its parts (tombstones for unknown
// outcomes), then mark the attempt failed so the order id may be retried.
func (inv *Inventory) abandon(ctx context.Context, home *node.Node, orderID, token string, parts, unknown []part) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	all := append(parts, unknown...)
	inv.stats.rolledBack.Add(int64(len(all)))
	pending, _ := inv.settleParts(ctx, orderID, Cancel, all)
	if pending > 0 {
		inv.log.Warn("reserve rollback deferred", "order", orderID, "pending_parts", pending)
	}
	if _, err := inv.orderOp(ctx, home, orderID, opFail, token, seconds(inv.cfg.Retention)); err != nil {
		inv.log.Warn("could not mark failed attempt; its lease will expire", "order", orderID, "err", err)
	}
}
