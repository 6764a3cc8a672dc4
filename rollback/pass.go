package rollback

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
)

// LeaseKey is the key, on every inventory node, of the lease a background
// reconciler pass holds on that node (a string: the holder's token, with
// a TTL of Settings.Lease). Instances that find it held skip the node.
const LeaseKey = "inv:reconcile:lease"

// The lease scripts run outside the inventory's runner and prelude
// (inventory/lua.go). The runner is the inventory's own (unexported: it
// runs only the inventory's scripts on the inventory's keys), and the
// lease is this package's key, no inventory data: it needs neither the
// epoch check (a pass at a stale epoch that takes the lease meets its
// inventory scripts' SHARDIS_EPOCH refusals right after, and the lease
// expires by itself) nor a write sequence. Their replies are read as
// strictly as the runner's: anything but the integer 0 or 1 is an
// *inventory.ReplyError (leaseReply), and a lease whose take reply
// cannot be read is not used.

// takeScript takes the lease (KEYS[1]) for token ARGV[1] and ARGV[2] ms
// if no one holds it: 1 if taken, 0 if held. It is declared allow-oom, as
// the inventory's settle scripts are (inventory/oom.go): a pass over a
// node out of memory is what returns the stock held there, and the lease
// is one small key. A plain SET NX would be refused on such a node, and
// the pass with it.
var takeScript = redis.NewScript(`#!lua flags=allow-oom
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0
`)

// releaseScript deletes the lease only if the caller still holds it
// (allow-oom, as takeScript).
var releaseScript = redis.NewScript(`#!lua flags=allow-oom
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// leaseReply reads a lease script's reply on nodeName: the integer 1
// (true) or 0 (false); anything else is an *inventory.ReplyError naming
// script.
func leaseReply(nodeName, script string, v any) (bool, error) {
	if n, ok := v.(int64); ok && (n == 0 || n == 1) {
		return n == 1, nil
	}
	return false, &inventory.ReplyError{Node: nodeName, Script: script, At: "reply", Want: "the integer 0 or 1", Got: v}
}

func leaseToken() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// leased runs one pass over n if this reconciler gets n's lease, and
// releases it afterwards. It returns the number of failed steps.
func (r *Reconciler) leased(ctx context.Context, n *node.Node) int {
	v, err := takeScript.Run(ctx, n.Client(), []string{LeaseKey}, r.id, r.set.Lease.Milliseconds()).Result()
	var ok bool
	if err == nil {
		// A malformed reply: the lease may be ours; it expires by itself.
		ok, err = leaseReply(n.Name(), "lease-take", v)
	}
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("reconciler: taking the node lease", "node", n.Name(), "err", err)
		}
		return 1
	}
	if !ok {
		r.skipped.Add(1)
		return 0
	}
	defer func() {
		// A fresh context: the pass's may be cancelled by Close, and a
		// lease left behind would only delay other instances by Lease.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.set.Lease)
		defer cancel()
		v, err := releaseScript.Run(rctx, n.Client(), []string{LeaseKey}, r.id).Result()
		if err == nil {
			_, err = leaseReply(n.Name(), "lease-release", v)
		}
		if err != nil && rctx.Err() == nil {
			r.log.Warn("reconciler: releasing the node lease (it expires by itself)", "node", n.Name(), "err", err)
		}
	}()
	return r.node(ctx, n)
}

// node reconciles one node and returns the number of failed steps.
func (r *Reconciler) node(ctx context.Context, n *node.Node) int {
	r.passes.Add(1)
	r.auditStock(ctx, n)
	failed := 0
	for _, s := range r.queue.take(n.Name()) {
		if _, err := r.inv.SettleNow(ctx, s); err != nil {
			if inventory.Unsettleable(err) {
				failed += r.unsettleable(ctx, s, err)
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
	if k, err := r.inv.RetryDueStuck(ctx, n.Name(), r.set.Batch); err != nil {
		if ctx.Err() == nil {
			r.log.Warn("reconciler: retrying stuck parts", "node", n.Name(), "err", err)
		}
		failed++
	} else {
		r.retried.Add(int64(k))
	}
	for range 20 {
		due, err := r.inv.DueParts(ctx, n, r.set.Batch)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("reconciler: reading due parts", "node", n.Name(), "err", err)
			}
			return failed + 1
		}
		f, progress := r.resolve(ctx, due)
		failed += f
		if len(due) < r.set.Batch || progress == 0 || ctx.Err() != nil {
			break
		}
	}
	if _, err := r.inv.ConvergeLimits(ctx, n.Name()); err != nil {
		if ctx.Err() == nil {
			r.log.Warn("reconciler: finishing per-user limit changes", "node", n.Name(), "err", err)
		}
		failed++
	}
	if r.nodeN[n.Name()].Add(1)%int64(r.set.TrimEvery) == 0 {
		k, err := r.inv.TrimRedoLog(ctx, n.Name(), r.set.TrimAge, 200)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("reconciler: trimming the redo log", "node", n.Name(), "err", err)
			}
			failed++
		}
		r.trimmed.Add(int64(k))
	}
	return failed
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
func (r *Reconciler) unsettleable(ctx context.Context, s inventory.Settle, err error) int {
	var dropped []string
	if len(s.PartIDs) == 1 {
		dropped = s.PartIDs
	} else {
		for _, id := range s.PartIDs {
			one := s
			one.PartIDs = []string{id}
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
func (r *Reconciler) resolve(ctx context.Context, due []inventory.PendingPart) (failed, progress int) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	work := make(chan inventory.PendingPart)
	for range min(r.set.Workers, len(due)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range work {
				f, moved := r.resolveOne(ctx, p)
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
func (r *Reconciler) resolveOne(ctx context.Context, p inventory.PendingPart) (failed int, moved bool) {
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
