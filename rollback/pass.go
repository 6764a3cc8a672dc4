package rollback

import (
	"context"
	"sync"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
)

// node reconciles one node and returns the number of failed steps. l is
// the background pass's lease (nil for RunOnce): each step that changes
// the node is taken only while it is held (lease.held), and what a pass
// stopped by a lost lease leaves is left to the next pass, of whichever
// instance holds the lease then.
func (r *Reconciler) node(ctx context.Context, n *node.Node, l *lease) int {
	r.passes.Add(1)
	r.auditStock(ctx, n)
	failed := r.settleQueued(ctx, n, l)
	failed += r.retryStuck(ctx, n, l)
	failed += r.expire(ctx, n, l)
	failed += r.converge(ctx, n, l)
	return failed + r.trim(ctx, n, l)
}

// settleQueued runs n's deferred settles; what it does not get to goes
// back to the queue.
func (r *Reconciler) settleQueued(ctx context.Context, n *node.Node, l *lease) (failed int) {
	work := r.queue.take(n.Name())
	for i, s := range work {
		if !l.held(ctx) {
			for _, s := range work[i:] {
				r.queue.Enqueue(s)
			}
			return failed
		}
		if _, err := r.inv.SettleNow(ctx, s); err != nil {
			if inventory.Unsettleable(err) {
				failed += r.unsettleable(ctx, s, err, l)
				continue
			}
			r.queue.Enqueue(s)
			if failed == 0 && ctx.Err() == nil { // once per pass: the rest likely fail alike
				r.log.Warn("reconciler: deferred settle failed, kept for a later pass", "node", n.Name(),
					"order", s.OrderID, "action", s.Action, "err", err)
			}
			failed++
			continue
		}
		r.deferred.Add(int64(len(s.PartIDs)))
	}
	return failed
}

// retryStuck moves n's stuck parts whose backoff ran out back to its
// pending index, due now.
func (r *Reconciler) retryStuck(ctx context.Context, n *node.Node, l *lease) int {
	if !l.held(ctx) {
		return 0
	}
	k, err := r.inv.RetryDueStuck(ctx, n.Name(), r.set.Batch, r.set.StuckRetryMax)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("reconciler: retrying stuck parts", "node", n.Name(), "err", err)
		}
		return 1
	}
	r.retried.Add(int64(k))
	return 0
}

// expire settles n's due parts, at most 20 batches.
func (r *Reconciler) expire(ctx context.Context, n *node.Node, l *lease) (failed int) {
	for range 20 {
		if !l.held(ctx) {
			return failed
		}
		due, err := r.inv.DueParts(ctx, n, r.set.Batch)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("reconciler: reading due parts", "node", n.Name(), "err", err)
			}
			return failed + 1
		}
		f, progress := r.resolve(ctx, due, l)
		failed += f
		if len(due) < r.set.Batch || progress == 0 || ctx.Err() != nil {
			break
		}
	}
	return failed
}

// converge finishes n's per-user limit changes.
func (r *Reconciler) converge(ctx context.Context, n *node.Node, l *lease) int {
	if !l.held(ctx) {
		return 0
	}
	if _, err := r.inv.ConvergeLimits(ctx, n.Name()); err != nil {
		if ctx.Err() == nil {
			r.log.Warn("reconciler: finishing per-user limit changes", "node", n.Name(), "err", err)
		}
		return 1
	}
	return 0
}

// A trim step removes up to trimBatch entries per queue per call, and
// calls again while a queue had a whole batch removed (it may hold more
// that may go: inventory.RedoTrim.More), at most Settings.TrimCalls calls:
// up to TrimCalls × trimBatch entries per queue per trim, so one pass
// stays bounded (each call is one script on the node).
const trimBatch = 200

// trim trims n's redo log every TrimEvery passes of n, and on every pass
// while its last trim stopped at TrimCalls with more to remove (behind):
// calls of trimBatch entries per queue while a queue may hold more that
// may go, the lease is held and ctx is not done, at most TrimCalls.
func (r *Reconciler) trim(ctx context.Context, n *node.Node, l *lease) int {
	behind := r.behind[n.Name()]
	if !l.held(ctx) || (r.nodeN[n.Name()].Add(1)%int64(r.set.TrimEvery) != 0 && !behind.Load()) {
		return 0
	}
	behind.Store(false)
	for i := range r.set.TrimCalls {
		t, err := r.inv.TrimRedoLogStep(ctx, n.Name(), r.set.TrimAge, trimBatch)
		r.trimmed.Add(int64(t.Removed))
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("reconciler: trimming the redo log", "node", n.Name(), "err", err)
			}
			return 1
		}
		if !t.More || ctx.Err() != nil || !l.held(ctx) {
			break
		}
		if i == r.set.TrimCalls-1 {
			behind.Store(true) // more to remove: again on the next pass
		}
	}
	return 0
}

