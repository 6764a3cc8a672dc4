package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestStartSetGet(t *testing.T) {
	t.Parallel()
	s := Start(t, Options{})
	if got, want := s.Addr(), "127.0.0.1:"; !strings.HasPrefix(got, want) {
		t.Fatalf("Addr() = %q, want prefix %q", got, want)
	}
	if s.Port() <= 0 {
		t.Fatalf("Port() = %d, want > 0", s.Port())
	}
	if !s.Running() {
		t.Fatalf("Running() = false after Start, want true")
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), "redis.log")); err != nil {
		t.Fatalf("redis.log in Dir(): %v", err)
	}
	ctx := ctxT(t)
	c := s.Client(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	got, err := c.Get(ctx, "k").Result()
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	if want := "v"; got != want {
		t.Fatalf("GET k = %q, want %q", got, want)
	}
}

func TestKillThenDialFails(t *testing.T) {
	t.Parallel()
	s := Start(t, Options{})
	s.Kill()
	if s.Running() {
		t.Fatalf("Running() = true after Kill, want false")
	}
	s.Kill() // idempotent
	conn, err := net.DialTimeout("tcp", s.Addr(), 500*time.Millisecond)
	if err == nil {
		conn.Close()
		t.Fatalf("dial %s after Kill: got nil error, want connection refused", s.Addr())
	}
}

func TestRestartAOFKeepsData(t *testing.T) {
	t.Parallel()
	s := Start(t, Options{AOF: true})
	port := s.Port()
	ctx := ctxT(t)
	c := s.Client(t)
	if err := c.Set(ctx, "durable", "yes", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	s.Kill()
	s.Restart()
	if got, want := s.Port(), port; got != want {
		t.Fatalf("Port() after Restart = %d, want %d", got, want)
	}
	if !s.Running() {
		t.Fatalf("Running() = false after Restart, want true")
	}
	got, err := c.Get(ctx, "durable").Result()
	if err != nil {
		t.Fatalf("GET after Restart: %v", err)
	}
	if want := "yes"; got != want {
		t.Fatalf("GET durable after Restart = %q, want %q", got, want)
	}
}

func TestRestartWithoutAOFLosesData(t *testing.T) {
	t.Parallel()
	s := Start(t, Options{})
	ctx := ctxT(t)
	c := s.Client(t)
	if err := c.Set(ctx, "volatile", "yes", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	s.Kill()
	s.Restart()
	_, err := c.Get(ctx, "volatile").Result()
	if got, want := err, redis.Nil; !errors.Is(got, want) {
		t.Fatalf("GET volatile after Restart: err = %v, want %v", got, want)
	}
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	s := Start(t, Options{})
	c := redis.NewClient(&redis.Options{
		Addr:        s.Addr(),
		ReadTimeout: 200 * time.Millisecond,
		MaxRetries:  -1,
	})
	defer c.Close()

	ping := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		return c.Ping(ctx).Err()
	}
	if err := ping(); err != nil {
		t.Fatalf("PING before Pause: %v", err)
	}
	s.Pause()
	if !s.Running() {
		t.Fatalf("Running() = false while paused, want true")
	}
	if err := ping(); err == nil {
		t.Fatalf("PING while paused: got nil error, want timeout")
	}
	s.Resume()
	deadline := time.Now().Add(2 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		if err = ping(); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("PING after Resume: got %v, want nil", err)
	}
}

func TestPausedServerIsStoppedAndKilled(t *testing.T) {
	t.Parallel()
	s := Start(t, Options{})
	s.Pause()
	done := make(chan struct{})
	go func() { s.Stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("Stop on a paused server did not return within 10s")
	}
	if s.Running() {
		t.Fatalf("Running() = true after Stop, want false")
	}
	s.Stop() // idempotent

	// A server left paused is killed by cleanup; Restart then Pause to check.
	s.Restart()
	s.Pause()
}

func TestPassword(t *testing.T) {
	t.Parallel()
	s := Start(t, Options{Password: "s3cret"})
	ctx := ctxT(t)

	anon := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer anon.Close()
	err := anon.Ping(ctx).Err()
	if err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("unauthenticated PING: got err %v, want NOAUTH error", err)
	}

	if err := s.Client(t).Ping(ctx).Err(); err != nil {
		t.Fatalf("authenticated PING: got %v, want nil", err)
	}

	s.Kill()
	s.Restart() // readiness probe must authenticate
	if err := s.Client(t).Ping(ctx).Err(); err != nil {
		t.Fatalf("authenticated PING after Restart: got %v, want nil", err)
	}
}

