package node_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
)

// failFast is the bound for a command refused without waiting on the
// network: below any timeout a refused command could otherwise wait out
// (these tests' probe and command timeouts are 200 ms and more), far above what
// scheduling adds on a machine busy with other test packages (the worst
// call of 100 took 14–23 ms at load 18 in a clean-clone make test, where
// 5 ms, the bound before, failed TestSentinelNodeFollowsFailover).
const failFast = 100 * time.Millisecond

// fastLoops runs call 100 times and requires every call to succeed and to
// take less than failFast. If some call was slower, the whole loop is run
// again, up to 3 loops: one OS preemption on a loaded machine can stretch
// any call, but a call that waits for the network is slow in every loop.
func fastLoops(t *testing.T, what string, call func() error) {
	t.Helper()
	runtime.GC() // keep a collection triggered by earlier garbage out of the loop
	var maxes []time.Duration
	for attempt := 0; attempt < 3; attempt++ {
		var worst time.Duration
		for i := 0; i < 100; i++ {
			start := time.Now()
			err := call()
			worst = max(worst, time.Since(start))
			if err != nil {
				t.Fatalf("%s, call %d: %v", what, i, err)
			}
		}
		maxes = append(maxes, worst)
		if worst < failFast {
			t.Logf("fail-fast %s: max of 100 calls %v (loops: %v)", what, worst, maxes)
			return
		}
	}
	t.Errorf("%s: max of 100 calls was >= %v in each of 3 loops (%v), want < %v", what, failFast, maxes, failFast)
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// newNode builds a node (closed at test end) with a t.Log-backed logger.
// failures, if non-nil, counts OnFailure calls.
func newNode(t *testing.T, opts node.Options, failures *atomic.Int32) *node.Node {
	t.Helper()
	opts.Logger = slog.New(slog.NewTextHandler(tWriter{t}, nil))
	if failures != nil {
		opts.OnFailure = func() { failures.Add(1) }
	}
	n, err := node.New(opts)
	if err != nil {
		t.Fatalf("node.New: %v", err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return n
}

// deadAddr is a loopback address nobody listens on.
func deadAddr(t *testing.T) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(redistest.FreePort(t)))
}

func TestNewRequiresNameAndAddr(t *testing.T) {
	t.Parallel()
	for _, o := range []node.Options{{}, {Name: "n1"}, {Addr: "127.0.0.1:1"}} {
		if n, err := node.New(o); err == nil {
			n.Close()
			t.Errorf("New(%+v) = nil error, want one", o)
		}
	}
}

// A node starts DOWN and refuses every command at once, without dialing.
func TestNewNodeIsDownAndRefusesAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	addr := deadAddr(t)
	n := newNode(t, node.Options{Name: "n1", Addr: addr}, nil)
	if n.State() != node.StateDown || n.Usable() {
		t.Fatalf("new node: state %v usable %v, want down, false", n.State(), n.Usable())
	}
	if n.DownReason() == nil {
		t.Error("new node: DownReason = nil, want a reason")
	}
	fastLoops(t, "GET on a DOWN node", func() error {
		err := n.Client().Get(ctx, "k").Err()
		var nerr *node.Error
		if !errors.Is(err, node.ErrDown) || !errors.As(err, &nerr) || nerr.Node != "n1" || nerr.Addr != addr {
			return fmt.Errorf("err = %v, want *node.Error{n1, %s} wrapping ErrDown", err, addr)
		}
		return nil
	})
	cmds, err := n.Client().Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "a", 1, 0)
		p.Incr(ctx, "b")
		return nil
	})
	if !errors.Is(err, node.ErrDown) || len(cmds) != 2 {
		t.Fatalf("pipeline on DOWN node: %d cmds, err %v; want 2, ErrDown", len(cmds), err)
	}
	for _, c := range cmds {
		if !errors.Is(c.Err(), node.ErrDown) {
			t.Errorf("pipelined %v: err = %v, want ErrDown", c.Args(), c.Err())
		}
	}

	reason := errors.New("maintenance window 42")
	n.SetDown(reason)
	if err := n.Client().Ping(ctx).Err(); !errors.Is(err, node.ErrDown) || !strings.Contains(err.Error(), "maintenance window 42") {
		t.Errorf("PING after SetDown(reason): err = %v, want ErrDown mentioning the reason", err)
	}
}

