package node

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// clients owns the node's hooked go-redis client. go-redis stops dialing a
// pool after PoolSize dials in a row failed and then answers with the last
// dial error until a background redial, tried once a second, succeeds: a
// node that comes back would stay unreachable through that client for up
// to a second. So when the node goes DOWN→UP after dial failures, the
// client is replaced by a fresh one and the old one is closed once the
// commands still running on it have timed out.
type clients struct {
	n          *Node
	opts       redis.Options
	dialFailed atomic.Bool // set by the dial hook

	cur     atomic.Pointer[redis.Client] // swapped under mu, read lock-free
	mu      sync.Mutex
	retired map[*redis.Client]*time.Timer // guarded by mu; closed by their timer or by close
	closed  bool                          // guarded by mu
}

func newClients(n *Node, opts redis.Options) *clients {
	c := &clients{n: n, opts: opts, retired: map[*redis.Client]*time.Timer{}}
	c.cur.Store(c.build())
	return c
}

func (c *clients) build() *redis.Client {
	opts := c.opts
	cl := redis.NewClient(&opts)
	cl.AddHook(hook{c.n})
	return cl
}

func (c *clients) get() *redis.Client { return c.cur.Load() }

// renewIfDialFailed replaces the client when dials failed since the last
// renewal. Called on DOWN→UP.
func (c *clients) renewIfDialFailed() {
	if !c.dialFailed.Swap(false) {
		return
	}
	fresh := c.build()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		_ = fresh.Close()
		return
	}
	old := c.cur.Swap(fresh)
	c.retired[old] = time.AfterFunc(2*c.n.opts.CommandTimeout+time.Second, func() {
		c.mu.Lock()
		_, ok := c.retired[old]
		delete(c.retired, old)
		c.mu.Unlock()
		if ok {
			_ = old.Close()
		}
	})
	c.mu.Unlock()
}

func (c *clients) close() error {
	c.mu.Lock()
	c.closed = true
	errs := []error{c.cur.Load().Close()}
	for old, t := range c.retired {
		t.Stop()
		errs = append(errs, old.Close())
	}
	c.retired = nil
	c.mu.Unlock()
	return errors.Join(errs...)
}