// unsettleable handles deferred work s that failed with an error that
// comes back until someone repairs data (inventory.Unsettleable): each of
// its parts is tried alone, so the parts that can be settled are; a part
// that still cannot is dropped from the queue, not retried every pass. It
// stays in its node's pending index, and once its deadline passes the
// expiry pass settles it by its order's decision or sets it aside (the
// queue is only for speed: every pending part has a deadline). A part that
// fails for a transient reason goes back to the queue. It returns the
// number of failed steps.
func (r *Reconciler) unsettleable(ctx context.Context, s inventory.Settle, err error, l *lease) int {
	var dropped []string
	if len(s.PartIDs) == 1 {
		dropped = s.PartIDs
	} else {
		for i, id := range s.PartIDs {
			one := s
			one.PartIDs = []string{id}
			if len(s.Members) == len(s.PartIDs) {
				one.Members = []string{s.Members[i]}
			} else {
				one.Members = nil
			}
			if !l.held(ctx) {
				r.queue.Enqueue(one)
				continue
			}
			switch _, perr := r.inv.SettleNow(ctx, one); {
			case perr == nil:
				r.deferred.Add(1)
			case inventory.Unsettleable(perr):
				dropped, err = append(dropped, id), perr
			default:
				r.queue.Enqueue(one)
			}
		}
	}
	if len(dropped) == 0 {
		return 0
	}
	r.log.Warn("reconciler: deferred settle cannot be done until data is repaired; left to the expiry pass, which sets the parts aside after their deadline",
		"node", s.Node, "order", s.OrderID, "action", s.Action, "parts", dropped, "err", err)
	return 1
}

// resolve settles due parts, Settings.Workers at a time. A part that
// cannot be settled is set aside. It returns the failed steps and the
// parts that left the pending index's due range (progress).
func (r *Reconciler) resolve(ctx context.Context, due []inventory.PendingPart, l *lease) (failed, progress int) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	work := make(chan inventory.PendingPart)
	for range min(r.set.Workers, len(due)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range work {
				f, moved := r.resolveOne(ctx, p, l)
				mu.Lock()
				failed += f
				if moved {
					progress++
				}
				mu.Unlock()
			}
		}()
	}
	for _, p := range due {
		work <- p
	}
	close(work)
	wg.Wait()
	return failed, progress
}

// resolveOne settles one due part; moved reports whether it left the due
// range of the pending index.
func (r *Reconciler) resolveOne(ctx context.Context, p inventory.PendingPart, l *lease) (failed int, moved bool) {
	if !l.held(ctx) {
		return 0, false
	}
	res, err := r.inv.ResolveExpired(ctx, p)
	if err == nil {
		switch res {
		case inventory.Cancelled:
			r.cancelled.Add(1)
		case inventory.Confirmed:
			r.confirmed.Add(1)
		case inventory.Postponed:
			r.postponed.Add(1)
		}
		return 0, true
	}
	if res == inventory.Postponed {
		return 1, true // moved out of the way; the pass goes on
	}
	if !inventory.Unsettleable(err) {
		if ctx.Err() == nil {
			r.log.Warn("reconciler: settling an expired part", "node", p.Node, "part", p.PartID, "order", p.OrderID, "err", err)
		}
		return 1, false
	}
	if !l.held(ctx) {
		return 0, false
	}
	tries, aerr := r.inv.SetAside(ctx, p, err.Error(), r.set.StuckRetry, r.set.StuckRetryMax)
	if aerr != nil {
		r.log.Warn("reconciler: setting aside a part that cannot be settled", "node", p.Node, "part", p.PartID,
			"order", p.OrderID, "reason", err, "err", aerr)
		return 1, false
	}
	switch {
	case tries == 1:
		r.setAside.Add(1)
		r.log.Error("reconciler: part set aside, it cannot be settled until its data is repaired; retried by itself with backoff (shardis parts stuck / shardis parts retry)",
			"node", p.Node, "part", p.PartID, "order", p.OrderID, "reason", err)
	case tries > 1:
		r.log.Debug("reconciler: stuck part set aside again", "node", p.Node, "part", p.PartID, "times", tries, "reason", err)
	}
	return 0, true
}