func TestSetUpSetDownReportChanges(t *testing.T) {
	t.Parallel()
	n := newNode(t, node.Options{Name: "n1", Addr: deadAddr(t)}, nil)
	if !n.SetUp() || n.SetUp() {
		t.Error("SetUp twice: want true then false")
	}
	if n.State() != node.StateUp || n.DownReason() != nil || !n.Usable() || n.BreakerState() != "closed" {
		t.Errorf("after SetUp: state %v reason %v usable %v breaker %s", n.State(), n.DownReason(), n.Usable(), n.BreakerState())
	}
	reason := errors.New("probe failed")
	if !n.SetDown(reason) || n.SetDown(reason) {
		t.Error("SetDown twice: want true then false")
	}
	if n.State() != node.StateDown || !errors.Is(n.DownReason(), reason) || n.Usable() {
		t.Errorf("after SetDown: state %v reason %v usable %v", n.State(), n.DownReason(), n.Usable())
	}
}

func TestSetRouteEnabled(t *testing.T) {
	t.Parallel()
	a := node.RouteKey{Server: "product", Route: "clothes"}
	b := node.RouteKey{Server: "product", Route: "electronics"}
	n := newNode(t, node.Options{Name: "n1", Addr: deadAddr(t), Routes: []node.RouteKey{a, b}}, nil)

	unknown := node.RouteKey{Server: "product", Route: "toys"}
	err := n.SetRouteEnabled(unknown, false)
	if !errors.Is(err, node.ErrUnknownRoute) {
		t.Errorf("SetRouteEnabled(%s) = %v, want ErrUnknownRoute", unknown, err)
	}
	if n.RouteEnabled(unknown) {
		t.Errorf("RouteEnabled(%s) for an unknown route = true", unknown)
	}
	if !n.RouteEnabled(a) || !n.RouteEnabled(b) {
		t.Fatal("routes do not start enabled")
	}
	if err := n.SetRouteEnabled(a, false); err != nil {
		t.Fatalf("SetRouteEnabled(%s, false): %v", a, err)
	}
	if n.RouteEnabled(a) || !n.RouteEnabled(b) {
		t.Errorf("after draining %s: enabled %v/%v, want false/true", a, n.RouteEnabled(a), n.RouteEnabled(b))
	}
	if got := n.Routes(); len(got) != 2 || got[a] || !got[b] {
		t.Errorf("Routes() = %v, want {%s:false %s:true}", got, a, b)
	}
	if err := n.SetRouteEnabled(a, true); err != nil || !n.RouteEnabled(a) {
		t.Errorf("re-enabling %s: err %v enabled %v", a, err, n.RouteEnabled(a))
	}
}

