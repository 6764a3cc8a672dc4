package inventory

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/topology"
)

// reserveStaged tries the one-round path (staged.go). ok is false when the
// order must take the general path; then nothing of this attempt is left
// that could ever be reserved (its parts are cancelled or being cancelled),
// and err, if not nil, is the node failure that stopped the round, or
// errShortSeen when a part came up short (soldout.go; the attempt's parts
// are rolled back, or there were none and its record was withdrawn).
// *settled is set to the attempt's token when it decided its record failed
// and every cancel of its parts landed (unwindStaged): the general path's
// begin, which replaces that record, has none of them to cancel again
// (settleReplaced).
func (inv *Inventory) reserveStaged(ctx context.Context, home *node.Node, orderID string, items []Item, userID string, ttl time.Duration, settled *string) (res Reservation, ok bool, err error) {
	if inv.topology(ctx).phase != topology.PhaseStable {
		return Reservation{}, false, nil
	}
	token := newToken()
	batches, promised, ok := inv.planStaged(ctx, home, orderID, token, items, userID)
	if !ok {
		return Reservation{}, false, nil
	}
	if inv.crash(ctx, "staged:before") {
		return Reservation{}, true, errCrashed
	}
	var holesArr [8]int
	blob, holes := encodeOrderPartsHoles(orderID, token, promised, holesArr[:0])
	// Each part comes due by the clock of the node that takes it, when its
	// script runs (staged.go: "Part deadlines"), never by this instance's.
	mutation, deadline := inv.stageDeadline(ttl)
	homeReqs, batches := batches.cut(home)
	sendStage, batches, crashed := inv.roundCrashes(ctx, batches)
	stage := stagedCall{home: home, due: deadline, mutation: mutation, ttl: ttl, digest: digestOf(items, userID),
		userID: userID, promised: blob, reqs: homeReqs}
	if !sendStage {
		stage.home = nil
	}
	results, staged, stageErr := inv.stageAndTake(ctx, orderID, token, stage, batches)
	if crashed {
		return Reservation{}, true, errCrashed
	}

	round, allTaken := stagedTakes(results, len(promised)-len(homeReqs), userID)
	round.token, round.promised = token, promised
	round.fence = round.fence && !inv.mutated(MutationLimitWithdraw)
	if stageErr == nil && staged.status == stageStaged {
		round.taken = staged.appendHomeParts(round.taken, homeReqs)
	}
	taken := round.taken
	switch {
	case stageErr == nil && staged.status == stageExisting && staged.token == token && staged.record != recFailed:
		// Our own stage, run twice (node clients never replay commands,
		// so this is defensive): its outcome is the record's. (Failed
		// under our token is known: the reconciler found a part of ours
		// due before the stage landed and recorded the failure where
		// there was no record. It is rolled back below like any record.)
		return Reservation{}, true, fmt.Errorf("%w: order %q: outcome unknown, retry Reserve with the same order id", ErrUnavailable, orderID)
	case stageErr != nil && outcomeUnknown(stageErr):
		// The record may be staged under this token (or be on its way): the
		// parts taken elsewhere are aborted at once, the record is decided
		// failed once its node answers (staged.go, "Abort").
		inv.releaseStaged(ctx, home, orderID, token, taken, promised)
		return Reservation{}, true, fmt.Errorf("%w: order %q: outcome unknown, retry Reserve with the same order id: %w", ErrUnavailable, orderID, stageErr)
	case stageErr != nil || staged.status != stageStaged:
		ok, err := inv.notStaged(ctx, orderID, staged, stageErr, round)
		return Reservation{}, ok, err
	case allTaken:
		if inv.crash(ctx, "staged:before-commit") {
			return Reservation{}, true, errCrashed
		}
		created := staged.deadline.UnixMilli() - ms(stage.ttl) // the stage's clock
		inv.commitStaged(ctx, home, orderID, token, taken, staged.rec, created, stagedList{blob, holes, promised})
		inv.stats.staged.Add(1)
		return Reservation{OrderID: orderID, Receipts: receipts(taken), Deadline: staged.deadline}, true, nil
	}
	// Staged, but not every part was taken.
	return inv.unwindStaged(ctx, home, orderID, len(homeReqs) > 0, round, settled)
}

