package tests

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
)

// TestKillRestartDefaultSettings is the acceptance test with the shipped
// health settings: heartbeat 500ms, timeout 300ms, backoff 500ms first.
func TestKillRestartDefaultSettings(t *testing.T) {
	t.Parallel()
	killRestart(t, config.Default().Health)
}

// TestKillRestartFastSettings runs the same scenario with short settings,
// so the bounds are tight.
func TestKillRestartFastSettings(t *testing.T) {
	t.Parallel()
	killRestart(t, fastHealth)
}

// killRestart kills -9 an AOF node, checks it is marked DOWN within
// heartbeat+timeout, that commands to it fail fast while DOWN, and that
// after a restart it is UP within one backoff step, with its data.
func killRestart(t *testing.T, h config.Health) {
	ctx := context.Background()
	srv := redistest.StartN(t, 2, redistest.Options{AOF: true})
	cfg := newConfig(t,
		map[string]string{"n1": srv[0].Addr(), "n2": srv[1].Addr()},
		map[string]config.Server{"stock": server(config.OnNodeDownFail, map[string][]string{"main": {"n1", "n2"}})},
		&h)
	r, ev := startRouter(t, cfg)
	waitUp(t, r, ev, "n1", "n2")

	set, err := r.Set("stock", "main")
	if err != nil {
		t.Fatal(err)
	}
	key := keysHomedOn(t, set, "n1", "stock", 1)[0]
	otherKey := keysHomedOn(t, set, "n2", "stock", 1)[0]
	c, err := r.Client("stock", "main", key)
	if err != nil {
		t.Fatalf("Client(%s) before kill: %v", key, err)
	}
	if err := c.Set(ctx, key, "before-kill", 0).Err(); err != nil {
		t.Fatalf("SET before kill: %v", err)
	}
	n1, err := r.Node("n1")
	if err != nil {
		t.Fatal(err)
	}
	inc := status(t, r, "n1").Incarnation
	if inc == "" {
		t.Fatal("n1 has no incarnation after the first probe")
	}

	// No state change since New: n1 must be UP until the kill.
	ev.none("n1", 0)
	ev.none("n2", 0)

	// 1. kill -9 → DOWN within heartbeat + timeout.
	lag := startLagMeter(t)
	killedAt := time.Now()
	srv[0].Kill()
	down := ev.wait("n1", false, 5*time.Second)
	detect := down.At.Sub(killedAt)
	bound := h.Heartbeat + h.Timeout + slack + lag.lag()
	t.Logf("DOWN detection: %s (bound %s = heartbeat %v + timeout %v + slack %v + this process's scheduling lag %s), probe error: %v",
		ms(detect), ms(bound), h.Heartbeat, h.Timeout, slack, ms(lag.lag()), down.Err)
	if detect > bound {
		t.Errorf("n1 marked DOWN %s after kill -9, want <= %s", ms(detect), ms(bound))
	}
	if down.Err == nil {
		t.Error("DOWN event without a probe error")
	}
	st := status(t, r, "n1")
	if st.State != node.StateDown || st.DownReason == nil {
		t.Errorf("status after kill: state %v reason %v, want down with a reason", st.State, st.DownReason)
	}

	// 2. While DOWN, commands fail fast: all but 2 calls of a loop of 100
	// under 5ms (an OS preemption can stretch a call or two on a loaded
	// machine), and a loop with more slow calls is retried up to twice; a
	// refusal that really waited (for a dial, a timeout, a probe) fails
	// every loop.
	fastLoops(t, "GET via the node's client", func() error {
		err := n1.Client().Get(ctx, key).Err()
		var nerr *node.Error
		if !errors.Is(err, node.ErrDown) || !errors.As(err, &nerr) || nerr.Node != "n1" || nerr.Addr != srv[0].Addr() {
			return fmt.Errorf("GET on DOWN node: err = %#v, want *node.Error naming n1 at %s wrapping node.ErrDown", err, srv[0].Addr())
		}
		return nil
	})
	fastLoops(t, "router.Client", func() error {
		_, err := r.Client("stock", "main", key)
		if !errors.Is(err, router.ErrUnavailable) || !errors.Is(err, node.ErrDown) {
			return fmt.Errorf("router.Client for key homed on DOWN node (policy fail): err = %v, want ErrUnavailable and node.ErrDown", err)
		}
		return nil
	})
	fastLoops(t, "TxPipelined via the node's client", func() error {
		cmds, err := n1.Client().TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Incr(ctx, key+":n")
			p.Get(ctx, key)
			return nil
		})
		if !errors.Is(err, node.ErrDown) {
			return fmt.Errorf("TxPipelined on DOWN node: err = %v, want node.ErrDown", err)
		}
		for _, cmd := range cmds {
			if !errors.Is(cmd.Err(), node.ErrDown) {
				return fmt.Errorf("pipelined %v on DOWN node: err = %v, want node.ErrDown", cmd.Args(), cmd.Err())
			}
		}
		return nil
	})
	// The other node is not affected.
	oc, err := r.Client("stock", "main", otherKey)
	if err != nil {
		t.Fatalf("key homed on UP node n2: %v", err)
	}
	if err := oc.Set(ctx, otherKey, "x", 0).Err(); err != nil {
		t.Fatalf("SET on UP node n2 while n1 is DOWN: %v", err)
	}

	// 3. Restart → UP within one backoff step of accepting connections.
	srv[0].Restart()
	lag.reset()
	restartedAt := time.Now()
	failed := status(t, r, "n1").FailedProbes
	up := ev.wait("n1", true, 15*time.Second)
	recovery := up.At.Sub(restartedAt)
	bound = backoffStep(h, failed) + slack + lag.lag()
	t.Logf("recovery: UP %s after redis-server accepted connections again (bound %s = backoff step after %d failed probes %s + slack + this process's scheduling lag %s)",
		ms(recovery), ms(bound), failed, ms(backoffStep(h, failed)), ms(lag.lag()))
	if recovery > bound {
		t.Errorf("n1 UP %s after restart, want <= %s", ms(recovery), ms(bound))
	}
	c, err = r.Client("stock", "main", key)
	if err != nil {
		t.Fatalf("router.Client after recovery: %v", err)
	}
	if got, err := c.Get(ctx, key).Result(); err != nil || got != "before-kill" {
		t.Errorf("GET %s after restart with AOF = %q, %v; want %q, nil", key, got, err, "before-kill")
	}
	if err := c.Set(ctx, key, "after-restart", 0).Err(); err != nil {
		t.Errorf("SET after recovery: %v", err)
	}
	st = status(t, r, "n1")
	if st.Incarnation != inc {
		t.Errorf("incarnation after restart with AOF = %q, want unchanged %q", st.Incarnation, inc)
	}
	if st.Breaker != "closed" || st.DownReason != nil || st.FailedProbes != 0 {
		t.Errorf("status after recovery = breaker %s, reason %v, failed probes %d; want closed, nil, 0",
			st.Breaker, st.DownReason, st.FailedProbes)
	}
}