// Probe stamps a fresh node with its name and an incarnation, keeps it on
// later probes, and changes no state itself.
func TestProbeStampsFreshNode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.Start(t, redistest.Options{})
	rc := s.Client(t)
	n := newNode(t, node.Options{Name: "n1", Addr: s.Addr()}, nil)
	if n.Incarnation() != "" {
		t.Errorf("Incarnation before any probe = %q, want empty", n.Incarnation())
	}
	if err := n.Probe(ctx); err != nil {
		t.Fatalf("Probe of a fresh node: %v", err)
	}
	if n.State() != node.StateDown {
		t.Error("Probe changed the node's state; the scheduler is supposed to")
	}
	stamp, err := rc.HGetAll(ctx, node.StampKey).Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stamp: %v", stamp)
	if stamp["name"] != "n1" || stamp["incarnation"] == "" || stamp["incarnation"] != n.Incarnation() {
		t.Errorf("HGETALL %s = %v, want name n1 and incarnation %q", node.StampKey, stamp, n.Incarnation())
	}
	if ts, err := strconv.ParseInt(stamp["stamped_at"], 10, 64); err != nil || time.Since(time.UnixMilli(ts)) > time.Minute {
		t.Errorf("stamped_at = %q, want a recent unix ms time", stamp["stamped_at"])
	}
	inc := n.Incarnation()
	if err := n.Probe(ctx); err != nil || n.Incarnation() != inc {
		t.Errorf("second Probe: err %v, incarnation %q → %q; want nil, unchanged", err, inc, n.Incarnation())
	}

	// Another node configured on the same address is refused.
	other := newNode(t, node.Options{Name: "n2", Addr: s.Addr()}, nil)
	err = other.Probe(ctx)
	if !errors.Is(err, node.ErrIdentity) || !strings.Contains(err.Error(), `"n1"`) || !strings.Contains(err.Error(), `"n2"`) {
		t.Errorf("Probe of n2 on n1's server: err = %v, want ErrIdentity naming n1 and n2", err)
	}
	if got, _ := rc.HGet(ctx, node.StampKey, "name").Result(); got != "n1" {
		t.Errorf("stamp name after the refused probe = %q, want n1 (untouched)", got)
	}
}

// A probe of a port nobody listens on fails at once, not after the timeout.
func TestProbeUnreachableFailsFast(t *testing.T) {
	t.Parallel()
	// Timeouts far above the bound below: only a refused connection is
	// that fast, however loaded the machine.
	n := newNode(t, node.Options{Name: "n1", Addr: deadAddr(t), ProbeTimeout: 5 * time.Second, DialTimeout: 5 * time.Second}, nil)
	for i := 0; i < 3; i++ {
		start := time.Now()
		err := n.Probe(context.Background())
		took := time.Since(start)
		t.Logf("probe %d of a closed port: %v after %v", i, err, took)
		if err == nil {
			t.Fatal("Probe of a closed port succeeded")
		}
		var nerr *node.Error
		if !errors.As(err, &nerr) || nerr.Node != "n1" {
			t.Errorf("Probe error %#v is not a *node.Error naming n1", err)
		}
		if errors.Is(err, node.ErrIdentity) {
			t.Errorf("Probe of a closed port: %v, want a connection error, not ErrIdentity", err)
		}
		if took > time.Second {
			t.Errorf("Probe of a closed port took %v, want < 1s (connection refused; the timeouts are 5s)", took)
		}
	}
}

// After the node's process comes back, the very next probe must succeed:
// the health scheduler's backoff is the only delay the design allows.
func TestProbeSucceedsRightAfterRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.Start(t, redistest.Options{AOF: true})
	n := newNode(t, node.Options{Name: "n1", Addr: s.Addr(), ProbeTimeout: 200 * time.Millisecond}, nil)
	if err := n.Probe(ctx); err != nil {
		t.Fatalf("first Probe: %v", err)
	}
	inc := n.Incarnation()
	s.Kill()
	for i := 0; i < 3; i++ {
		if err := n.Probe(ctx); err == nil {
			t.Fatal("Probe of a killed node succeeded")
		}
	}
	s.Restart()
	start := time.Now()
	err := n.Probe(ctx)
	if err != nil {
		// Measure how long the probe keeps failing, for the report.
		for err != nil && time.Since(start) < 3*time.Second {
			time.Sleep(10 * time.Millisecond)
			err = n.Probe(ctx)
		}
		t.Fatalf("first Probe after the server is back failed; probes kept failing for %v", time.Since(start))
	}
	if n.Incarnation() != inc {
		t.Errorf("incarnation after AOF restart = %q, want %q", n.Incarnation(), inc)
	}
}

