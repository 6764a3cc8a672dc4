package node

import (
	"errors"
	"sync"
	"sync/atomic"

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
	n  *Node
	mk func() *redis.Client // a new unhooked client (node.factory)
	// mkGated, when set, builds a pipeliner's inner client with the node's
	// batch gate as its Limiter (gate.go), which then needs no hook; nil
	// for a Sentinel group (go-redis's failover client takes no Limiter):
	// its inner clients get the node's hook instead.
	mkGated    func() *redis.Client
	dialFailed atomic.Bool // set by the dial hook or the gated dialer

	cur     *renewed                          // the current client and the replaced ones (renewed.go)
	innerMu sync.Mutex                        // guards inner
	inner   map[*redis.Client][]*redis.Client // a client's pipeliner clients
}

func newClients(n *Node, mk, mkGated func() *redis.Client) *clients {
	c := &clients{n: n, mk: mk, mkGated: mkGated, inner: map[*redis.Client][]*redis.Client{}}
	c.cur = newRenewed(n, c.build, true)
	c.cur.closeFn = c.closeClient
	return c
}

// build returns a new hooked client. With auto-pipelining on, the client's
// outermost hook hands commands to a pipeliner built on a second, inner
// client that has no hook but the node's batch gate (or, for a Sentinel
// group, only the node's hook): the pipeliner runs some commands through
// its client's process hooks itself, which must not lead back into the
// redirect.
func (c *clients) build() *redis.Client {
	cl := c.mk()
	for _, h := range c.n.opts.Hooks {
		cl.AddHook(h)
	}
	if c.n.opts.Pipeline == nil {
		cl.AddHook(hook{c.n})
		return cl
	}
	p := &pipeliner{n: c.n, from: int64(c.n.opts.PipelineFrom), busyFrom: int64(c.n.opts.BusyFrom)}
	cl.AddHook(p) // outermost: pipelined commands are admitted as batches by the inner client's gate
	cl.AddHook(hook{c.n})
	ap, inner := c.pipeliner(c.n.opts.Pipeline)
	if ap == nil {
		return cl
	}
	p.ap.Store(&pipelinerRef{ap})
	inners := []*redis.Client{inner}
	if o := c.n.opts.BusyPipeline; o != nil {
		if busy, in := c.pipeliner(o); busy != nil {
			p.busyBatch = int64(o.MaxBatchSize)
			if p.busyBatch <= 0 {
				p.busyBatch = int64(redis.DefaultAutoPipelineOptions().MaxBatchSize)
			}
			p.busy.Store(&pipelinerRef{busy})
			inners = append(inners, in)
		}
	}
	c.innerMu.Lock()
	c.inner[cl] = inners
	c.innerMu.Unlock()
	return cl
}

// pipeliner returns a go-redis auto-pipeliner (its deferred face) with
// options o on a new inner client, gated by the node's batch gate (or
// hooked with only the node's hook), and that client; nil and nil, logged,
// when go-redis refuses the options.
func (c *clients) pipeliner(o *redis.AutoPipelineOptions) (*redis.AutoPipeliner, *redis.Client) {
	var inner *redis.Client
	if c.mkGated != nil {
		inner = c.mkGated()
	} else {
		inner = c.mk()
		inner.AddHook(hook{c.n})
	}
	cfg := *o
	ap, err := inner.AsyncAutoPipelineWithOptions(&cfg)
	if err != nil {
		c.n.log.Error("auto-pipelining off: bad pipeline options", "err", err)
		_ = inner.Close()
		return nil, nil
	}
	return ap, inner
}

// closeClient closes cl and its pipeliner clients.
func (c *clients) closeClient(cl *redis.Client) error {
	c.innerMu.Lock()
	inners := c.inner[cl]
	delete(c.inner, cl)
	c.innerMu.Unlock()
	err := cl.Close()
	for _, in := range inners {
		err = errors.Join(err, in.Close())
	}
	return err
}

func (c *clients) get() *redis.Client { return c.cur.get() }

// clientRef and pipelinerRef hold a go-redis pointer for an atomic.Pointer.
// atomic.Pointer[redis.Client] would be instantiated again by every package
// that compiles node's types, and an instantiation whose type argument is a
// struct with embedded method sets makes the compiler write wrappers for
// the methods it promotes (redis.Client's ~740: 1,478 functions, ~4 s of
// CPU per compile). A struct with one named field has no methods to promote.
type clientRef struct{ c *redis.Client }

// pipelinerRef: see clientRef.
type pipelinerRef struct{ p *redis.AutoPipeliner }

// dialed records the outcome of one dial of the node's clients (the
// hook's DialHook, the gated dialer): a failed dial makes the next
// DOWN→UP renew the client.
func (c *clients) dialed(err error) {
	if err != nil {
		c.dialFailed.Store(true)
	}
}

// renew replaces the client when dials failed since the last renewal, or
// always when force is set (a Sentinel group, whose master may have
// changed). Called on DOWN→UP.
func (c *clients) renew(force bool) {
	if !c.dialFailed.Swap(false) && !force {
		return
	}
	c.cur.renew()
}

// close closes the current client and the replaced ones, with their
// pipeliner clients.
func (c *clients) close() error { return c.cur.close() }
