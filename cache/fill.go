package cache

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/node"
)

// fill runs one instance's fill of a miss: take the gate or wait for the
// holder's value. queue says whether a throttled miss goes to the
// backfill stream; gen is the L1 generation taken before the miss was read.
// It confirms its answer to run (flightGroup's doc) after each step that
// decides it: the read that found the copy (waitFill's, or versions'),
// the loader's call, each store its version check accepted.
func (c *Cache) fill(ctx context.Context, key string, loader Loader, queue bool, gen uint64, run flightRun) ([]byte, error) {
	nodes, _ := c.copies(key)
	gateNode := nodes[0]
	for _, n := range nodes {
		if n.Usable() {
			gateNode = n
			break
		}
	}
	token := strconv.FormatUint(rand.Uint64(), 36)
	gate := c.prefix + "g:" + key
	deadline := time.Now().Add(c.opts.FillWait)
	for { // take the gate, or wait for its holder's value (or for it to give up)
		ok, err := gateNode.Client().SetNX(ctx, gate, token, c.opts.FillLease).Result()
		if err != nil { // the caller's own end is its context's error, not the node's (failed)
			return nil, fmt.Errorf("cache: key %q: fill gate: %w", key, failed(ctx, gateNode, err))
		}
		if ok {
			break
		}
		enc, err := c.waitFill(ctx, key, gateNode, gate, deadline, run)
		if !errors.Is(err, errGateFree) {
			return enc, err
		}
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = releaseGate.Run(rctx, gateNode.Client(), []string{gate}, token).Err()
	}()
	// Another instance may have filled it between our read and the gate;
	// the copies' versions are read with it, before the loader reads the
	// row: a write after them wins (storeFill).
	mark := run.mark()
	filled, found, fv := c.versions(ctx, key)
	if found { // not for a Get that joined after the read: the copy may be gone (refill's round trip)
		run.confirm(mark)
		return filled, nil
	}
	if err := c.allowLoad(ctx, key, queue); err != nil {
		return nil, err
	}
	c.stats.fills.Add(1)
	mark = run.mark()
	val, err := loader(ctx, key)
	run.confirm(mark) // the row as it was when the loader read it: current for the Gets joined before
	var enc []byte
	switch {
	case errors.Is(err, ErrNotFound):
		enc = []byte{kindNegative}
	case err != nil:
		return nil, err
	default:
		enc = append([]byte{kindValue}, val...)
	}
	ttl, stored, werr := c.storeFill(ctx, key, enc, fv, run)
	if werr != nil {
		c.log.Warn("cache: storing a filled value", "key", key, "err", werr)
	}
	if c.l1 != nil && stored { // no longer than its shortest-lived copy in Redis
		c.l1.add(key, enc, min(c.l1TTL(enc), ttl), gen)
	}
	return enc, nil
}

var releaseGate = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// errGateFree is waitFill's answer when the gate's holder let it go (or
// lost it) without storing a value: its caller gave up, its loader
// failed, or a write came in between. The waiter then takes the gate
// itself rather than wait out FillWait for a value that will not come.
var errGateFree = errors.New("cache: the gate is free")

// waitFill polls the key while another instance fills it, until deadline
// (ErrFilling) or until the gate on gateNode is free with no value stored
// (errGateFree). A value it found is confirmed to run from its read.
func (c *Cache) waitFill(ctx context.Context, key string, gateNode *node.Node, gate string, deadline time.Time, run flightRun) ([]byte, error) {
	for {
		t := time.NewTimer(10 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		mark := run.mark()
		enc, found, err := c.read(ctx, key)
		if err != nil {
			return nil, err
		}
		if found {
			run.confirm(mark)
			return enc, nil
		}
		if n, err := gateNode.Client().Exists(ctx, gate).Result(); err == nil && n == 0 && time.Now().Before(deadline) {
			return nil, errGateFree
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: %q (waited %v)", ErrFilling, key, c.opts.FillWait)
		}
	}
}

// loadUncached calls the loader for a key none of whose copies is usable
// and returns its value encoded (ErrNotFound as the loader's error). Get
// runs it in the key's single flight, as a fill: nothing versions its
// answer, so it is confirmed to run (flightGroup's doc) by the loader's
// call alone, for the Gets that joined before it (one that joined while
// the loader ran may have started after a write the loader's read
// predates: it calls the loader again).
func (c *Cache) loadUncached(ctx context.Context, key string, loader Loader, run flightRun) ([]byte, error) {
	if err := c.allowLoad(ctx, key, false); err != nil {
		return nil, err
	}
	c.stats.fills.Add(1)
	mark := run.mark()
	val, err := loader(ctx, key)
	run.confirm(mark)
	if err != nil {
		return nil, err
	}
	return append([]byte{kindValue}, val...), nil
}
