package cache

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
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

// replicas is how many copies of key Get reads and a fill stores now:
// Options.Replicas' answer, clamped to 1..MaxReplicas.
func (c *Cache) replicas(key string) int {
	if c.opts.Replicas == nil {
		return 1
	}
	return max(1, min(c.opts.Replicas(key), c.opts.MaxReplicas))
}

// copies returns the nodes and Redis keys of the copies Get reads and a
// fill stores now: the first replicas(key) of copiesUpTo's.
func (c *Cache) copies(key string) ([]*node.Node, []string) {
	return c.copiesUpTo(key, c.replicas(key))
}

// copiesUpTo returns the nodes of a key's first n copies and their Redis
// keys (copyKey): copy 0 is the key on its own node, copy i the first
// node of key#i's ring walk not used by an earlier copy. Where copy i
// sits depends on the earlier copies only, never on n, so the copies of
// any Replicas answer are the first ones of MaxReplicas' (those Set and
// Invalidate reach).
func (c *Cache) copiesUpTo(key string, n int) ([]*node.Node, []string) {
	if n <= 1 { // the common case: no allocation for the walk
		return []*node.Node{c.set.Nodes()[c.set.Ring().Home(key)]}, []string{c.copyKey(key, 0)}
	}
	nodes := make([]*node.Node, 0, n)
	names := make([]string, 0, n)
	used := map[*node.Node]bool{}
	for i := 0; i < n; i++ {
		at := key // where copy i goes: key#i's ring walk
		if i > 0 {
			at = key + "#" + strconv.Itoa(i)
		}
		for _, cand := range c.set.Candidates(at) {
			if !used[cand] {
				used[cand] = true
				nodes = append(nodes, cand)
				names = append(names, c.copyKey(key, i))
				break
			}
		}
	}
	return nodes, names
}

// copyKey is the Redis key of key's copy i: <prefix>k:<key> for copy 0,
// <prefix>k<i>:<key> for copy i > 0. Each copy number has a namespace of
// its own, so a copy of one key is never another key or another key's
// copy (the copies of "sku" are not the key "sku#1", whatever the ring
// does with either).
func (c *Cache) copyKey(key string, i int) string {
	if i == 0 {
		return c.prefix + "k:" + key
	}
	return c.prefix + "k" + strconv.Itoa(i) + ":" + key
}

// jittered is how long a copy of enc lives, drawn at random: a value
// TTL ± Jitter·TTL (uniform), a "not found" marker NegativeTTL less up to
// Jitter·NegativeTTL, never more (Options.NegativeTTL is how long a marker
// lives at most).
func (c *Cache) jittered(enc []byte) time.Duration {
	c.mu.Lock()
	r := c.rng.Float64()
	c.mu.Unlock()
	if isNegative(enc) {
		return time.Duration(float64(c.opts.NegativeTTL) * (1 - c.opts.Jitter*r))
	}
	return time.Duration(float64(c.opts.TTL) * (1 + c.opts.Jitter*(2*r-1)))
}

// valid reports whether b, a copy's string as read from Redis, is in the
// cache's encoding (a value or a "not found" marker). One that is not was
// written by something else: a corrupt copy, a miss the fill overwrites,
// as a copy of another type (WRONGTYPE).
func valid(b []byte) bool { return len(b) > 0 && (b[0] == kindValue || b[0] == kindNegative) }

