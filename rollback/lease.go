package rollback

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
)

// LeaseKey is the key, on every inventory node, of the lease a background
// reconciler pass holds on that node (a string: the holder's token, with
// a TTL of Settings.Lease, renewed while the pass runs). Instances that
// find it held skip the node; a pass that finds it held by another
// instance mid-way stops.
const LeaseKey = "inv:reconcile:lease"

// The lease scripts run outside the inventory's runner and prelude
// (inventory/lua.go, script_run.go). The runner is the inventory's own (unexported: it
// runs only the inventory's scripts on the inventory's keys), and the
// lease is this package's key, no inventory data: it needs neither the
// epoch check (a pass at a stale epoch that takes the lease meets its
// inventory scripts' SHARDIS_EPOCH refusals right after, and the lease
// expires by itself) nor a write sequence. Their replies are read as
// strictly as the runner's: anything but the integer 0 or 1 is an
// *inventory.ReplyError (leaseReply), and a lease whose take reply
// cannot be read is not used.
//
// The lease is not a fence: the inventory's scripts do not check it, so a
// pass that acts right after losing it (between its last check and a
// write) still works the node beside the new holder. That costs repeated
// work, never a part settled twice: each settle is fenced by the part's
// state.

// holdScript takes or renews the lease (KEYS[1]) for token ARGV[1] and
// ARGV[2] ms: 1 when it is the token's now (it was free, or the token's
// already: its TTL starts again), 0 when another token holds it. A lease
// found with the taker's own token at the start of a pass is one its
// previous pass left (a release that failed, a renewal that landed after
// it): a reconciler runs one pass per node at a time. It is declared
// allow-oom, as the inventory's settle scripts are (inventory/oom.go): a
// pass over a node out of memory is what returns the stock held there,
// and the lease is one small key. A plain SET NX would be refused on such
// a node, and the pass with it.
var holdScript = redis.NewScript(`#!lua flags=allow-oom
local v = redis.call('GET', KEYS[1])
if v and v ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
`)

// releaseScript deletes the lease only if the caller still holds it
// (allow-oom, as holdScript).
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

// errLeaseLost is the cause a pass's context is cancelled with when its
// node's lease is lost mid-pass.
var errLeaseLost = errors.New("rollback: the node lease was lost mid-pass")

// lease is one background pass's hold on its node's lease. The pass
// checks it (held) before each step that changes the node; a goroutine
// (keep) renews it every Lease/3. A nil *lease is no lease (RunOnce):
// always held.
type lease struct {
	r      *Reconciler
	n      *node.Node
	cancel context.CancelCauseFunc // stops the pass

	mu sync.Mutex // one renewal at a time; guards until and lost
	// until is when the lease runs out on the node at the earliest, on
	// this process's monotonic clock (a step of its wall clock does not
	// move it): the time the last take or renewal that answered 1 was
	// sent, plus Lease.
	until time.Time
	lost  bool
}

// renew takes or renews the lease (holdScript) under l.mu and reports
// whether it is this reconciler's now; until moves on when it is.
func (l *lease) renew(ctx context.Context, script string) (bool, error) {
	sent := time.Now()
	v, err := holdScript.Run(ctx, l.n.Client(), []string{LeaseKey}, l.r.id, l.r.set.Lease.Milliseconds()).Result()
	if err != nil {
		return false, err
	}
	ok, err := leaseReply(l.n.Name(), script, v)
	if ok {
		l.until = sent.Add(l.r.set.Lease)
	}
	return ok, err
}

// held reports whether the pass may take its next step on the node: the
// lease was confirmed less than Lease ago, or is confirmed now. When it
// is not (another instance holds it, or the node did not answer), the
// lease is lost: the pass is stopped (its context cancelled) and false
// returned from then on.
func (l *lease) held(ctx context.Context) bool {
	if l == nil {
		return true
	}
	if ctx.Err() != nil {
		return false // the pass is stopping: Close, or the lease lost
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost {
		return false
	}
	if time.Now().Before(l.until) {
		return true
	}
	ok, err := l.renew(ctx, "lease-renew")
	if !ok {
		l.lose(ctx, err)
	}
	return ok
}

// keep renews the lease every Lease/3 until stop is closed or ctx ends;
// it stops the pass when the node says another instance holds the lease.
// A renewal that fails otherwise is left to the next one (or to held,
// once until has passed).
func (l *lease) keep(ctx context.Context, stop <-chan struct{}) {
	t := time.NewTicker(max(l.r.set.Lease/3, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		l.mu.Lock()
		ok, err := l.renew(ctx, "lease-renew")
		if !ok && err == nil {
			l.lose(ctx, nil)
		}
		lost := l.lost
		l.mu.Unlock()
		if lost {
			return
		}
	}
}

// lose marks the lease lost and stops the pass (l.mu held); err is why
// it could not be confirmed (nil: another instance holds it).
func (l *lease) lose(ctx context.Context, err error) {
	if l.lost || ctx.Err() != nil { // lost already, or stopped by Close
		return
	}
	l.lost = true
	l.r.log.Warn("reconciler: node lease lost mid-pass (another instance holds it, or it could not be renewed in time); pass stopped",
		"node", l.n.Name(), "err", err)
	l.cancel(errLeaseLost)
}

// wasLost reports whether the lease was lost during the pass.
func (l *lease) wasLost() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

// leased runs one pass over n if this reconciler gets n's lease, keeps
// the lease while the pass runs, and releases it afterwards. It returns
// the number of failed steps (a lease lost mid-pass is one).
func (r *Reconciler) leased(ctx context.Context, n *node.Node) int {
	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	l := &lease{r: r, n: n, cancel: cancel}
	l.mu.Lock()
	ok, err := l.renew(pctx, "lease-take") // a malformed reply: the lease may be ours; it expires by itself
	l.mu.Unlock()
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
	stop, kept := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(kept)
		l.keep(pctx, stop)
	}()
	failed := r.node(pctx, n, l)
	close(stop)
	<-kept // no renewal after the release
	r.release(ctx, n)
	if l.wasLost() {
		failed++
	}
	return failed
}

// release gives n's lease back if this reconciler still holds it.
func (r *Reconciler) release(ctx context.Context, n *node.Node) {
	// A fresh context: the pass's may be cancelled by Close, and a lease
	// left behind would only delay other instances by Lease.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.set.Lease)
	defer cancel()
	v, err := releaseScript.Run(rctx, n.Client(), []string{LeaseKey}, r.id).Result()
	if err == nil {
		_, err = leaseReply(n.Name(), "lease-release", v)
	}
	if err != nil && rctx.Err() == nil {
		r.log.Warn("reconciler: releasing the node lease (it expires by itself)", "node", n.Name(), "err", err)
	}
}
