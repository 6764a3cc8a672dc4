package explore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
)

// The data-loss actor: a node goes back to an older copy of its data (a
// restored backup, writes lost before they reached disk), is refused, and
// is accepted as an operator would accept it (router.AcceptNode). What it
// lost is lost by design (SECURITY.md); what must still hold is
// everything else: no oversell, no stock from nothing, no part settled
// twice, nothing left pending, no other order's promise broken.
//
// Three scheduled steps, with a drawn number of picks of other actors'
// calls between them:
//
//  1. copy: the node's AOF is rewritten (so no rewrite runs during the
//     copy, and the copy is whole) and copied; in half the schedules the
//     copy is taken at the schedule's start instead, before any actor's
//     first call, as a backup taken earlier would be (a loss that goes
//     back past every write of the schedule, its orders' first ones
//     included);
//  2. roll back: the node is killed, the copy put back, the node
//     restarted; the step waits until a router refuses it
//     (node.ErrRolledBack), so no scheduled call reaches the older data
//     before it is refused. A node that lost no write a router saw
//     acknowledged lost nothing a client relies on (a write whose reply
//     was lost has an outcome no client knows): no one refuses it, the
//     actor ends there, and every check holds as ever;
//  3. accept: the node's write sequence must not have moved since its
//     restart (no write reached the older data while it was refused),
//     then it is accepted and the step waits until every router uses it.
//
// After the accept the actor runs the operator's other step, `shardis
// topology apply` of the current topology, when the nodes are not all
// stable at one token (a copy older than the last apply holds
// an earlier epoch's record: topology/doc.go, "A node that went back").
//
// An actor that dies between 2 and 3 (its scheduler step cancelled by the
// watchdog) is accepted anyway, unscheduled: an operator accepts the node
// sooner or later, and the heal needs it.
//
// The checks (check.go) excuse the per-order violations of the orders the
// node's loss exposes (lossdiff.go): those whose record or parts on the
// node differ between just before the roll back (writes paused) and just
// after it, and those whose record promises a part on the node at its
// older incarnation; a record marked moved that comes back live exposes
// nothing (the move took the order's data away first); an acknowledged
// Confirm or Cancel is excused only when the loss took the order's
// record itself. When the node
// could not be read around the roll back, every order of phase 1 and the
// topology actor's whose items, quota parts or record home could live on
// the node is exposed (lossExposure). The node-level checks (counters
// against parts, stock conserved, quota counters, nothing pending, the
// topology stable) and the orders begun after the accept (phase 2's) are
// checked as ever, but
// on a route the node serves whose nodes an apply changed, one that ran
// and began before the roll back (lossMoved, lossview.go; a drawn apply
// the topology actor never reached changes nothing): there a counter
// moves between nodes while the parts that count it stay, so the loss
// may take the one and not the other. Its
// quota counters' checks against their parts are excused (seed 17364
// with PROFILE=calm TOPOLOGY=1 INLINE=1 LOSS=1: o1's confirmed quota
// part on n3 lost, its counter away on n4 during the loss and moved
// back), and units the node's loss gave back to it there, off the route,
// as far as it gave them back (checkStranded). Every SKU's units over
// all nodes are held to what the schedule loaded less what each loss
// took off its node's loaded count, and never more than was loaded
// (check_stock.go: the roll back reads the node's counts just before
// and after it, stockLoss).

// lossPlan is a data-loss actor's draws: its node and how many picks of
// other calls pass between its steps.
type lossPlan struct {
	node              string
	before, held, out int // waits before the copy, between copy and roll back, roll back and accept
	// snap, when set, is a copy taken at the schedule's start, before any
	// actor's first call (as of a backup taken earlier): the actor's
	// first step is then the roll back.
	snap string
	// A following loss ties its steps to the moved order's (moved.go;
	// node is its T0 home): the copy waits until its Reserve returned,
	// mostly before the topology actor's apply of T1 moves its record to
	// n4, and
	// the roll back until its decision at T1 returned, so the node goes
	// back to the order's record as it was before the move, undecided and
	// not marked moved, while the removal of n4 has still to carry the
	// decision back. Each wait is observed.waitEnded's. followReserve
	// and followDecide name the moved order's clients ("": no follow).
	followReserve, followDecide string
	// after names an actor that must have ended before this one's first
	// step: a second loss of the same node (secondLoss) goes back only
	// once the first was accepted and its re-apply ran, and not at all
	// when the first has not ended after observed.waitEnded's wait ("":
	// none).
	after string
	// followBack, when set, names the milestone of the topology actor's
	// second apply (topologyBack): the roll back waits for it, so the
	// node goes back, after the apply moved route c off it, to a copy
	// from before, and the rejoin waits for this actor's end (a
	// following loss: followRejoin).
	followBack string
}

