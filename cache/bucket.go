package cache

import (
	"context"
	"fmt"
	"math"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/node"
)

// The loader rate limit: a token bucket kept in Redis (seed 000 §2.3), so
// every instance draws from the same bucket. It lives on the first usable
// node of its key's ring walk; when that node is down the next one keeps a
// fresh bucket (the limit holds per bucket, and starts full there).

// maxLoaderBurst bounds Options.LoaderBurst's default: far above any real
// loader rate, and exact as a Lua number.
const maxLoaderBurst = math.MaxInt32

// bucketScript takes one token. KEYS: 1 bucket hash. ARGV: 1 rate per
// second, 2 burst. Returns 1 (allowed) or 0.
var bucketScript = redis.NewScript(`
local rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local b = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(b[1]) or burst
local ts = tonumber(b[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - ts) * rate / 1000)
local ok = 0
if tokens >= 1 then
  tokens = tokens - 1
  ok = 1
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', now)
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
return ok
`)

// firstUsable returns the first usable node of key's ring walk.
func (c *Cache) firstUsable(key string) *node.Node {
	for _, n := range c.set.Candidates(key) {
		if n.Usable() {
			return n
		}
	}
	return nil
}

// allowLoad takes a token for one loader call, or returns ErrThrottled
// (wrapping the bucket's error too when the bucket could not be read or no
// usable node keeps it: the limit fails closed), or ctx's error, named
// with the key, when ctx ended first (checked before anything else, with
// or without a rate limit: no loader is called for a caller that gave up,
// and its end is not a throttle). With queue, every throttled miss is
// queued for the backfiller, whatever refused it (the stream is a key of
// its own, on its own node: throttled).
func (c *Cache) allowLoad(ctx context.Context, key string, queue bool) error {
	if gaveUp(ctx) { // no loader call for a caller that gave up: not a throttle, no token taken
		return fmt.Errorf("cache: key %q: %w", key, ctxErr(ctx))
	}
	if c.opts.LoaderRate <= 0 {
		return nil
	}
	bk := c.prefix + "bucket"
	n := c.firstUsable(bk)
	if n == nil {
		return c.throttled(ctx, key, queue, fmt.Errorf("%w: key %q: no usable node keeps the loader bucket", ErrThrottled, key))
	}
	ok, err := bucketScript.Run(ctx, n.Client(), []string{bk}, c.opts.LoaderRate, c.opts.LoaderBurst).Int()
	switch {
	case err != nil && gaveUp(ctx): // the caller gave up: not a throttle
		return fmt.Errorf("cache: key %q: %w", key, ctxErr(ctx))
	case err != nil:
		return c.throttled(ctx, key, queue, fmt.Errorf("%w: key %q: loader bucket on node %s: %w", ErrThrottled, key, n.Name(), err))
	case ok == 1:
		return nil
	}
	return c.throttled(ctx, key, queue, fmt.Errorf("%w: key %q (%.0f loads/s)", ErrThrottled, key, c.opts.LoaderRate))
}

// throttled counts a miss the loader rate limit refused with err, queues
// it for the backfiller when queue is set (a failure to queue is logged),
// and returns err.
func (c *Cache) throttled(ctx context.Context, key string, queue bool, err error) error {
	c.stats.throttled.Add(1)
	if queue {
		if qerr := c.enqueueBackfill(ctx, key); qerr != nil {
			c.log.Warn("cache: queuing a throttled miss for backfill", "key", key, "err", qerr)
		}
	}
	return err
}