// isNegative reports whether enc is a "not found" marker.
func isNegative(enc []byte) bool { return len(enc) > 0 && enc[0] == kindNegative }

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
// TTL, read in the same round trip: an L1 copy of a value read from Redis
// must not outlive the value in Redis. left is 0 when unknown (not asked,
// or the copy has no TTL), and negative when the copy expired as it was
// read (Redis answers GET in a key's last millisecond, where PTTL says 0,
// and PTTL says -2 when the key expired between the two): no L1 for it.
//
// A copy whose read failed is passed over for another. When none holds a
// value: a miss if one was missing, or held a key of another type
// (WRONGTYPE) or a string not in the cache's encoding (valid): not a value
// of this cache, so corrupt; the fill or a Set overwrites it; else the error reply a usable node gave on purpose
// (NOPERM …), not router.ErrUnavailable; else an error wrapping
// router.ErrUnavailable (no copy on a usable node, or none could serve).
// A caller that gave up gets ctx's error, named with the key, instead of
// router.ErrUnavailable, also when no copy was on a usable node to read
// (Get's doc: never router.ErrUnavailable once ctx ended).
func (c *Cache) readLeft(ctx context.Context, key string, withTTL bool) (val []byte, found bool, left time.Duration, err error) {
	nodes, names := c.copies(key)
	var down, reply error
	corrupt := false
	for _, i := range c.shuffle(len(nodes)) {
		n := nodes[i]
		if !n.Usable() {
			continue
		}
		b, left, err := readCopy(ctx, n, names[i], withTTL)
		switch {
		case err == nil && !valid(b): // not the cache's encoding: as WRONGTYPE
			corrupt = true
		case err == nil:
			c.stats.nodeReads(n.Name())
			return b, true, left, nil
		case err == redis.Nil:
			return nil, false, 0, nil
		case gaveUp(ctx):
			return nil, false, 0, fmt.Errorf("cache: key %q: %w", key, ctxErr(ctx))
		case isWrongType(err):
			corrupt = true
		case isReply(err):
			reply = fmt.Errorf("node %s: %w", n.Name(), err)
		default:
			down = err
		}
	}
	switch {
	case corrupt:
		return nil, false, 0, nil
	case reply != nil:
		return nil, false, 0, fmt.Errorf("cache: key %q: %w", key, reply)
	case gaveUp(ctx): // the caller's end, not the nodes': no copy was read for it
		return nil, false, 0, fmt.Errorf("cache: key %q: %w", key, ctxErr(ctx))
	case down == nil:
		down = errors.New("no copy on a usable node")
	}
	return nil, false, 0, fmt.Errorf("%w: cache key %q: %w", router.ErrUnavailable, key, down)
}

// readCopy reads the copy k on n, and with withTTL its remaining TTL
// (leftOf) in the same round trip. A missing copy is redis.Nil.
func readCopy(ctx context.Context, n *node.Node, k string, withTTL bool) ([]byte, time.Duration, error) {
	if !withTTL {
		b, err := n.Client().Get(ctx, k).Bytes()
		return b, 0, err
	}
	var get *redis.StringCmd
	var pttl *redis.DurationCmd
	_, err := n.Client().Pipelined(ctx, func(p redis.Pipeliner) error {
		get, pttl = p.Get(ctx, k), p.PTTL(ctx, k)
		return nil
	})
	if err != nil && err != redis.Nil {
		return nil, 0, err
	}
	b, err := get.Bytes()
	return b, leftOf(pttl.Val()), err
}

// isWrongType reports whether err is Redis's WRONGTYPE reply: the key
// holds a value of another type.
func isWrongType(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply) && strings.HasPrefix(reply.Error(), "WRONGTYPE")
}

// leftOf is readLeft's left for PTTL's answer d, as go-redis gives it:
// -1 (no TTL) unknown, 0 or -2 (expired) negative, else d.
func leftOf(d time.Duration) time.Duration {
	switch {
	case d > 0:
		return d
	case d == -1:
		return 0
	default:
		return -1
	}
}

// failed is the error of a command on n that failed with err (not
// redis.Nil), sent for a caller whose context is ctx, naming the node:
//   - the caller's context error, wrapped, when the caller gave up (its
//     cancellation or deadline does not count against the node);
//   - the error reply as it came when the node gave one on purpose
//     (isReply: a script error, WRONGTYPE, NOPERM, OOM …);
//   - otherwise an error wrapping router.ErrUnavailable and err: the node
//     cannot serve (node.CannotServe: unusable, unreachable, LOADING,
//     BUSY …) or the client could not send the command (a pool timeout).
func failed(ctx context.Context, n *node.Node, err error) error {
	switch {
	case gaveUp(ctx):
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("node %s: %w", n.Name(), err)
		}
		return fmt.Errorf("node %s: %w: %w", n.Name(), ctxErr(ctx), err)
	case isReply(err):
		return fmt.Errorf("node %s: %w", n.Name(), err)
	default:
		return fmt.Errorf("node %s: %w: %w", n.Name(), router.ErrUnavailable, err)
	}
}

// gaveUp reports whether ctx is canceled or past its deadline (checked
// against the clock too: go-redis sets a connection's deadline to the
// context's, so a read can time out a moment before ctx.Err() says so).
func gaveUp(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// ctxErr is ctx's error once gaveUp(ctx): context.DeadlineExceeded when
// the deadline passed before its timer fired.
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return context.DeadlineExceeded
}

// isReply reports whether err is an error reply the node gave on purpose,
// not one by which it says it cannot serve (node.CannotServe: LOADING,
// BUSY, MASTERDOWN) nor a refusal or failure on the way to it.
func isReply(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply) && !node.CannotServe(err)
}

// decode turns a stored value, valid (no copy in another encoding is
// read as a value: readLeft, readVersion), into Get's result.
func decode(b []byte) ([]byte, error) {
	if isNegative(b) {
		return nil, ErrNotFound
	}
	return b[1:], nil
}
