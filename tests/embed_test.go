package tests

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/router"
)

// countingHook counts the commands and pipelines that pass through it.
type countingHook struct{ cmds atomic.Int64 }

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != "hello" && cmd.Name() != "client" {
			h.cmds.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.cmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// An embedder's router needs only the router's sections: no service, no
// inventory. Hooks given in router.Options fire on every node's client,
// also after the node was down and its client was rebuilt; the command
// timeout and pool size come from the configuration.
func TestEmbedRouterOnlyConfigHooksSurviveOutage(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	// A slow heartbeat and a slow first reconnect probe: the kill is found
	// by a command, and the next commands dial and fail before the probe
	// that a failed command schedules (after Backoff[0]) marks the node
	// DOWN; at 100ms a loaded machine's probe came first, no command had
	// dialed, and the client was (rightly) not rebuilt.
	h := quickHealth
	h.Heartbeat = 5 * time.Second
	h.Backoff = []time.Duration{time.Second, 200 * time.Millisecond}
	cfg := &config.Config{
		Nodes:    map[string]config.Node{"n1": {Addr: srv.Addr(), Weight: 1}},
		Servers:  map[string]config.Server{"cache": server(config.OnNodeDownFail, map[string][]string{"s": {"n1"}})},
		Health:   h,
		Breaker:  config.Breaker{Failures: 5, OpenTimeout: time.Second},
		Client:   config.Client{CommandTimeout: 700 * time.Millisecond, PoolSize: 3},
		Pipeline: config.Pipeline{Enabled: true, MaxBatch: 100},
	}
	hook := &countingHook{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := router.New(ctx, cfg, router.Options{KeepData: cfg.KeepData(), Logger: testLogger(t), Hooks: []redis.Hook{hook}})
	if err != nil {
		t.Fatalf("router.New with only nodes/servers/health/breaker/client/pipeline: %v", err)
	}
	defer r.Close()
	c, err := r.Client("cache", "s", "k")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Options().PoolSize; got != 3 {
		t.Errorf("node client pool size %d, want 3 (client.pool_size)", got)
	}
	if got := c.Options().ReadTimeout; got != 700*time.Millisecond {
		t.Errorf("node client read timeout %v, want 700ms (client.command_timeout)", got)
	}
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if hook.cmds.Load() == 0 {
		t.Fatal("the hook saw no command")
	}

	n, _ := r.Node("n1")
	old := n.Client()
	// Once the kill has closed the pooled connections, a command finds
	// them dead, dials, and fails to dial: that makes the node build a
	// fresh client when it comes back. On a loaded machine the first
	// command can instead fail on a pooled connection not yet seen closed,
	// and the probe it pulls forward marks the node DOWN before any
	// command dialed (the client is then rightly kept): the outage is
	// repeated until one of them rebuilds the client.
	for outage := 1; n.Client() == old; outage++ {
		if outage > 5 {
			t.Fatal("the node kept its client after 5 outages: the test does not exercise a rebuilt client")
		}
		srv.Kill()
		time.Sleep(100 * time.Millisecond)
		waitFor(t, 5*time.Second, "n1 DOWN", func() bool { _ = n.Client().Get(ctx, "k").Err(); return !n.Usable() })
		srv.Restart()
		waitFor(t, 10*time.Second, "n1 UP", func() bool { return n.Usable() })
	}
	before := hook.cmds.Load()
	c, err = r.Client("cache", "s", "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, "k").Err(); err != nil && err != redis.Nil {
		t.Fatalf("GET after the restart: %v", err)
	}
	if hook.cmds.Load() == before {
		t.Fatal("after the node came back, its (rebuilt) client no longer runs the embedder's hook")
	}
}

// waitFor polls cond until it holds or the limit passes.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
