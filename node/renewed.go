package node

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// renewed owns one replaceable go-redis client of the node: the hooked
// command client (clients, client.go), and the witness client (witness.go)
// and replica read client (ReadClient) that [Node.SetUp] renews with it
// for a Sentinel group. A failover client drops its pooled connections to a
// former master only when its own sentinel announces the switch
// (+switch-master, on one subscription that dies with that sentinel) or
// when it dials; a client whose connections stay healthy would otherwise
// keep writing marks to a demoted master that the sentinels have not
// converted yet (lost at its resync) and reading stale ones, and a
// replica read client would keep reading from the replica just promoted.
// The replaced client is closed once the commands still running on it
// have timed out, so a caller that fetched it just before is not cut off.
type renewed struct {
	n       *Node
	mk      func() *redis.Client
	closeFn func(*redis.Client) error // closes a client and what it owns; default Close
	cur     atomic.Pointer[clientRef] // nil until built (lazy); never nil once built
	mu      sync.Mutex
	old     map[*redis.Client]*time.Timer // guarded by mu; closed by their timer or by close
	done    bool                          // guarded by mu: closed
}

// newRenewed returns a renewed client built by mk: built now when eager,
// else on first get.
func newRenewed(n *Node, mk func() *redis.Client, eager bool) *renewed {
	r := &renewed{n: n, mk: mk, closeFn: (*redis.Client).Close, old: map[*redis.Client]*time.Timer{}}
	if eager {
		r.cur.Store(&clientRef{mk()})
	}
	return r
}

// get returns the current client, building it on first use; nil once
// closed (a client never built is not built after close).
func (r *renewed) get() *redis.Client {
	if p := r.cur.Load(); p != nil {
		return p.c
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.cur.Load(); p != nil {
		return p.c
	}
	if r.done {
		return nil
	}
	c := r.mk()
	r.cur.Store(&clientRef{c})
	return c
}

// renew replaces the current client, if one was built, by a fresh one
// (built outside the lock) and retires the old one: it is closed
// 2×CommandTimeout+1s later, once the commands still running on it have
// timed out. A client never built is left to its first get.
func (r *renewed) renew() {
	if r.cur.Load() == nil {
		return
	}
	fresh := r.mk()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		_ = r.closeFn(fresh)
		return
	}
	old := r.cur.Swap(&clientRef{fresh}).c
	r.old[old] = time.AfterFunc(2*r.n.opts.CommandTimeout+time.Second, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if _, ok := r.old[old]; ok {
			delete(r.old, old)
			_ = r.closeFn(old)
		}
	})
}

// close closes the current client and every retired one. Later gets
// return the closed client (commands fail with redis.ErrClosed), or nil
// when none was built.
func (r *renewed) close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done = true
	var errs []error
	if p := r.cur.Load(); p != nil {
		errs = append(errs, r.closeFn(p.c))
	}
	for old, t := range r.old {
		t.Stop()
		errs = append(errs, r.closeFn(old))
	}
	r.old = nil
	return errors.Join(errs...)
}