// stageAndTake runs a staged round: the stage (unless stage.home is nil)
// and the takes of batches, all at once (sendRound, the stage first). It
// returns once every one of them returned; the stage's outcome is
// errCrashed when none was sent.
func (inv *Inventory) stageAndTake(ctx context.Context, orderID, token string, stage stagedCall, batches nodeBatches) (results []batchResult, staged stageReply, stageErr error) {
	var callArr [6]scriptCall // a stage and up to 5 nodes' takes: no allocation
	var replyArr [6]callReply
	calls := callArr[:0]
	var rec [2]string
	if stage.home != nil {
		var c scriptCall
		c, rec = inv.stageCall(orderID, token, stage)
		calls = append(calls, c)
	}
	calls = appendTakeCalls(calls, orderID, token, stage.due, batches)
	replies := inv.sendRound(ctx, calls, replyArr[:0])
	if stage.home == nil {
		return inv.takeResults(batches, replies), stageReply{}, errCrashed
	}
	staged, stageErr = stage.reply(rec, replies[0])
	return inv.takeResults(batches, replies[1:]), staged, stageErr
}

// roundCrashes applies the crash points inside a staged round (faults.go)
// to the takes to send, batches (the home node's left out): takes-only
// sends no stage, stage-only no takes, some-takes leaves one node's takes
// out. crashed reports that one was hit: the attempt dies after the round.
func (inv *Inventory) roundCrashes(ctx context.Context, batches nodeBatches) (sendStage bool, send nodeBatches, crashed bool) {
	noStage, onlyStage, someTakes := inv.crash(ctx, "staged:takes-only"), inv.crash(ctx, "staged:stage-only"), inv.crash(ctx, "staged:some-takes")
	switch {
	case onlyStage:
		batches = nil
	case someTakes:
		if len(batches) > 0 {
			batches = batches[1:] // leave one node out
		}
	}
	return !noStage, batches, noStage || onlyStage || someTakes
}

// stageDeadline is the deadline the stage and the takes send: a hold that
// each node adds to its own clock when the script runs (staged.go: "Part
// deadlines"). With MutationStageTakeover (test-only, faults.go) the bug
// of safety issue A1 is re-introduced: deadlines by this instance's clock
// and a stage that takes over a failed record of another token.
func (inv *Inventory) stageDeadline(ttl time.Duration) (Mutation, partDue) {
	if inv.mutated(MutationStageTakeover) {
		return MutationStageTakeover, partDue{at: time.Now().Add(ttl + partGrace)}
	}
	return "", partDue{hold: ttl + partGrace}
}

// appendHomeParts appends to out the parts a landed stage took on the
// home node (homeReqs, with the redo offsets of its reply).
func (r stageReply) appendHomeParts(out []part, homeReqs []partReq) []part {
	for i, q := range homeReqs {
		p := q.part
		if p.Kind == PartStock {
			p.Offset = r.offsets[i]
		}
		out = append(out, p)
	}
	return out
}

// notStaged ends an attempt whose stage did not land: refused before the
// network, short on the home node, or the order already has a record
// (failed included: a stage never takes one over, staged.go). No record
// names the token but as failed, so no one can reserve its parts (the
// home node took none): the round's parts are abandoned. The answer is the
// stage's error; or the refusal for good, when the home node was short and
// a node refused the order and no attempt of the order can hold what
// refused it (!r.fence: the general path could only say the same, three
// round trips later; an existing record goes to the general path, which
// answers for it); else the general path follows (ok false), told
// errShortSeen when the home node was short (soldout.go).
func (inv *Inventory) notStaged(ctx context.Context, orderID string, staged stageReply, stageErr error, r stagedRound) (ok bool, err error) {
	inv.abandonUnstaged(ctx, orderID, append(r.taken, r.unknown...))
	if stageErr != nil {
		return true, stageErr
	}
	if refused := r.refused; refused != nil && !r.fence && staged.status == stageShort {
		inv.stats.stagedRefused.Add(1)
		return true, refused
	}
	inv.stats.stagedFallback.Add(1)
	if staged.status == stageShort {
		return false, errShortSeen
	}
	return false, nil
}

// stagedRound is what a staged attempt's round left: its token, the
// parts taken, those whose outcome is unknown, every part promised, the
// first node failure and the first refusal for good (stagedTakes).
type stagedRound struct {
	token                    string
	taken, unknown, promised []part
	roundErr, refused        error
	// fence: refused is a quota part over the user's limit counting as
	// many units as the part wants, or more (limitMayBeOwn): they may be
	// another attempt of this order, whose stage may still land, so the
	// refusal is answered only behind a record that fences it out.
	fence bool
}

