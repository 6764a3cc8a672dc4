package cache_test

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/cache"
	"github.com/shardis/shardis/router"
)

// cancelOnGate cancels a context as the fill gate's SET NX PX is sent.
type cancelOnGate struct{ cancel context.CancelFunc }

func isGate(cmd redis.Cmder) bool { return cmd.Name() == "set" && len(cmd.Args()) > 3 }

func (h *cancelOnGate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *cancelOnGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if isGate(c) {
				h.cancel()
			}
		}
		return next(ctx, cmds)
	}
}
func (h *cancelOnGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isGate(cmd) {
			h.cancel()
		}
		return next(ctx, cmd)
	}
}

// A caller whose context ends while its miss takes the fill gate gets its
// context's error, not router.ErrUnavailable: the caller's cancellation
// does not count against the node (README), as at the read and the loader
// bucket. The gate's error was wrapped in router.ErrUnavailable ("gate on
// node n3: context canceled").
func TestCancelAtTheFillGateIsTheCallersError(t *testing.T) {
	e := newEnv(t, 1)
	c := e.caches(cache.Options{})[0]
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	for _, name := range []string{"n1", "n2", "n3"} {
		n, _ := e.rtrs[0].Node(name)
		n.Client().AddHook(&cancelOnGate{cancel: cancel})
	}
	_, err := c.Get(ctx, "miss", func(context.Context, string) ([]byte, error) { return []byte("v"), nil })
	if errors.Is(err, router.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Get canceled at the fill gate = %v, want an error wrapping context.Canceled, not router.ErrUnavailable", err)
	}
}
