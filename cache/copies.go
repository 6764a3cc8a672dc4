package cache

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
)

// Where a key's copies live and how one is read and written: the hot-key
// replicas (Options.Replicas), TTL jitter, failover between copies, and
// the one-byte encoding of a value or a negative entry.

// Value encoding: one type byte, then the value.
const (
	kindValue    = 'v'
	kindNegative = 'n'
)

// copies returns the nodes of a key's copies and their key names: copy 0
// is the key on its own node, copy i (key#i) the first node of key#i's
// ring walk not used by an earlier copy.
func (c *Cache) copies(key string) ([]*node.Node, []string) {
	n := 1
	if c.opts.Replicas != nil {
		n = c.opts.Replicas(key)
	}
	n = max(1, min(n, len(c.set.Nodes())))
	if n == 1 { // the common case: no allocation for the walk
		return []*node.Node{c.set.Nodes()[c.set.Ring().Home(key)]}, []string{key}
	}
	nodes := make([]*node.Node, 0, n)
	names := make([]string, 0, n)
	used := map[*node.Node]bool{}
	for i := 0; i < n; i++ {
		name := key
		if i > 0 {
			name = key + "#" + strconv.Itoa(i)
		}
		for _, cand := range c.set.Candidates(name) {
			if !used[cand] {
				used[cand] = true
				nodes = append(nodes, cand)
				names = append(names, name)
				break
			}
		}
	}
	return nodes, names
}

func (c *Cache) jittered(d time.Duration) time.Duration {
	c.mu.Lock()
	f := 1 + c.opts.Jitter*(2*c.rng.Float64()-1)
	c.mu.Unlock()
	return time.Duration(float64(d) * f)
}

var one = []int{0}

func (c *Cache) shuffle(n int) []int {
	if n == 1 {
		return one
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rng.Perm(n)
}

// read reads a key from a random usable copy, failing over to the others.
// found is false on a miss; err wraps router.ErrUnavailable when no copy
// could be read.
func (c *Cache) read(ctx context.Context, key string) (val []byte, found bool, err error) {
	val, found, _, err = c.readLeft(ctx, key, false)
	return val, found, err
}

// readLeft is read that, with withTTL, also returns the copy's remaining
// TTL (0 when unknown), read in the same round trip: an L1 copy of a value
// read from Redis must not outlive the value in Redis.
func (c *Cache) readLeft(ctx context.Context, key string, withTTL bool) (val []byte, found bool, left time.Duration, err error) {
	nodes, names := c.copies(key)
	var lastErr error
	for _, i := range c.shuffle(len(nodes)) {
		n := nodes[i]
		if !n.Usable() {
			continue
		}
		k := c.prefix + "k:" + names[i]
		var b []byte
		var err error
		if withTTL {
			var get *redis.StringCmd
			var pttl *redis.DurationCmd
			_, err = n.Client().Pipelined(ctx, func(p redis.Pipeliner) error {
				get, pttl = p.Get(ctx, k), p.PTTL(ctx, k)
				return nil
			})
			if err == nil || err == redis.Nil {
				b, err = get.Bytes()
				left = max(0, pttl.Val())
			}
		} else {
			b, err = n.Client().Get(ctx, k).Bytes()
		}
		if err == redis.Nil {
			return nil, false, 0, nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, false, 0, ctx.Err()
			}
			lastErr = err
			continue
		}
		c.stats.nodeReads(n.Name())
		return b, true, left, nil
	}
	if lastErr == nil {
		lastErr = errors.New("no copy on a usable node")
	}
	return nil, false, 0, fmt.Errorf("%w: cache key %q: %w", router.ErrUnavailable, key, lastErr)
}

// write stores an encoded value on every copy with its own jittered ttl.
// A copy on an unusable node is skipped; strict reports it as an error (it
// keeps its older value, and serves it again when the node is back).
func (c *Cache) write(ctx context.Context, key string, enc []byte, ttl time.Duration, strict bool) error {
	nodes, names := c.copies(key)
	var errs []error
	for i, n := range nodes {
		if !n.Usable() {
			if strict {
				errs = append(errs, fmt.Errorf("node %s: %w: copy not written", n.Name(), router.ErrUnavailable))
			}
			continue
		}
		if err := n.Client().Set(ctx, c.prefix+"k:"+names[i], enc, c.jittered(ttl)).Err(); err != nil {
			errs = append(errs, fmt.Errorf("node %s: %w", n.Name(), err))
		}
	}
	return errors.Join(errs...)
}

// decode turns a stored value into Get's result.
func decode(b []byte) ([]byte, error) {
	if len(b) > 0 && b[0] == kindNegative {
		return nil, ErrNotFound
	}
	if len(b) == 0 || b[0] != kindValue {
		return nil, fmt.Errorf("cache: stored value of unknown kind %q", b)
	}
	return b[1:], nil
}