// loss is the data-loss actor of plan.
func (w *World) loss(o *observed, s *Scheduler, who string, plan lossPlan) func(ctx context.Context) {
	return func(ctx context.Context) {
		defer o.end(who)
		name, snap := plan.node, plan.snap
		if plan.after != "" {
			// bounded: the first actor's calls may be parked until the
			// next phase, which waits for this one
			if o.waitEnded(ctx, s, who, plan.after); !o.hasEnded(plan.after) {
				o.note(who, "go back after "+plan.after+" ended: it had not", nil)
				_ = os.RemoveAll(snap)
				return
			}
		}
		if plan.followReserve != "" {
			o.waitEnded(ctx, s, who, plan.followReserve)
		}
		if snap == "" {
			s.Pass(ctx, who, plan.before)
			snap = w.snapPath(name)
			err := s.Step(ctx, "copy "+name, func() error { return w.copyData(ctx, name, snap) })
			o.note(who, "copy "+name+"'s data", err)
			if err != nil {
				_ = os.RemoveAll(snap)
				return
			}
		}
		defer os.RemoveAll(snap) // put in place by the roll back, or left over
		if plan.followDecide != "" {
			o.waitEnded(ctx, s, who, plan.followDecide)
		}
		o.waitLong(ctx, s, who, plan.followBack)
		s.Pass(ctx, who, plan.held)
		var restarted int64 = -1 // the write sequence the older copy came back with
		var sl stockLoss         // what it did to the node's loaded counts
		err := s.Step(ctx, "roll back "+name, func() (err error) {
			restarted, sl, err = w.rollBack(ctx, o, who, name, snap)
			return err
		})
		o.note(who, "roll back "+name+" to the copy", err)
		if restarted < 0 {
			return // nothing lost, or not restarted (a world error, at the heal)
		}
		o.lost(name, sl)
		s.Pass(ctx, who, plan.out)
		err = s.Step(ctx, "accept "+name, func() error { return w.accept(ctx, o, name, restarted) })
		if errors.Is(err, inventory.ErrCrashed) || ctx.Err() != nil {
			o.note(who, "accept "+name, w.accept(context.Background(), o, name, restarted))
			return
		}
		o.note(who, "accept "+name, err)
		w.reapply(ctx, o, s, who)
	}
}

// secondLoss starts the second data-loss actor (Options.Loss2) beside
// the first, whose node is first: its own node, drawn among n1..n3 (the
// same node waits for the first actor's end: lossPlan.after), its own
// waits, and in half the schedules a copy taken now, at the schedule's
// start.
func (w *World) secondLoss(ctx context.Context, o *observed, s *Scheduler, first string) {
	plan := lossPlan{node: nodesT0[s.Intn(len(nodesT0))], before: s.Intn(6), held: 1 + s.Intn(30), out: s.Intn(8)}
	if plan.node == first {
		plan.after = "loss"
	}
	if s.Chance(0.5) {
		plan.snap = w.startCopy(ctx, o, "loss2", plan.node)
	}
	s.Go(ctx, "loss2", w.loss(o, s, "loss2", plan))
}

// startCopy copies node name's data for data-loss actor who at the
// schedule's start, before any actor's first call (set-up: not
// scheduled), and returns the copy's path ("" when it failed, noted).
func (w *World) startCopy(ctx context.Context, o *observed, who, name string) string {
	snap := w.snapPath(name)
	err := w.copyData(ctx, name, snap)
	o.note(who, "copy "+name+"'s data at the start", err)
	if err != nil {
		return ""
	}
	return snap
}

