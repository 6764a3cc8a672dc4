package cache

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Asynchronous backfill: with Options.Backfill a miss refused by the
// loader rate limit is appended to a Redis stream (XADD), and Backfill
// workers in any instance fill those keys later, within the same limit,
// through a consumer group: a key is acknowledged (XACK) once filled or
// found cached; one a worker died on is claimed again by another worker
// after Options.FillLease (XAUTOCLAIM).

const backfillGroup = "shardis-fill"

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
	for ctx.Err() == nil {
		n := c.firstUsable(sk)
		if n == nil {
			sleep(ctx, 200*time.Millisecond)
			continue
		}
		cl := n.Client()
		if err := cl.XGroupCreateMkStream(ctx, sk, backfillGroup, "0").Err(); err != nil && !strings.Contains(err.Error(), "BUSYGROUP") {
			c.log.Warn("cache: backfill group", "err", err)
			sleep(ctx, 200*time.Millisecond)
			continue
		}
		msgs, _, err := cl.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: sk, Group: backfillGroup, Consumer: consumer,
			MinIdle: c.opts.FillLease, Start: "0-0", Count: 10}).Result()
		if err == nil && len(msgs) == 0 {
			var streams []redis.XStream
			streams, err = cl.XReadGroup(ctx, &redis.XReadGroupArgs{Group: backfillGroup, Consumer: consumer,
				Streams: []string{sk, ">"}, Count: 10, Block: 500 * time.Millisecond}).Result()
			for _, s := range streams {
				msgs = append(msgs, s.Messages...)
			}
		}
		if err != nil && err != redis.Nil {
			if ctx.Err() == nil {
				c.log.Warn("cache: reading the backfill stream", "err", err)
				sleep(ctx, 200*time.Millisecond)
			}
			continue
		}
		for _, m := range msgs {
			key, _ := m.Values["key"].(string)
			if err := c.backfillOne(ctx, key, loader); err != nil {
				if !errors.Is(err, ErrThrottled) && ctx.Err() == nil {
					c.log.Warn("cache: backfill", "key", key, "err", err)
				}
				if errors.Is(err, ErrThrottled) {
					sleep(ctx, 50*time.Millisecond)
				}
				continue // left pending: claimed again after FillLease
			}
			_ = cl.XAck(ctx, sk, backfillGroup, m.ID).Err()
		}
	}
	return ctx.Err()
}

// backfillOne fills key unless it is cached already.
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
	enc, err := c.flight.do(ctx, key, func(ctx context.Context) ([]byte, error) { return c.fill(ctx, key, loader, false, gen) })
	if err != nil {
		return err
	}
	if _, err := decode(enc); err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("cache: backfill of %q: %w", key, err)
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