// TestPolicyNextAndFail: keys homed on a dead node fall through to the next
// candidate under "next" and come home when it is back; under "fail" they
// never move and error with ErrUnavailable.
func TestPolicyNextAndFail(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.StartN(t, 3, redistest.Options{})
	all := []string{"n1", "n2", "n3"}
	cfg := newConfig(t,
		nodeAddrs(srv),
		map[string]config.Server{
			"cache": server(config.OnNodeDownNext, map[string][]string{"items": all, "solo": {"n2"}}),
			"stock": server(config.OnNodeDownFail, map[string][]string{"items": all}),
		}, &quickHealth)
	r, ev := startRouter(t, cfg)
	waitUp(t, r, ev, all...)
	directOf := map[string]*redis.Client{"n1": srv[0].Client(t), "n3": srv[2].Client(t)}

	cache, _ := r.Set("cache", "items")
	stock, _ := r.Set("stock", "items")
	ks := keys("k", 600)

	srv[1].Kill()
	ev.wait("n2", false, 5*time.Second)

	moved := 0
	for _, k := range ks {
		cands := cache.Candidates(k)
		want := cands[0]
		if want.Name() == "n2" {
			want = cands[1]
			moved++
		}
		got, err := cache.Pick(k)
		if err != nil {
			t.Fatalf("cache Pick(%s) with n2 DOWN, policy next: %v", k, err)
		}
		if got != want {
			t.Fatalf("cache Pick(%s) = %s, want %s (candidates %v)", k, got.Name(), want.Name(), names(cands))
		}
		if got.Name() == "n2" {
			continue
		}
		if cands[0].Name() == "n2" {
			// Writes land on the next candidate's server.
			c, err := r.Client("cache", "items", k)
			if err != nil {
				t.Fatalf("cache Client(%s): %v", k, err)
			}
			if err := c.Set(ctx, k, "fallback", 0).Err(); err != nil {
				t.Fatalf("SET %s on fallback %s: %v", k, got.Name(), err)
			}
			if v, err := directOf[got.Name()].Get(ctx, k).Result(); err != nil || v != "fallback" {
				t.Fatalf("GET %s directly on %s = %q, %v; want the fallback write", k, got.Name(), v, err)
			}
		}
	}
	t.Logf("policy next: %d of %d keys fell through from DOWN n2 to their next candidate", moved, len(ks))
	if moved == 0 {
		t.Fatal("no key homed on n2: test is vacuous")
	}

	if _, err := r.Pick("cache", "solo", "k:1"); !errors.Is(err, router.ErrUnavailable) || !errors.Is(err, node.ErrDown) {
		t.Errorf("policy next with the only node DOWN: err = %v, want ErrUnavailable and node.ErrDown", err)
	}

	failed := 0
	for _, k := range ks {
		home := stock.Candidates(k)[0]
		got, err := stock.Pick(k)
		if home.Name() == "n2" {
			failed++
			if !errors.Is(err, router.ErrUnavailable) || !errors.Is(err, node.ErrDown) {
				t.Fatalf("stock Pick(%s) homed on DOWN n2, policy fail: node %v, err %v; want ErrUnavailable and node.ErrDown", k, nodeName(got), err)
			}
			if got != nil {
				t.Fatalf("stock Pick(%s) returned node %s along with its error", k, got.Name())
			}
			if _, err := r.Client("stock", "items", k); !errors.Is(err, router.ErrUnavailable) {
				t.Fatalf("stock Client(%s): err = %v, want ErrUnavailable", k, err)
			}
			continue
		}
		if err != nil || got != home {
			t.Fatalf("stock Pick(%s) homed on UP %s = %v, %v", k, home.Name(), nodeName(got), err)
		}
	}
	t.Logf("policy fail: %d keys homed on DOWN n2 errored, none moved", failed)

	srv[1].Restart()
	ev.wait("n2", true, 5*time.Second)
	for _, k := range ks {
		for _, s := range []*router.Set{cache, stock} {
			got, err := s.Pick(k)
			if want := s.Candidates(k)[0]; err != nil || got != want {
				t.Fatalf("%s Pick(%s) after n2 came back = %v, %v; want home %s", s.Key(), k, nodeName(got), err, want.Name())
			}
		}
	}
}