// Commands of an UP node keep working across a restart of its process:
// stale pooled connections are replaced, not reported as failures.
func TestClientSurvivesRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.Start(t, redistest.Options{AOF: true})
	var failures atomic.Int32
	n := newNode(t, node.Options{Name: "n1", Addr: s.Addr()}, &failures)
	n.SetUp()
	// Fill the pool with a few connections.
	for i := 0; i < 5; i++ {
		if err := n.Client().Set(ctx, "k"+strconv.Itoa(i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	s.Kill()
	n.SetDown(errors.New("killed"))
	s.Restart()
	n.SetUp()
	for i := 0; i < 5; i++ {
		if v, err := n.Client().Get(ctx, "k"+strconv.Itoa(i)).Int(); err != nil || v != i {
			t.Errorf("GET k%d after restart = %d, %v; want %d", i, v, err, i)
		}
	}
	if f := failures.Load(); f != 0 {
		t.Errorf("OnFailure called %d times after restart, want 0", f)
	}
}

// Commands that time out on a frozen server open the breaker after
// BreakerFailures; then commands fail at once with ErrBreakerOpen until the
// open timeout passes and a trial succeeds.
func TestBreakerOpensAndRecovers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.Start(t, redistest.Options{})
	var failures atomic.Int32
	// The healthy node's commands must not time out on a busy machine
	// (250ms), and the open breaker must outlast the fail-fast loops.
	const openTimeout = time.Second
	n := newNode(t, node.Options{
		Name: "n1", Addr: s.Addr(),
		BreakerFailures: 3, BreakerOpenTimeout: openTimeout, CommandTimeout: 250 * time.Millisecond,
	}, &failures)
	n.SetUp()
	if err := n.Client().Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET on a healthy node: %v", err)
	}

	s.Pause()
	for i := 1; i <= 3; i++ {
		start := time.Now()
		err := n.Client().Get(ctx, "k").Err()
		took := time.Since(start)
		t.Logf("command %d on frozen server: %v after %v (breaker %s)", i, err, took, n.BreakerState())
		if err == nil || errors.Is(err, node.ErrBreakerOpen) || !node.IsFailure(ctx, err) {
			t.Fatalf("command %d on frozen server: err = %v, want a timeout counted as a node failure", i, err)
		}
		want := "closed"
		if i == 3 {
			want = "open"
		}
		if got := n.BreakerState(); got != want {
			t.Fatalf("breaker after %d failures = %s, want %s", i, got, want)
		}
	}
	if f := failures.Load(); f != 3 {
		t.Errorf("OnFailure called %d times, want 3", f)
	}
	if n.Usable() {
		t.Error("Usable() = true with the breaker open")
	}
	if n.State() != node.StateUp {
		t.Error("the breaker changed the node state; only probes do")
	}
	fastLoops(t, "GET with the breaker open", func() error {
		err := n.Client().Get(ctx, "k").Err()
		var nerr *node.Error
		if !errors.Is(err, node.ErrBreakerOpen) || !errors.As(err, &nerr) || nerr.Node != "n1" {
			return fmt.Errorf("err = %v, want *node.Error wrapping ErrBreakerOpen", err)
		}
		return nil
	})
	if f := failures.Load(); f != 3 {
		t.Errorf("refusals counted as failures: OnFailure called %d times, want 3", f)
	}

	// A failing half-open trial opens the breaker again.
	time.Sleep(openTimeout + 50*time.Millisecond)
	if !n.Usable() {
		t.Error("Usable() = false after the open timeout, want true (the trial must be let through)")
	}
	if err := n.Client().Get(ctx, "k").Err(); err == nil || errors.Is(err, node.ErrBreakerOpen) {
		t.Fatalf("trial on frozen server: err = %v, want a timeout", err)
	}
	if got := n.BreakerState(); got != "open" {
		t.Fatalf("breaker after a failed trial = %s, want open", got)
	}

	s.Resume()
	time.Sleep(openTimeout + 50*time.Millisecond)
	if got, err := n.Client().Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("trial after Resume: %q, %v; want v, nil", got, err)
	}
	if got := n.BreakerState(); got != "closed" {
		t.Errorf("breaker after a successful trial = %s, want closed", got)
	}
	if !n.Usable() {
		t.Error("Usable() = false after the breaker closed")
	}
}

