package cache

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
)

// L1 invalidation over Redis pub/sub: Set and Invalidate publish the key
// on the route's channel on one node; every instance subscribes on every
// node of the route (so a publish on any node reaches it) and drops the
// key from its L1. Whenever a subscription is made (again), breaks or goes
// silent (session), the instance drops its whole L1: messages published
// meanwhile are lost.

func (c *Cache) channel() string { return c.prefix + "inv" }

// invalidateL1 drops key from this instance's L1 and publishes it for the
// others, on every usable node of the key's copies up to MaxReplicas (the
// copies mark reaches): an instance whose subscription on one of them is
// down (its path to that node is cut) has read its L1 copy from another
// copy's node, maybe one its Replicas answered for and this one's does not
// now, and hears it there. With no copy's node usable it publishes on the
// first usable node of the route. A publish that failed is an error naming
// the key and the node (failed: router.ErrUnavailable when the node could
// not serve it, as when no node of the route is usable): that node's
// subscribers were not told, and an instance that heard none of the
// publishes keeps its L1 copy until L1TTL or until its subscription
// breaks.
func (c *Cache) invalidateL1(ctx context.Context, key string) error {
	if c.l1 != nil {
		c.l1.remove(key)
	}
	nodes, _ := c.copiesUpTo(key, c.opts.MaxReplicas)
	var pubs []*node.Node
	for _, n := range nodes {
		if n.Usable() {
			pubs = append(pubs, n)
		}
	}
	if len(pubs) == 0 {
		for _, n := range c.set.Nodes() {
			if n.Usable() {
				pubs = append(pubs, n)
				break
			}
		}
	}
	if len(pubs) == 0 {
		return fmt.Errorf("cache: invalidating %q: %w: no usable node to publish on", key, router.ErrUnavailable)
	}
	errs := make([]error, len(pubs))
	each(len(pubs), func(i int) {
		if err := pubs[i].Client().Publish(ctx, c.channel(), key).Err(); err != nil {
			errs[i] = fmt.Errorf("cache: invalidating %q: publish: %w", key, failed(ctx, pubs[i], err))
		}
	})
	return errors.Join(errs...)
}

// subscriber keeps one subscription per node of the route.
type subscriber struct {
	c      *Cache
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

func startSubscriber(c *Cache) *subscriber {
	ctx, cancel := context.WithCancel(context.Background())
	s := &subscriber{c: c, cancel: cancel}
	for _, n := range c.set.Nodes() {
		s.wg.Add(1)
		go s.loop(ctx, n)
	}
	return s
}

func (s *subscriber) close() {
	s.once.Do(func() {
		s.cancel()
		s.wg.Wait()
	})
}

// loop subscribes on n until ctx ends, again after every break (and when
// the node's client is replaced after an outage).
func (s *subscriber) loop(ctx context.Context, n *node.Node) {
	defer s.wg.Done()
	for ctx.Err() == nil {
		if n.Usable() {
			s.session(ctx, n)
			s.c.l1.purge()
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// A session PINGs its connection after every subscriberPoll without a
// message, and ends (dropping L1) when it heard nothing, not even a PONG,
// for subscriberSilence: a connection the path dropped silently (no error,
// no close, e.g. a NAT that forgot it) would otherwise lose every
// invalidation while looking healthy.
const (
	subscriberPoll    = 500 * time.Millisecond
	subscriberSilence = 3 * time.Second
)

func (s *subscriber) session(ctx context.Context, n *node.Node) {
	cl := n.Client()
	ps := cl.Subscribe(ctx, s.c.channel())
	defer ps.Close()
	heard := time.Now()
	for {
		msg, err := ps.ReceiveTimeout(ctx, subscriberPoll)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && ctx.Err() == nil && n.Client() == cl && n.Usable() {
				if time.Since(heard) < subscriberSilence {
					if err = ps.Ping(ctx); err == nil {
						continue
					}
				} else {
					err = fmt.Errorf("nothing heard for %v, not even a PONG", time.Since(heard).Round(time.Millisecond))
				}
			}
			if ctx.Err() == nil {
				s.c.log.Debug("cache: invalidation subscription broke; L1 dropped", "node", n.Name(), "err", err)
			}
			return
		}
		heard = time.Now()
		switch m := msg.(type) {
		case *redis.Subscription:
			s.c.l1.purge() // (re)subscribed: anything published before is lost to us
		case *redis.Message:
			s.c.l1.remove(m.Payload)
			s.c.stats.invalidations.Add(1)
		}
	}
}
