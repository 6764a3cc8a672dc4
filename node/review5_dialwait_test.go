package node_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
)

// dialWaitPaths are the ways a caller's command can need a new, checked
// connection: a command, a caller's pipeline and a script on the hooked
// client, and a command that rides the auto-pipeliner (its gated dialer).
// go-redis dials the pools' connections on a goroutine of its own and
// waits for them on the caller's context, so the check's own timeouts
// (dialcheck.go) never hold the caller. A subscription is not among them:
// go-redis dials a PubSub connection on the caller's goroutine, which
// then waits for the check (up to the command timeout).
var dialWaitPaths = []struct {
	name     string
	pipeline *redis.AutoPipelineOptions
	run      func(ctx context.Context, c *redis.Client) error
}{
	{"command", nil, func(ctx context.Context, c *redis.Client) error { return c.Set(ctx, "k", "v", 0).Err() }},
	{"pipeline", nil, func(ctx context.Context, c *redis.Client) error {
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, "k", "v", 0)
			p.Get(ctx, "k")
			return nil
		})
		return err
	}},
	{"script", nil, func(ctx context.Context, c *redis.Client) error {
		return c.Eval(ctx, "return redis.call('SET', KEYS[1], ARGV[1])", []string{"k"}, "v").Err()
	}},
	{"autopipelined", &redis.AutoPipelineOptions{}, func(ctx context.Context, c *redis.Client) error {
		return c.Set(ctx, "k", "v", 0).Err()
	}},
}

// A caller whose command needs a new connection to a node whose data must
// be kept (so the connection's stamp is read first, dialcheck.go) while
// the node is paused returns at its own deadline or cancel, with its
// context's error, not after the command timeout the stamp read waits
// for; and it is not counted as a node failure.
func TestDialCheckLeavesAtCallersDeadline(t *testing.T) {
	t.Parallel()
	for _, tc := range dialWaitPaths {
		for _, how := range []string{"deadline", "cancel"} {
			t.Run(tc.name+"/"+how, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				s := redistest.Start(t, redistest.Options{})
				admin := s.Client(t)
				var failures atomic.Int32
				opts := node.Options{Name: "n1", Addr: s.Addr(), Critical: true, CommandTimeout: 5 * time.Second,
					Pipeline: tc.pipeline, PipelineFrom: 1}
				n := usedNodeCounted(t, opts, admin, &failures)
				if err := tc.run(ctx, n.Client()); err != nil {
					t.Fatalf("on a current node: %v", err)
				}
				dropConns(t, admin)
				s.Pause()
				defer s.Resume()

				cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
				if how == "cancel" {
					cancel()
					cctx, cancel = context.WithCancel(ctx)
					time.AfterFunc(100*time.Millisecond, cancel)
				}
				defer cancel()
				start := time.Now()
				err := tc.run(cctx, n.Client())
				took := time.Since(start)
				t.Logf("%s/%s: returned after %v: %v", tc.name, how, took, err)
				if took > time.Second {
					t.Errorf("returned after %v, want within 1s of the caller's 100ms %s", took, how)
				}
				if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
					t.Errorf("err = %v, want the caller's context error", err)
				}
				if f := failures.Load(); f != 0 {
					t.Errorf("%d node failures recorded for a caller that gave up", f)
				}
			})
		}
	}
}