// Each command counts once, also when it has to open a new connection (the
// connection handshake must not be admitted and recorded on its own), and
// the half-open trial after a timeout runs on a new connection.
func TestBreakerCountsCommandsOnNewConnectionsOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.Start(t, redistest.Options{})
	var failures atomic.Int32
	const openTimeout = 200 * time.Millisecond
	n := newNode(t, node.Options{
		Name: "n1", Addr: s.Addr(),
		BreakerFailures: 2, BreakerOpenTimeout: openTimeout, CommandTimeout: 250 * time.Millisecond,
	}, &failures)
	n.SetUp()
	s.Pause()
	// No connection exists yet: the first command dials and handshakes.
	if err := n.Client().Get(ctx, "k").Err(); err == nil {
		t.Fatal("GET on frozen server succeeded")
	}
	if got, f := n.BreakerState(), failures.Load(); got != "closed" || f != 1 {
		t.Errorf("after 1 failed command on a new connection: breaker %s, OnFailure calls %d; want closed, 1", got, f)
	}
	if err := n.Client().Get(ctx, "k").Err(); err == nil {
		t.Fatal("GET on frozen server succeeded")
	}
	if got := n.BreakerState(); got != "open" {
		t.Fatalf("after 2 failed commands: breaker %s, want open", got)
	}
	s.Resume()
	time.Sleep(openTimeout + 50*time.Millisecond)
	// The timed-out connections were discarded: the trial dials anew.
	if err := n.Client().Set(ctx, "k", "trial", 0).Err(); err != nil {
		t.Fatalf("half-open trial on a new connection: %v", err)
	}
	if got := n.BreakerState(); got != "closed" {
		t.Errorf("breaker after a successful trial = %s, want closed", got)
	}
	if v, err := s.Client(t).Get(ctx, "k").Result(); err != nil || v != "trial" {
		t.Errorf("server has k = %q, %v; want the trial's write", v, err)
	}
}

// SetUp after a DOWN period starts with a closed breaker.
func TestSetUpResetsBreaker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.Start(t, redistest.Options{})
	n := newNode(t, node.Options{
		Name: "n1", Addr: s.Addr(),
		BreakerFailures: 1, BreakerOpenTimeout: time.Hour, CommandTimeout: 250 * time.Millisecond,
	}, nil)
	n.SetUp()
	s.Pause()
	_ = n.Client().Ping(ctx).Err()
	s.Resume()
	if got := n.BreakerState(); got != "open" {
		t.Fatalf("breaker after one failure with BreakerFailures 1 = %s, want open", got)
	}
	n.SetDown(errors.New("probe failed"))
	n.SetUp()
	if got := n.BreakerState(); got != "closed" || !n.Usable() {
		t.Fatalf("after DOWN→UP: breaker %s usable %v, want closed, true", got, n.Usable())
	}
	if err := n.Client().Ping(ctx).Err(); err != nil {
		t.Errorf("PING after DOWN→UP: %v", err)
	}
}

