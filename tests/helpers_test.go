// Package tests holds integration tests of the router, the nodes and the
// health scheduler against real redis-server processes (see
// internal/redistest). Nothing here is mocked.
package tests

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/health"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
)

func TestMain(m *testing.M) {
	// go-redis logs failed dials to stderr; the tests provoke plenty.
	redis.SetLogger(quietLogger{})
	os.Exit(m.Run())
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// slack is the scheduling allowance added to every timing bound.
const slack = 150 * time.Millisecond

// lagMeter measures how late this test process's goroutines run: one
// goroutine sleeps lagTick again and again and keeps the largest
// overshoot since the last reset. A timing bound adds it to slack: a
// probe that ran late because the machine was loaded (a busy CI run
// missed the recovery bound by 78 ms) is the machine's delay, which the
// meter's goroutine met too, not the health scheduler's. On a quiet
// machine it adds about a millisecond, so the bound stays as tight.
type lagMeter struct {
	worst atomic.Int64 // ns
	stop  chan struct{}
	done  chan struct{}
}

const lagTick = 5 * time.Millisecond

// startLagMeter starts a lagMeter, stopped at the test's end.
func startLagMeter(t *testing.T) *lagMeter {
	m := &lagMeter{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for {
			at := time.Now()
			select {
			case <-m.stop:
				return
			case <-time.After(lagTick):
			}
			if over := int64(time.Since(at) - lagTick); over > m.worst.Load() {
				m.worst.Store(over)
			}
		}
	}()
	t.Cleanup(func() { close(m.stop); <-m.done })
	return m
}

// reset starts a new window.
func (m *lagMeter) reset() { m.worst.Store(0) }

// lag is the largest overshoot seen since the last reset.
func (m *lagMeter) lag() time.Duration { return time.Duration(m.worst.Load()) }

// fastHealth is the health configuration of the timing test with short
// settings: its bounds are derived from these values. The probe timeout
// is 250ms rather than 100ms so the first probe (dial, HELLO, script load)
// does not time out on a loaded machine running the whole package under
// -race; a killed node is detected by "connection refused" anyway.
var fastHealth = config.Health{
	Heartbeat: 100 * time.Millisecond,
	Timeout:   250 * time.Millisecond,
	Backoff:   []time.Duration{100 * time.Millisecond, 200 * time.Millisecond},
}

// quickHealth is the health configuration of the other tests: failures of
// killed nodes (connection refused) are noticed within ~100ms and nodes are
// reconnected within ~200ms, but a probe may take up to 1s, so a loaded
// machine (-race, parallel tests) does not mark a live node DOWN.
var quickHealth = config.Health{
	Heartbeat: 100 * time.Millisecond,
	Timeout:   time.Second,
	Backoff:   []time.Duration{100 * time.Millisecond, 200 * time.Millisecond},
}

// testLogger returns a slog logger writing to t.Log, so router and node
// logs show up only for failing tests (or with -v).
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// newConfig returns config.Default() with the given nodes (name → addr)
// and servers, and health settings h (zero: the defaults).
func newConfig(t testing.TB, nodes map[string]string, servers map[string]config.Server, h *config.Health) *config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.Nodes = map[string]config.Node{}
	for name, addr := range nodes {
		cfg.Nodes[name] = config.Node{Addr: addr, Weight: 1}
	}
	cfg.Servers = servers
	if h != nil {
		cfg.Health = *h
		cfg.Health.Backoff = append([]time.Duration(nil), h.Backoff...)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("test config invalid: %v", err)
	}
	return &cfg
}

// server returns a config.Server with policy and routes.
func server(policy string, routes map[string][]string) config.Server {
	return config.Server{OnNodeDown: policy, Routes: routes}
}

// events collects router state changes.
type events struct {
	t  testing.TB
	ch chan health.Event
}

// startRouter builds a router over cfg whose state changes are delivered
// on the returned events, and closes it when the test ends. It fails the
// test if New does not return within 5s.
func startRouter(t testing.TB, cfg *config.Config) (*router.Router, *events) {
	t.Helper()
	ev := &events{t: t, ch: make(chan health.Event, 1024)}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := router.New(ctx, cfg, router.Options{KeepData: cfg.KeepData(),
		Logger: testLogger(t),
		OnStateChange: func(e health.Event) {
			select {
			case ev.ch <- e:
			default:
				t.Errorf("event channel full, dropped %+v", e)
			}
		},
	})
	if err != nil {
		t.Fatalf("router.New: %v", err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("router.Close: %v", err)
		}
	})
	// New returns once every node was probed, and the first probes'
	// events are delivered before that: drop them, tests check the
	// initial states with Status.
	for drained := false; !drained; {
		select {
		case e := <-ev.ch:
			t.Logf("initial event: %s up=%v err=%v", e.Target, e.Up, e.Err)
		default:
			drained = true
		}
	}
	return r, ev
}

// wait returns the next event for node name with state up, discarding (and
// logging) other events, or fails the test after timeout.
func (e *events) wait(name string, up bool, timeout time.Duration) health.Event {
	e.t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		select {
		case ev := <-e.ch:
			if ev.Target == name && ev.Up == up {
				return ev
			}
			e.t.Logf("skipping event %s up=%v err=%v", ev.Target, ev.Up, ev.Err)
		case <-deadline.C:
			e.t.Fatalf("node %s: no up=%v event within %v", name, up, timeout)
			return health.Event{}
		}
	}
}