func TestStartNAndExtraArgs(t *testing.T) {
	t.Parallel()
	servers := StartN(t, 3, Options{Args: []string{"--maxmemory", "1mb"}})
	if got, want := len(servers), 3; got != want {
		t.Fatalf("len(StartN) = %d, want %d", got, want)
	}
	ctx := ctxT(t)
	seen := map[int]bool{}
	for _, s := range servers {
		if seen[s.Port()] {
			t.Fatalf("duplicate port %d", s.Port())
		}
		seen[s.Port()] = true
		got, err := s.Client(t).ConfigGet(ctx, "maxmemory").Result()
		if err != nil {
			t.Fatalf("CONFIG GET maxmemory: %v", err)
		}
		if want := "1048576"; got["maxmemory"] != want {
			t.Fatalf("maxmemory = %q, want %q", got["maxmemory"], want)
		}
	}
}

func TestRestartWhenPortBusyBriefly(t *testing.T) {
	t.Parallel()
	s := Start(t, Options{})
	s.Kill()
	l, err := net.Listen("tcp", s.Addr())
	if err != nil {
		t.Fatalf("occupying %s: %v", s.Addr(), err)
	}
	go func() {
		time.Sleep(500 * time.Millisecond)
		l.Close()
	}()
	s.Restart()
	if err := s.Client(t).Ping(ctxT(t)).Err(); err != nil {
		t.Fatalf("PING after Restart on a briefly busy port: got %v, want nil", err)
	}
}

// TestFreePort checks what FreePort promises: a port that was free when
// it was picked, never one bound at that moment (here: one this test
// holds). Binding the port afterwards is not asserted: another process
// (a parallel package's test) may take it first, as its doc says.
func TestFreePort(t *testing.T) {
	t.Parallel()
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	busy := held.Addr().(*net.TCPAddr).Port
	for i := 0; i < 50; i++ {
		p := FreePort(t)
		if p < 1024 || p > 65535 {
			t.Fatalf("FreePort() = %d, not an unprivileged TCP port", p)
		}
		if p == busy {
			t.Fatalf("FreePort() = %d, a port this test holds bound", p)
		}
	}
}

// fakeTB captures Fatal calls so failure paths of Start can be tested.
type fakeTB struct {
	testing.TB // the real test, for TempDir, Logf, ...

	mu       sync.Mutex
	fatal    string
	cleanups []func()
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Cleanup(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cleanups = append(f.cleanups, fn)
}

func (f *fakeTB) Fatal(args ...any) { f.Fatalf("%s", fmt.Sprint(args...)) }

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatal = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

// run calls fn on a fresh goroutine (so Fatal can Goexit), runs the
// registered cleanups and returns the fatal message, if any.
func (f *fakeTB) run(fn func()) string {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	<-done
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
	return f.fatal
}

func TestStartFailureIncludesLog(t *testing.T) {
	t.Parallel()
	f := &fakeTB{TB: t}
	got := f.run(func() { Start(f, Options{Args: []string{"--maxmemory", "not-a-size"}}) })
	if got == "" {
		t.Fatalf("Start with a bad argument: got no fatal error, want one")
	}
	if want := "maxmemory"; !strings.Contains(got, want) {
		t.Fatalf("fatal message = %q, want it to mention %q (redis output)", got, want)
	}
}

func TestStartWithoutRedisServer(t *testing.T) { // not parallel: changes PATH
	t.Setenv("PATH", t.TempDir())
	for p := takeIdle(); p != nil; p = takeIdle() { // none from the pool: Start must run one
		p.discard()
	}
	for _, opts := range []Options{{}, {Args: []string{"--loglevel", "notice"}}} {
		f := &fakeTB{TB: t}
		got := f.run(func() { Start(f, opts) })
		if want := "redis-server not found in PATH; run `make test`, which installs it"; got != want {
			t.Fatalf("Options %+v: fatal message = %q, want %q", opts, got, want)
		}
	}
}