// redis.Nil, error replies and the caller's own cancellation or deadline
// say nothing about the node: they never open the breaker.
func TestNonFailuresKeepBreakerClosed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.Start(t, redistest.Options{})
	var failures atomic.Int32
	n := newNode(t, node.Options{
		Name: "n1", Addr: s.Addr(),
		BreakerFailures: 3, BreakerOpenTimeout: time.Minute, CommandTimeout: 100 * time.Millisecond,
	}, &failures)
	n.SetUp()
	c := n.Client()
	if err := c.LPush(ctx, "list", "x").Err(); err != nil {
		t.Fatal(err)
	}
	errScript := redis.NewScript(`return redis.error_reply('my error')`)

	check := func(what string, run func() error, ok func(error) bool) {
		t.Helper()
		for i := 0; i < 10; i++ {
			if err := run(); !ok(err) {
				t.Fatalf("%s #%d: unexpected err %v", what, i, err)
			}
		}
		if got := n.BreakerState(); got != "closed" {
			t.Fatalf("after 10× %s: breaker %s, want closed", what, got)
		}
		if f := failures.Load(); f != 0 {
			t.Fatalf("after 10× %s: OnFailure called %d times, want 0", what, f)
		}
	}
	check("GET of a missing key (redis.Nil)",
		func() error { return c.Get(ctx, "missing").Err() },
		func(err error) bool { return errors.Is(err, redis.Nil) })
	check("script error_reply",
		func() error { return errScript.Run(ctx, c, nil).Err() },
		func(err error) bool { return err != nil && strings.Contains(err.Error(), "my error") })
	check("WRONGTYPE reply",
		func() error { return c.Get(ctx, "list").Err() },
		func(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "WRONGTYPE") })
	check("pre-canceled context",
		func() error {
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			return c.Get(cctx, "k").Err()
		},
		func(err error) bool { return errors.Is(err, context.Canceled) })

	// The server hangs; the caller gives up before the command timeout.
	s.Pause()
	defer s.Resume()
	check("context canceled mid-command",
		func() error {
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			time.AfterFunc(20*time.Millisecond, cancel)
			return c.Get(cctx, "k").Err()
		},
		func(err error) bool { return err != nil })
	check("caller's own deadline",
		func() error {
			cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			defer cancel()
			return c.Get(cctx, "k").Err()
		},
		func(err error) bool { return err != nil })
}

// replyErr is an error the server replied with (go-redis's redis.Error).
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