func names(ns []*node.Node) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.Name()
	}
	return out
}

func nodeName(n *node.Node) string {
	if n == nil {
		return "<nil>"
	}
	return n.Name()
}

// TestBreakerOpenRouting: node failures on a node whose probes still pass
// open its breaker: policy fail refuses its keys with ErrBreakerOpen,
// policy next sends them to the next candidate, and once the open timeout
// passes a successful trial brings them home. The node is frozen for about
// one command timeout (the router's nodes use the 1s default) while the
// probe timeout is 3s, so probes stall but do not fail.
func TestBreakerOpenRouting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.StartN(t, 2, redistest.Options{})
	both := []string{"n1", "n2"}
	h := config.Health{Heartbeat: 100 * time.Millisecond, Timeout: 3 * time.Second,
		Backoff: []time.Duration{100 * time.Millisecond}}
	cfg := newConfig(t,
		map[string]string{"n1": srv[0].Addr(), "n2": srv[1].Addr()},
		map[string]config.Server{
			"stock": server(config.OnNodeDownFail, map[string][]string{"main": both}),
			"cache": server(config.OnNodeDownNext, map[string][]string{"main": both}),
		}, &h)
	cfg.Breaker = config.Breaker{Failures: 3, OpenTimeout: time.Second}
	// Three concurrent commands are three node failures only when each
	// has its own round trip: with auto-pipelining a failed batch counts
	// once (node/pipeline_test.go checks that).
	cfg.Pipeline.Enabled = false
	r, ev := startRouter(t, cfg)
	waitUp(t, r, ev, both...)
	n1, _ := r.Node("n1")
	stock, _ := r.Set("stock", "main")
	k := keysHomedOn(t, stock, "n1", "k", 1)[0]

	srv[0].Pause()
	errs := make(chan error, 3)
	for i := 0; i < 3; i++ {
		go func() { errs <- n1.Client().Get(ctx, k).Err() }()
	}
	for i := 0; i < 3; i++ {
		if err := <-errs; err == nil || !node.IsFailure(ctx, err) {
			t.Fatalf("GET on frozen n1: err = %v, want a node failure", err)
		}
	}
	openedAt := time.Now()
	st := status(t, r, "n1")
	if st.Breaker != "open" || st.State != node.StateUp {
		srv[0].Resume()
		t.Fatalf("n1 after 3 timeouts: breaker %s state %v (reason %v), want open, up", st.Breaker, st.State, st.DownReason)
	}
	_, err := stock.Pick(k)
	if !errors.Is(err, router.ErrUnavailable) || !errors.Is(err, node.ErrBreakerOpen) || errors.Is(err, node.ErrDown) {
		t.Errorf("policy fail, home breaker open: err = %v, want ErrUnavailable and ErrBreakerOpen", err)
	}
	if got, err := r.Pick("cache", "main", k); err != nil || got.Name() != "n2" {
		t.Errorf("policy next, home breaker open: %v, %v; want n2", nodeName(got), err)
	}
	start := time.Now()
	err = n1.Client().Get(ctx, k).Err()
	took := time.Since(start)
	t.Logf("command with breaker open refused in %v: %v", took, err)
	// refused before the network: far below the 1 s command timeout a
	// command to the frozen node would wait out (100 ms, not a few: a
	// goroutine of a loaded machine waits that long for a core)
	if !errors.Is(err, node.ErrBreakerOpen) || took >= 100*time.Millisecond {
		t.Errorf("command with breaker open: err %v after %v, want ErrBreakerOpen in < 100ms", err, took)
	}
	srv[0].Resume()

	// After the open timeout the trial goes through and closes the breaker.
	time.Sleep(time.Until(openedAt.Add(cfg.Breaker.OpenTimeout + 50*time.Millisecond)))
	c, err := r.Client("stock", "main", k)
	if err != nil {
		t.Fatalf("Client after the open timeout: %v", err)
	}
	if err := c.Set(ctx, k, "trial", 0).Err(); err != nil {
		t.Fatalf("trial command: %v", err)
	}
	if st := status(t, r, "n1"); st.Breaker != "closed" {
		t.Errorf("breaker after a successful trial = %s, want closed", st.Breaker)
	}
	if got, err := r.Pick("cache", "main", k); err != nil || got.Name() != "n1" {
		t.Errorf("policy next after the breaker closed: %v, %v; want home n1", nodeName(got), err)
	}
	ev.none("n1", 0)
	requireState(t, r, node.StateUp, both...)
}