// twin is the twin actor (Options.Twin): a second operator who, after
// wait picks, reruns the apply as the data-loss actor does after its
// accept (reapply), whatever the other actors are doing then.
func (w *World) twin(o *observed, s *Scheduler, who string, wait int) func(ctx context.Context) {
	return func(ctx context.Context) {
		s.Pass(ctx, who, wait)
		w.reapply(ctx, o, s, who)
	}
}

// reapply is the operator's step after an accept: when the nodes are not
// all stable at the newest record's token (the node's copy predates the
// last apply, or an apply is under way), `shardis topology apply` of that
// record's topology, its calls scheduled like the topology actor's.
func (w *World) reapply(ctx context.Context, o *observed, s *Scheduler, who string) {
	at, stable, err := w.topologyNow(ctx)
	if err != nil || stable {
		return
	}
	from := w.cfg1 // the addresses of nodes with records
	if at == "T1" {
		from = w.cfg0
	}
	began := time.Now()
	rep, err := inventory.ApplyTopology(ctx, inventory.ApplyOptions{To: w.config(at), From: from, Wait: 300 * time.Millisecond, Logger: discard, Faults: s})
	o.applied(at, began, rep, err)
	o.note(who, fmt.Sprintf("topology apply %s again (phase %s)", at, rep.Phase), err)
}

// snapPath is a new path for a copy of node name's AOF.
func (w *World) snapPath(name string) string {
	return filepath.Join(w.srvs[name].Dir(), fmt.Sprintf("snapshot-%d", time.Now().UnixNano()))
}