func TestIsFailure(t *testing.T) {
	t.Parallel()
	live := context.Background()
	canceled, cancel := context.WithCancel(live)
	cancel()
	expired, cancel2 := context.WithDeadline(live, time.Now().Add(-time.Second))
	defer cancel2()
	netErr := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
	refusal := func(cause error) error {
		return &node.Error{Node: "n1", Addr: "127.0.0.1:1", Err: fmt.Errorf("%w: probe failed", cause)}
	}

	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"nil", live, nil, false},
		{"redis.Nil", live, redis.Nil, false},
		{"wrapped redis.Nil", live, fmt.Errorf("get: %w", redis.Nil), false},
		{"ErrDown refusal", live, refusal(node.ErrDown), false},
		{"ErrBreakerOpen refusal", live, refusal(node.ErrBreakerOpen), false},
		{"script error reply", live, replyErr("my error"), false},
		{"ERR reply", live, replyErr("ERR unknown command"), false},
		{"WRONGTYPE reply", live, replyErr("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{"NOSCRIPT reply", live, replyErr("NOSCRIPT No matching script"), false},
		{"OOM reply", live, replyErr("OOM command not allowed when used memory > 'maxmemory'"), false},
		{"LOADING reply", live, replyErr("LOADING Redis is loading the dataset in memory"), true},
		{"BUSY reply", live, replyErr("BUSY Redis is busy running a script"), true},
		{"MASTERDOWN reply", live, replyErr("MASTERDOWN Link with MASTER is down"), true},
		{"wrapped LOADING reply", live, fmt.Errorf("x: %w", replyErr("LOADING")), true},
		{"network error", live, netErr, true},
		{"EOF", live, io.EOF, true},
		{"unexpected EOF", live, io.ErrUnexpectedEOF, true},
		{"our own timeout", live, &net.OpError{Op: "read", Net: "tcp", Err: timeoutErr{}}, true},
		{"pool timeout", live, errors.New("redis: connection pool timeout"), true},
		{"caller canceled, network error", canceled, netErr, false},
		{"caller canceled, context.Canceled", canceled, context.Canceled, false},
		{"context.Canceled from a child context", live, fmt.Errorf("x: %w", context.Canceled), false},
		{"caller deadline passed, timeout", expired, &net.OpError{Op: "read", Net: "tcp", Err: timeoutErr{}}, false},
		{"caller deadline passed, DeadlineExceeded", expired, context.DeadlineExceeded, false},
	} {
		if got := node.IsFailure(tc.ctx, tc.err); got != tc.want {
			t.Errorf("IsFailure(%s: %v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// CannotServe: what the data path meets when a node is unusable, against
// what a node answered on purpose.
func TestCannotServe(t *testing.T) {
	t.Parallel()
	refusal := func(cause error) error {
		return &node.Error{Node: "n1", Addr: "127.0.0.1:1", Err: fmt.Errorf("%w: x", cause)}
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"redis.Nil", redis.Nil, false},
		{"script error reply", replyErr("my error"), false},
		{"WRONGTYPE reply", fmt.Errorf("drain: %w", replyErr("WRONGTYPE Operation against a key")), false},
		{"OOM reply", replyErr("OOM command not allowed"), false},
		{"plain error", errors.New("unexpected reply [1]"), false},
		{"BUSY reply", fmt.Errorf("drain: %w", replyErr("BUSY Redis is busy running a script")), true},
		{"LOADING reply", replyErr("LOADING Redis is loading the dataset in memory"), true},
		{"MASTERDOWN reply", replyErr("MASTERDOWN Link with MASTER is down"), true},
		{"network error", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}, true},
		{"EOF", io.EOF, true},
		{"ErrDown", refusal(node.ErrDown), true},
		{"ErrDataLost", fmt.Errorf("drain: %w", refusal(node.ErrDataLost)), true},
		{"ErrRolledBack", refusal(node.ErrRolledBack), true},
		{"ErrIdentity", refusal(node.ErrIdentity), true},
		{"ErrNotMaster", refusal(node.ErrNotMaster), true},
		{"ErrNoMaster", fmt.Errorf("%w (m): redis: nil", node.ErrNoMaster), true},
		{"bare ErrDown", fmt.Errorf("x: %w", node.ErrDown), true},
		{"bare ErrHeldBack", node.ErrHeldBack, true},
	} {
		if got := node.CannotServe(tc.err); got != tc.want {
			t.Errorf("CannotServe(%s: %v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// Dial failures while a dead node still counted as UP must not keep the
// client from dialing once the node is back. go-redis (v9.23) stops dialing
// once PoolSize dials in a row failed and only a background redial, retried
// once a second, resets that; so the node renews its client on DOWN→UP.
// The scheduler's part is played by hand: a failed probe marks the node
// DOWN, a successful one after the restart marks it UP.
func TestClientDialsRightAfterRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.Start(t, redistest.Options{AOF: true})
	n := newNode(t, node.Options{Name: "n1", Addr: s.Addr(), BreakerFailures: 1000}, nil)
	n.SetUp()
	if err := n.Client().Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	for i := 0; i < 30; i++ {
		if err := n.Client().Get(ctx, "k").Err(); err == nil {
			t.Fatal("GET on a killed server succeeded")
		}
	}
	if err := n.Probe(ctx); err == nil {
		t.Fatal("probe of a killed server succeeded")
	} else {
		n.SetDown(err)
	}
	s.Restart()
	if err := n.Probe(ctx); err != nil {
		t.Fatalf("probe after restart: %v", err)
	}
	n.SetUp()
	start := time.Now()
	err := n.Client().Get(ctx, "k").Err()
	for err != nil && time.Since(start) < 3*time.Second {
		time.Sleep(10 * time.Millisecond)
		err = n.Client().Get(ctx, "k").Err()
	}
	t.Logf("commands failed for %v after the server was back", time.Since(start))
	// go-redis's own redial comes a second later: well under that means
	// the renewed client dialled at once (a loaded machine's polls can
	// take tens of ms, and its goroutines wait for a core).
	if time.Since(start) > 800*time.Millisecond {
		t.Errorf("commands kept failing for %v after restart", time.Since(start))
	}
}
