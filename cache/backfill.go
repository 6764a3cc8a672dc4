package cache

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
)

// Asynchronous backfill: with Options.Backfill a miss refused by the
// loader rate limit is appended to a Redis stream (XADD) on the first
// usable node of the stream key's ring walk, and Backfill workers in any
// instance fill those keys later, within the same limit, through a
// consumer group: a key is acknowledged (XACK) once filled or found
// cached; one a worker died on, or whose fill failed or waits its turn,
// is claimed again by another worker after Options.FillLease
// (XAUTOCLAIM), and one whose loader failed at its backfillTries-th
// delivery is dropped.
//
// A miss queued while the stream's first node was down went to the next
// node of the walk. Workers read the first usable node, waiting there for
// new entries, and every backfillSweep the other nodes of the walk too
// (those whose stream holds entries), so such entries are filled once the
// first node is back rather than left there.

const backfillGroup = "shardis-fill"

// backfillTries is how many deliveries of a queued key a worker's failing
// loader gets: after the last, the entry is acknowledged and dropped (a
// later throttled miss of the key queues it again). A fill that waits its
// turn (waiting: throttled, the key's copy on a node that is unusable or
// could not serve, another instance filling it) leaves its entry pending
// without counting against it here, so a key is never dropped while its
// node is down without its loader ever failing; but each delivery counts
// in XPENDING, so a key that waited often gets fewer loader calls.
const backfillTries = 5

// backfillSweep is how often a Backfill worker also reads the streams
// on the walk's other nodes.
const backfillSweep = 2 * time.Second

func (c *Cache) streamKey() string { return c.prefix + "backfill" }

func (c *Cache) enqueueBackfill(ctx context.Context, key string) error {
	sk := c.streamKey()
	n := c.firstUsable(sk)
	if n == nil {
		return errors.New("no usable node keeps the backfill stream")
	}
	return n.Client().XAdd(ctx, &redis.XAddArgs{Stream: sk, MaxLen: 100000, Approx: true, Values: []any{"key", key}}).Err()
}

// Backfill fills queued misses with loader until ctx is done, as consumer
// name of the stream's group. Several may run, in several instances. It
// returns ctx's error.
func (c *Cache) Backfill(ctx context.Context, consumer string, loader Loader) error {
	sk := c.streamKey()
	var swept time.Time
	for ctx.Err() == nil {
		var first *node.Node
		var others []*node.Node
		for _, n := range c.set.Candidates(sk) {
			switch {
			case !n.Usable():
			case first == nil:
				first = n
			default:
				others = append(others, n)
			}
		}
		if first == nil {
			sleep(ctx, 200*time.Millisecond)
			continue
		}
		if time.Since(swept) >= backfillSweep {
			swept = time.Now()
			for _, n := range others {
				c.backfillFrom(ctx, n, consumer, loader, 0)
			}
		}
		if !c.backfillFrom(ctx, first, consumer, loader, 500*time.Millisecond) && ctx.Err() == nil {
			sleep(ctx, 200*time.Millisecond)
		}
	}
	return ctx.Err()
}