// copyData rewrites node name's AOF, waits for the rewrite to end, and
// copies it to snap.
func (w *World) copyData(ctx context.Context, name, snap string) error {
	c := w.direct[name]
	if err := c.BgRewriteAOF(ctx).Err(); err != nil && !strings.Contains(err.Error(), "in progress") {
		return fmt.Errorf("explore: rewriting %s's AOF: %w", name, err)
	}
	deadline := time.Now().Add(setupWait)
	for {
		info, err := c.Info(ctx, "persistence").Result()
		if err != nil {
			return err
		}
		if strings.Contains(info, "aof_rewrite_in_progress:0") && strings.Contains(info, "aof_rewrite_scheduled:0") {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("explore: %s's AOF rewrite did not end within %v", name, setupWait)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return w.srvs[name].CopyAOF(snap)
}

// rollBack restarts node name from the copy snap. It returns the write
// sequence the node came back with when the node lost a write some router
// saw acknowledged, once a router refuses it; -1 when it lost nothing a
// router saw acknowledged (a write whose reply was lost is a write whose
// outcome no client knows: losing it is not losing data), or did not
// restart. With it, what the roll back did to the node's loaded counts
// (stockLoss: unread when the node could not be read just before the
// kill, writes paused, or just after the restart). A node that lost an
// acknowledged write and that no router refuses within 5s is a
// violation (o.problem): the step ends, and the actors' calls may then
// reach the older data.
func (w *World) rollBack(ctx context.Context, o *observed, who, name, snap string) (int64, stockLoss, error) {
	sl := stockLoss{node: name}
	// Writes are paused from here to the kill (CLIENT PAUSE WRITE): a
	// call let go before this step may still be on its way, and what the
	// node holds when it is read must be what the kill loses (lossdiff.go).
	paused := w.direct[name].Do(ctx, "CLIENT", "PAUSE", "10000", "WRITE").Err() == nil
	unpause := func() {
		if paused {
			_ = w.direct[name].Do(ctx, "CLIENT", "UNPAUSE").Err()
		}
	}
	before, err := w.seq(ctx, name)
	if err != nil {
		unpause()
		return -1, sl, err
	}
	incBefore := w.incarnations(ctx, []string{name})[name]
	var pre *nodeState // what it held: lossdiff.go
	if paused {
		if pre = w.readForDiff(ctx, name); pre != nil {
			pre.movedLive = w.liveElsewhere(ctx, pre)
		}
	}
	sl.at = time.Now()
	if err := w.srvs[name].RestartFrom(snap); err != nil {
		unpause()
		return -1, sl, err
	}
	after, err := w.seq(ctx, name)
	if err != nil {
		return -1, sl, err
	}
	// A copy from before an accept (a second loss of the node: Loss2)
	// holds an older incarnation, whose write sequence does not compare
	// with the one it replaced: only a refusal tells it lost something.
	past := w.incarnations(ctx, []string{name})[name] != incBefore
	if post := w.readForDiff(ctx, name); pre != nil && post != nil {
		// an install under way when the others were read (not paused) may
		// have landed since: a live record now comes from it, the mark
		// being gone (lossdiff.go)
		maps.Copy(pre.movedLive, w.liveElsewhere(ctx, pre))
		o.diffed(name, diffLoss(pre, post))
		sl = stockLossOf(pre, post, sl.at)
	}
	// Marks of the node's writes reach its peers up to a heartbeat after
	// the write (node/witness.go), from the actors' routers and from the
	// short-lived ones of a topology apply: a few heartbeats for them.
	var seen int64
	for wait := time.Now().Add(4 * w.cfg0.Health.Heartbeat); ; time.Sleep(2 * time.Millisecond) {
		seen = max(w.maxSeen(o, name), w.witnessed(ctx, name))
		if (!past && seen > after) || w.refused(o, name) || time.Now().After(wait) {
			break
		}
	}
	refused := w.refused(o, name)
	lostNothing := after >= before || (seen <= after && !refused)
	if past {
		lostNothing = !refused // sequences of two incarnations do not compare
	}
	if lostNothing {
		o.note(who, fmt.Sprintf("%s came back at write seq %d (was %d, %d seen acknowledged): nothing acknowledged lost", name, after, before, seen), nil)
		return -1, sl, nil
	}
	deadline := time.Now().Add(5 * time.Second)
	for !w.refused(o, name) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			o.problem("rollback-undetected", "node %s came back from an older copy (write seq %d, was %d, %d seen acknowledged) and no router refused it within 5s", name, after, before, seen)
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	return after, sl, nil
}

// allRouters are the world's routers and those the actors made (o.routers).
func (w *World) allRouters(o *observed) []*router.Router {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append(append([]*router.Router{w.healR}, w.routers...), o.routers...)
}

// maxSeen is the highest write sequence of node name that a router saw
// acknowledged.
func (w *World) maxSeen(o *observed, name string) int64 {
	var seen int64
	for _, r := range w.allRouters(o) {
		if n, err := r.Node(name); err == nil {
			seen = max(seen, n.MaxSeq())
		}
	}
	return seen
}

// witnessed is the highest write sequence of node name's current
// incarnation that its peers hold a mark of.
func (w *World) witnessed(ctx context.Context, name string) int64 {
	inc, err := w.direct[name].HGet(ctx, node.StampKey, "incarnation").Result()
	if err != nil {
		return 0
	}
	var seen int64
	for _, peer := range allNodes {
		if peer == name {
			continue
		}
		if v, err := w.direct[peer].HGet(ctx, node.WitnessKey, name).Result(); err == nil {
			if m, err := node.ParseMark(v); err == nil && m.Incarnation == inc {
				seen = max(seen, m.Seq)
			}
		}
	}
	return seen
}

// refused reports whether some router refuses node name for having gone
// back.
func (w *World) refused(o *observed, name string) bool {
	for _, r := range w.allRouters(o) {
		if n, err := r.Node(name); err == nil && errors.Is(n.DownReason(), node.ErrRolledBack) {
			return true
		}
	}
	return false
}

// accept accepts node name, which came back at write sequence restarted,
// through the healer's router, and waits until every router uses it. A
// sequence that moved since is a violation: a write reached the older
// data while it should have been refused.
func (w *World) accept(ctx context.Context, o *observed, name string, restarted int64) error {
	if now, err := w.seq(ctx, name); err == nil && now > restarted {
		o.problem("rollback-undetected", "node %s applied %d write(s) to its older data before it was accepted", name, now-restarted)
	}
	if _, err := w.healR.AcceptNode(ctx, name); err != nil {
		return err
	}
	return w.waitUsable(ctx)
}

// seq reads node name's write sequence (its stamp's seq), retrying over a
// restart's dropped connection for up to 2s.
func (w *World) seq(ctx context.Context, name string) (int64, error) {
	deadline := time.Now().Add(2 * time.Second)
	for {
		v, err := w.direct[name].HGet(ctx, node.StampKey, "seq").Int64()
		if errors.Is(err, redis.Nil) {
			return 0, nil
		}
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return v, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}