// unwindStaged ends a staged attempt whose record was staged but whose
// round did not take every part (homeParts: the stage took the home
// node's): withdraw the record when nothing of the attempt is on any node
// (soldout.go), else decide it failed and roll the parts back. ok, err
// and settled are reserveStaged's.
func (inv *Inventory) unwindStaged(ctx context.Context, home *node.Node, orderID string, homeParts bool, r stagedRound, settled *string) (res Reservation, ok bool, err error) {
	token, taken, unknown, promised, roundErr, refused := r.token, r.taken, r.unknown, r.promised, r.roundErr, r.refused
	cctx, cancel := detached(ctx)
	defer cancel()
	nothing := !homeParts && len(taken) == 0 && len(unknown) == 0 && !r.fence
	if nothing && inv.crash(ctx, "staged:before-withdraw") {
		return Reservation{}, true, errCrashed // the staging record stays for a reader to decide
	}
	if nothing && inv.withdrawStaged(cctx, home, orderID, token) {
		// Nothing of the attempt on any node, and its record gone: no
		// key left (soldout.go, "Withdraw").
		inv.stats.stagedFallback.Add(1)
		switch {
		case refused != nil:
			inv.stats.stagedRefused.Add(1)
			return Reservation{}, true, refused
		case roundErr != nil:
			return Reservation{}, false, roundErr
		}
		return Reservation{}, false, errShortSeen
	}
	rec, err := inv.orderOp(cctx, home, orderID, opFail, token, seconds(inv.cfg.Retention))
	if err != nil {
		inv.releaseStaged(ctx, home, orderID, token, taken, promised) // counts what it aborts
		return Reservation{}, true, fmt.Errorf("%w: order %q: outcome unknown, retry Reserve with the same order id: %w", ErrUnavailable, orderID, err)
	}
	// What can hold or still take stock: the parts taken and those whose
	// take's outcome is unknown (tombstoned). A promised part whose take
	// answered without taking can never be taken (node clients never
	// replay a script; its id carries the token): no tombstone for it.
	back := slices.Concat(taken, unknown)
	inv.stats.rolledBack.Add(int64(len(back)))
	if rec.status != recFailed || rec.token != token {
		// Decided otherwise first: a reader found every part (an unknown
		// take had landed) and committed it.
		return Reservation{}, true, fmt.Errorf("%w: order %q: outcome unknown (it is %s now), retry Reserve with the same order id", ErrUnavailable, orderID, rec.status)
	}
	if pending, _ := inv.settleParts(cctx, orderID, Cancel, back); pending > 0 {
		inv.log.Warn("staged reserve rollback deferred", "order", orderID, "pending_parts", pending)
	} else {
		*settled = token
	}
	if refused != nil {
		// Decided failed, its parts cancelled: the refusal is the answer
		// (the general path would meet it again).
		inv.stats.stagedRefused.Add(1)
		return Reservation{}, true, refused
	}
	inv.stats.stagedFallback.Add(1)
	if err := ctx.Err(); err != nil {
		if roundErr != nil {
			return Reservation{}, true, roundErr
		}
		return Reservation{}, true, fmt.Errorf("order %q: %w", orderID, err)
	}
	if roundErr == nil {
		return Reservation{}, false, errShortSeen // a take came up short (soldout.go)
	}
	return Reservation{}, false, roundErr
}

// planStaged places each item on its first choice (itemCandidates: the
// home node, or the user's quota node for an order with a user) and each
// per-user quota on the user's quota node.
// ok is false when some item has no usable node, a quota node is not
// usable, or every part would be on the home node (local.go's case).
func (inv *Inventory) planStaged(ctx context.Context, home *node.Node, orderID, token string, items []Item, userID string) (nodeBatches, []part, bool) {
	nparts := len(items)
	if userID != "" {
		nparts++ // and, mostly, one quota part (more only grow the slices)
	}
	batches := make(nodeBatches, 0, nparts)
	promised := make([]part, 0, nparts)
	// a node's first request is cut from one array (capacity 1: a second
	// one on the same node grows its own), so that an order of one item
	// per node allocates once for its requests
	firsts := make([]partReq, 0, nparts)
	away := false
	add := func(n *node.Node, r partReq) {
		if i := batches.find(n); i >= 0 {
			batches[i].reqs = append(batches[i].reqs, r)
		} else {
			firsts = append(firsts, r)
			k := len(firsts) - 1
			batches = append(batches, nodeBatch{n: n, reqs: firsts[k : k+1 : k+1]})
		}
		promised = append(promised, r.part)
		away = away || n != home
	}
	for i, it := range items {
		set, _ := inv.set(ctx, it.Route)
		var cb [4]*node.Node // only the first choice is kept
		c := inv.appendItemCandidates(cb[:0], set, home, orderID, it.SKU, userID)
		if len(c) == 0 {
			return nil, nil, false
		}
		q := inv.redoQueue(it.Route, it.SKU)
		add(c[0], partReq{
			part: part{ID: stockPartID(orderID, token, i), Node: c[0].Name(), Kind: PartStock, Item: i, Route: it.Route, SKU: it.SKU, Qty: it.Quantity, Redo: q,
				Incarnation: c[0].Incarnation()},
			queue: q, ck: stockKey(it.Route, it.SKU),
		})
	}
	if userID != "" {
		for _, q := range inv.quotaParts(ctx, orderID, token, items, userID) {
			if !inv.usable(q.node) {
				return nil, nil, false
			}
			q.req.Incarnation = q.node.Incarnation()
			add(q.node, q.req)
		}
	}
	return batches, promised, away
}