// backfillFrom fills up to ten entries of the stream on n: those a
// worker left pending for FillLease first, else new ones, waiting up to
// block for them (not at all for 0, and then only where the stream
// exists: a node that never held the first place keeps none). It reports
// false when the stream could not be read.
func (c *Cache) backfillFrom(ctx context.Context, n *node.Node, consumer string, loader Loader, block time.Duration) bool {
	sk := c.streamKey()
	cl := n.Client()
	if block == 0 {
		if k, err := cl.Exists(ctx, sk).Result(); err != nil || k == 0 {
			return err == nil
		}
	}
	if err := cl.XGroupCreateMkStream(ctx, sk, backfillGroup, "0").Err(); err != nil && !strings.Contains(err.Error(), "BUSYGROUP") {
		c.log.Warn("cache: backfill group", "node", n.Name(), "err", err)
		return false
	}
	msgs, _, err := cl.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: sk, Group: backfillGroup, Consumer: consumer,
		MinIdle: c.opts.FillLease, Start: "0-0", Count: 10}).Result()
	if err == nil && len(msgs) == 0 {
		args := &redis.XReadGroupArgs{Group: backfillGroup, Consumer: consumer, Streams: []string{sk, ">"}, Count: 10, Block: block}
		if block == 0 {
			args.Block = -1 // no BLOCK argument: answer at once
		}
		var streams []redis.XStream
		streams, err = cl.XReadGroup(ctx, args).Result()
		for _, s := range streams {
			msgs = append(msgs, s.Messages...)
		}
	}
	if err != nil && err != redis.Nil {
		if ctx.Err() == nil {
			c.log.Warn("cache: reading the backfill stream", "node", n.Name(), "err", err)
		}
		return false
	}
	for _, m := range msgs {
		key, _ := m.Values["key"].(string)
		if err := c.backfillOne(ctx, key, loader); err != nil {
			switch {
			case ctx.Err() != nil:
				continue // left pending: claimed again after FillLease
			case errors.Is(err, ErrThrottled) && !isLoaderFailure(err):
				sleep(ctx, 50*time.Millisecond)
				continue // left pending, not counted
			}
			c.log.Warn("cache: backfill", "key", key, "err", err)
			if waiting(err) || !c.lastTry(ctx, cl, m.ID) {
				continue // left pending: claimed again after FillLease
			}
			c.log.Warn("cache: backfill dropped after its last try", "key", key, "tries", backfillTries)
		}
		_ = cl.XAck(ctx, sk, backfillGroup, m.ID).Err()
	}
	return true
}

// loaderFailure is an error of the backfill's own loader (backfillOne
// marks it): what counts against a queued key's backfillTries, whatever
// it wraps.
type loaderFailure struct{ err error }

func (f *loaderFailure) Error() string { return f.err.Error() }
func (f *loaderFailure) Unwrap() error { return f.err }

func isLoaderFailure(err error) bool {
	var f *loaderFailure
	return errors.As(err, &f)
}

// waiting reports whether a backfill fill's error says it waits its turn
// rather than failed: throttled, the key's copy on a node that is
// unusable or could not serve (router.ErrUnavailable), or another instance
// filling it (ErrFilling). Such an error does not count against the
// entry's tries; a loader's own error always does.
func waiting(err error) bool {
	return !isLoaderFailure(err) &&
		(errors.Is(err, ErrThrottled) || errors.Is(err, router.ErrUnavailable) || errors.Is(err, ErrFilling))
}

// lastTry reports whether the stream entry id, whose fill just failed,
// has been delivered backfillTries times (XPENDING's delivery count).
func (c *Cache) lastTry(ctx context.Context, cl *redis.Client, id string) bool {
	p, err := cl.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: c.streamKey(), Group: backfillGroup,
		Start: id, End: id, Count: 1}).Result()
	return err == nil && len(p) == 1 && p[0].RetryCount >= backfillTries
}

// backfillOne fills key unless it is cached already. An error of loader
// itself comes back as a loaderFailure.
func (c *Cache) backfillOne(ctx context.Context, key string, loader Loader) error {
	if key == "" {
		return nil
	}
	var gen uint64
	if c.l1 != nil {
		gen = c.l1.generation()
	}
	if _, found, err := c.read(ctx, key); err != nil {
		return err
	} else if found {
		return nil
	}
	load := func(ctx context.Context, key string) ([]byte, error) {
		val, err := loader(ctx, key)
		if err != nil && !errors.Is(err, ErrNotFound) {
			err = &loaderFailure{err}
		}
		return val, err
	}
	_, err := c.flight.do(ctx, key, func(ctx context.Context, run flightRun) ([]byte, error) {
		return c.fill(ctx, key, load, false, gen, run)
	})
	return err
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