// none fails the test if any event for node name arrives within d.
func (e *events) none(name string, d time.Duration) {
	e.t.Helper()
	for drained := false; !drained; {
		select {
		case ev := <-e.ch:
			if ev.Target == name {
				e.t.Errorf("unexpected event for %s: up=%v err=%v", ev.Target, ev.Up, ev.Err)
			}
		default:
			drained = true
		}
	}
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		select {
		case ev := <-e.ch:
			if ev.Target == name {
				e.t.Errorf("unexpected event for %s: up=%v err=%v", ev.Target, ev.Up, ev.Err)
			}
		case <-deadline.C:
			return
		}
	}
}

// status returns the router's status entry of node name.
func status(t testing.TB, r *router.Router, name string) router.NodeStatus {
	t.Helper()
	for _, st := range r.Status() {
		if st.Name == name {
			return st
		}
	}
	t.Fatalf("node %s not in router status", name)
	return router.NodeStatus{}
}

// waitUp waits up to 5s for every named node to be UP: a first probe
// that timed out on a loaded machine is retried on the backoff list.
func waitUp(t testing.TB, r *router.Router, ev *events, names ...string) {
	t.Helper()
	for _, name := range names {
		if status(t, r, name).State != node.StateUp {
			t.Logf("node %s not UP after New (%v); waiting", name, status(t, r, name).DownReason)
			ev.wait(name, true, 5*time.Second)
		}
	}
}

// requireState fails the test unless every named node has state want.
func requireState(t testing.TB, r *router.Router, want node.State, names ...string) {
	t.Helper()
	for _, name := range names {
		if st := status(t, r, name); st.State != want {
			t.Fatalf("node %s: state = %v, want %v (reason: %v)", name, st.State, want, st.DownReason)
		}
	}
}

// keysHomedOn returns n keys "prefix:i" of set whose ring home is node
// name.
func keysHomedOn(t testing.TB, set *router.Set, name, prefix string, n int) []string {
	t.Helper()
	var keys []string
	for i := 0; len(keys) < n; i++ {
		if i > 100000 {
			t.Fatalf("found only %d keys homed on %s", len(keys), name)
		}
		k := prefix + ":" + strconv.Itoa(i)
		if set.Candidates(k)[0].Name() == name {
			keys = append(keys, k)
		}
	}
	return keys
}

// keys returns "prefix:0" … "prefix:n-1".
func keys(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + ":" + strconv.Itoa(i)
	}
	return out
}

// setCalls returns how many SET commands the server has executed (INFO
// commandstats).
func setCalls(t testing.TB, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "cmdstat_set:calls=")
		if !ok {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("parsing cmdstat_set %q: %v", sc.Text(), err)
		}
		return n
	}
	return 0
}

// countKeys returns the number of keys matching pattern on c.
func countKeys(t testing.TB, c *redis.Client, pattern string) int {
	t.Helper()
	n := 0
	iter := c.Scan(context.Background(), 0, pattern, 1000).Iterator()
	for iter.Next(context.Background()) {
		n++
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("SCAN %s: %v", pattern, err)
	}
	return n
}

// nodeAddrs names the servers n1, n2, … in order and maps each name to
// its address (newConfig's nodes).
func nodeAddrs(servers []*redistest.Server) map[string]string {
	m := map[string]string{}
	for i, s := range servers {
		m["n"+strconv.Itoa(i+1)] = s.Addr()
	}
	return m
}

// backoffStep is the reconnect delay after failures consecutive failed
// probes, including the +10 % jitter.
func backoffStep(h config.Health, failures int) time.Duration {
	i := min(max(failures-1, 0), len(h.Backoff)-1)
	return h.Backoff[i] + h.Backoff[i]/10
}

// failFast bounds a call that must be refused without touching the network.
const failFast = 5 * time.Millisecond

// fastLoops runs call 100 times and requires every call to succeed and
// all but preempted of them to take less than failFast. A call that waits
// for the network (a dial, a timeout, a retry's backoff) is slow every time,
// or at least once in a few calls; a preemption on a loaded machine
// stretches one call now and then, whatever it does (with the race detector
// and -p 3 on two cores, loops with one 7-10 ms call each were seen). If a
// loop has more slow calls, it is run again, up to 3 loops. Each loop's
// slow calls and maximum are logged.
func fastLoops(t testing.TB, what string, call func() error) {
	t.Helper()
	runtime.GC() // keep a collection triggered by earlier garbage out of the loop
	var loops []string
	for attempt := 0; attempt < 3; attempt++ {
		var worst time.Duration
		slow := 0
		for i := 0; i < 100; i++ {
			start := time.Now()
			err := call()
			took := time.Since(start)
			worst = max(worst, took)
			if took >= failFast {
				slow++
			}
			if err != nil {
				t.Fatalf("%s, call %d: %v", what, i, err)
			}
		}
		loops = append(loops, fmt.Sprintf("%d slow, max %s", slow, ms(worst)))
		if slow <= preempted {
			t.Logf("fail-fast %s: loops of 100 calls: %s", what, strings.Join(loops, "; "))
			return
		}
	}
	t.Errorf("%s: more than %d of 100 calls took >= %v in each of 3 loops (%s)", what, preempted, failFast, strings.Join(loops, "; "))
}

// preempted is how many calls of fastLoops' 100 may be slower than failFast.
const preempted = 2

func ms(d time.Duration) string { return fmt.Sprintf("%.3fms", float64(d)/float64(time.Millisecond)) }