// stagedTakes reads the round's take replies: the parts taken (with their
// redo offsets), the parts whose outcome is unknown, the first node
// failure, and the first refusal for good (see refusal) with its fence;
// and whether every one of the want promised parts was taken in full.
func stagedTakes(results []batchResult, want int, userID string) (round stagedRound, all bool) {
	all = true
	n := 0
	round.taken = make([]part, 0, want+1) // and the stage's home parts (reserveStaged)
	for _, res := range results {
		if res.err != nil {
			all = false
			if round.roundErr == nil {
				round.roundErr = res.err
			}
			round.unknown = append(round.unknown, res.unknownParts()...)
			continue
		}
		for j, r := range res.reqs {
			rep := res.replies[j]
			if round.refused == nil {
				round.refused = refusal(r, rep, userID)
				round.fence = round.refused != nil && (limitMayBeOwn(r, rep) || needsUserMayBeOwn(r, rep))
			}
			if rep.state != takePending {
				all = false
				continue
			}
			p := r.part
			if p.Kind == PartStock {
				p.Offset = rep.offset
			}
			if rep.qty != p.Qty || (p.Kind == PartStock && rep.limit > 0 && userID == "") {
				all = false // short, or a limited SKU without a user: the general path says why
			}
			p.Qty = rep.qty
			round.taken = append(round.taken, p)
			n++
		}
	}
	return round, all && n == want
}

// withdrawStaged deletes the staging record of an attempt that left
// nothing on any node (soldout.go, "Withdraw"); true when it is gone.
// False (a reader decided it first, or the node did not answer) leaves the
// record to the usual decision.
func (inv *Inventory) withdrawStaged(ctx context.Context, home *node.Node, orderID, token string) bool {
	rec, err := inv.orderOp(ctx, home, orderID, opWithdraw, token)
	return err == nil && rec.status == recMissing
}

// abandonUnstaged cancels the parts of an attempt whose record was never
// staged (tombstones for unknown outcomes).
func (inv *Inventory) abandonUnstaged(ctx context.Context, orderID string, parts []part) {
	if len(parts) == 0 {
		return
	}
	ctx, cancel := detached(ctx)
	defer cancel()
	inv.stats.rolledBack.Add(int64(len(parts)))
	if pending, _ := inv.settleParts(ctx, orderID, Cancel, parts); pending > 0 {
		inv.log.Warn("staged reserve rollback deferred", "order", orderID, "pending_parts", pending)
	}
}

// stagedList is the part list a staged attempt promised: as its stage
// wrote it (encodeOrderPartsHoles), where each part's offset field starts
// in it, and the parts.
type stagedList struct {
	blob     string
	holes    []int
	promised []part
}

// commitStaged makes a staged order's record "reserved" off the caller's
// path: the next write group on home carries the commit (carry.go), or it
// is sent by itself; synchronously once Close was called. A commit that
// does not land is harmless: whoever meets the record next finds every
// part and commits it (resolveStaged). rec is the staging record's
// pieces its stage sent (stageTakeCall), created its home's clock when
// the stage ran (ms), and list what it promised: the committed list is
// list's with the offsets of parts (withOffsets), or parts encoded.
func (inv *Inventory) commitStaged(ctx context.Context, home *node.Node, orderID, token string, parts []part, rec [2]string, created int64, list stagedList) {
	blob, ok := withOffsets(list.blob, list.holes, list.promised, parts)
	if !ok {
		blob = encodeOrderParts(orderID, token, parts)
	}
	c := carriedCommit{ctx: context.WithoutCancel(ctx), home: home, orderID: orderID, token: token,
		parts: blob, epoch: inv.topology(ctx).token}
	staged, prefix, createdS, err := stagedCommitValues(token, rec, created, packOrderParts(blob, token))
	if err == nil {
		c.staged, c.prefix, c.created = staged, prefix, createdS
		if inv.carry(c) {
			return
		}
	}
	inv.offPath(ctx, func(ctx context.Context) { inv.sendCommit(ctx, c) })
}

// background tracks the commits running off the callers' paths.
type background struct {
	sync.Mutex // guards closed and wg.Add
	closed     bool
	wg         sync.WaitGroup
}

// Close sends the commits of one-round reservations still waiting for a
// group to carry them (carry.go) and waits for those (and the roll-backs)
// still running in the background (at most a few seconds); later ones run
// on the caller's path. The goroutines parked between sends exit
// (workers.go); later sends start their own. Call it before closing the
// router. The Inventory stays usable.
func (inv *Inventory) Close() {
	inv.bg.Lock()
	inv.bg.closed = true
	inv.bg.Unlock()
	inv.flushCarried()
	inv.bg.wg.Wait()
	inv.workers.close()
}

func digestOf(items []Item, userID string) string {
	var h xxhash.Digest
	h.Reset()
	_, _ = h.WriteString(userID)
	var qty [20]byte
	for _, it := range items {
		// "\x00" route "\x00" sku "\x00" quantity, written piece by piece
		_, _ = h.WriteString("\x00")
		_, _ = h.WriteString(it.Route)
		_, _ = h.WriteString("\x00")
		_, _ = h.WriteString(it.SKU)
		_, _ = h.WriteString("\x00")
		_, _ = h.Write(strconv.AppendInt(qty[:0], it.Quantity, 10))
	}
	return strconv.FormatUint(h.Sum64(), 16)
}

// settleReplaced cancels the parts of the failed record that the general
// path's begin of attempt token replaced (replaced: that record's part
// list, which the begin's reply carries, lua/order.lua; none for a
// general-path record; or the list a reserving record whose lease ran out
// carried on from the failed record its begin replaced: the begin's
// record keeps it until its commit, staged.go "Replacing a failed
// record"). The record excluded its attempt, but the cancels
// after its fail may never have landed: the reader or the attempt that
// decided it died right after, or its home answered after the decider's
// 2 s. The begin overwrote the last list of those parts that anyone
// reads, so before this they held their units until they came due, the
// attempt's ttl (up to max_reservation_ttl) on, while the retry took the
// order's units again (TestRetryOverAFailedRecordReturnsItsParts). The
// cancels follow the rule of staged.go ("Who moves what"): the record read
// excludes the attempt its parts name, so no part of an order that is or
// will be reserved is among them, and never one of token's, whose ids
// carry token (checked all the same). Nothing is sent for parts of
// attempt settled, this call's own one-round attempt, whose roll-back
// cancelled every one of them just before (unwindStaged). They run to
// their answers whatever the caller does (detached, within
// commitTimeout), and the caller waits for them before it sends a take:
// the retry often wants the very units they hold, and a take sent beside
// them found those still held and refused the order
// (TestRetryOverAFailedRecordGetsItsOwnUnitsBack). A caller that gives up
// meanwhile ends its own wait (the package doc's rule), its takes then
// fail, and the cancels run on off its path; before, it waited for them
// up to 2 s past its deadline
// (TestRetryGivingUpEndsItsWaitForTheReplacedCancels). A node they
// cannot reach gets them deferred, as after any failure.
func (inv *Inventory) settleReplaced(ctx context.Context, orderID, token, settled string, replaced []part) {
	if len(replaced) == 0 {
		return
	}
	own, done := orderID+"|"+token+"|", orderID+"|"+settled+"|"
	parts := make([]part, 0, len(replaced))
	for _, p := range replaced {
		if !strings.HasPrefix(p.ID, own) && (settled == "" || !strings.HasPrefix(p.ID, done)) {
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		return
	}
	landed := make(chan struct{})
	inv.offPath(ctx, func(ctx context.Context) {
		defer close(landed)
		if pending, _ := inv.settleParts(ctx, orderID, Cancel, parts); pending > 0 {
			inv.log.Warn("replaced failed attempt's parts deferred", "order", orderID, "pending_parts", pending)
		}
	})
	select {
	case <-landed:
	case <-ctx.Done(): // the caller gave up: its takes fail; the cancels run on
	}
}
