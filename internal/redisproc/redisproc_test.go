package redisproc

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// start starts a server that is killed and closed when the test ends and
// dies with the test binary.
func start(t *testing.T, opts Options) *Server {
	t.Helper()
	opts.KillWithParent = true
	s, err := Start(opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Kill(); err != nil {
			t.Errorf("cleanup Kill: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("cleanup Close: %v", err)
		}
	})
	return s
}

// client returns a client for s with short timeouts and no retries.
func client(t *testing.T, s *Server) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:        s.Addr(),
		ReadTimeout: 200 * time.Millisecond,
		MaxRetries:  -1,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func ping(c *redis.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	return c.Ping(ctx).Err()
}

func TestKillRestartAOFKeepsData(t *testing.T) {
	t.Parallel()
	s := start(t, Options{AOF: true})
	port, pid := s.Port(), s.Pid()
	if pid <= 0 || !s.Running() {
		t.Fatalf("after Start: Pid() = %d, Running() = %v; want > 0, true", pid, s.Running())
	}
	c := client(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Set(ctx, "durable", "yes", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}

	if err := s.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if err := s.Kill(); err != nil { // idempotent
		t.Fatalf("second Kill: got %v, want nil", err)
	}
	if s.Running() || s.Pid() != 0 {
		t.Fatalf("after Kill: Running() = %v, Pid() = %d; want false, 0", s.Running(), s.Pid())
	}

	if err := s.Restart(); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if s.Port() != port || s.Pid() == pid || s.Pid() <= 0 {
		t.Fatalf("after Restart: Port() = %d, Pid() = %d; want port %d and a new pid (old %d)",
			s.Port(), s.Pid(), port, pid)
	}
	got, err := c.Get(ctx, "durable").Result()
	if err != nil || got != "yes" {
		t.Fatalf("GET durable after Restart = %q, %v; want \"yes\", nil", got, err)
	}
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	s := start(t, Options{})
	c := client(t, s)
	if err := ping(c); err != nil {
		t.Fatalf("PING before Pause: %v", err)
	}
	if err := s.Pause(); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if !s.Running() {
		t.Fatalf("Running() = false while paused, want true")
	}
	if err := ping(c); err == nil {
		t.Fatalf("PING while paused: got nil error, want timeout")
	}
	if err := s.Resume(); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	var err error
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		if err = ping(c); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("PING after Resume: got %v, want nil", err)
	}
}

func TestStopPausedIsIdempotent(t *testing.T) {
	t.Parallel()
	s := start(t, Options{})
	if err := s.Pause(); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	begin := time.Now()
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if d := time.Since(begin); d >= stopTimeout {
		t.Errorf("Stop on a paused server took %v, want a graceful stop before the %v SIGKILL", d, stopTimeout)
	}
	if s.Running() {
		t.Fatalf("Running() = true after Stop, want false")
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("second Stop: got %v, want nil", err)
	}
	if err := s.Pause(); err != nil {
		t.Fatalf("Pause after Stop: got %v, want nil (no-op)", err)
	}
}

func TestCloseRemovesOwnDir(t *testing.T) {
	t.Parallel()
	s := start(t, Options{})
	if _, err := os.Stat(filepath.Join(s.Dir(), "redis.log")); err != nil {
		t.Fatalf("redis.log in Dir(): %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if s.Running() {
		t.Fatalf("Running() = true after Close, want false")
	}
	if _, err := os.Stat(s.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Stat(Dir()) after Close: got %v, want not exist", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: got %v, want nil", err)
	}
	if err := s.Restart(); err == nil {
		t.Fatalf("Restart after Close: got nil error, want one")
	}
}

func TestCloseKeepsCallerDirAndFixedPort(t *testing.T) {
	t.Parallel()
	port, err := FreePort()
	if err != nil {
		t.Fatalf("FreePort: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "data", "node") // created by Start
	s := start(t, Options{Port: port, Dir: dir})
	if s.Port() != port || s.Dir() != dir {
		t.Fatalf("Port(), Dir() = %d, %q; want %d, %q", s.Port(), s.Dir(), port, dir)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "redis.log")); err != nil {
		t.Fatalf("redis.log in caller's Dir after Close: %v, want it kept", err)
	}
}

func TestStartFailureIncludesLog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := Start(Options{Dir: dir, KillWithParent: true, Args: []string{"--maxmemory", "not-a-size"}})
	if err == nil {
		_ = s.Close()
		t.Fatalf("Start with a bad argument: got nil error, want one")
	}
	if want := "maxmemory"; !strings.Contains(err.Error(), want) {
		t.Fatalf("error = %q, want it to mention %q (redis output)", err, want)
	}
}

func TestStartMissingBin(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "no-such-redis-server")
	_, err := Start(Options{Bin: bin})
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), bin) {
		t.Fatalf("Start with Bin %q: got %v, want ErrNotFound naming the path", bin, err)
	}
}

func TestStartNotInPath(t *testing.T) { // not parallel: changes PATH
	t.Setenv("PATH", t.TempDir())
	_, err := Start(Options{})
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "redis-server not found in PATH") {
		t.Fatalf("Start without redis-server in PATH: got %v, want ErrNotFound with the PATH hint", err)
	}
}

// Rebind moves a running server to another port: the old one refuses,
// connections already open stay, Restart comes back on the new port; a
// stopped server is not moved.
func TestRebindMovesThePort(t *testing.T) {
	t.Parallel()
	s := start(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	open := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1}) // go-redis's timeouts: a busy machine is slow
	defer open.Close()
	if err := open.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	old := s.Addr()
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Rebind(ctx, port); err != nil {
		t.Fatal(err)
	}
	if s.Port() != port || s.Addr() == old {
		t.Fatalf("after Rebind(%d): Port() %d, Addr() %s (was %s)", port, s.Port(), s.Addr(), old)
	}
	if v, err := open.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Errorf("GET on the connection opened before = %q, %v; want v", v, err)
	}
	if conn, err := net.DialTimeout("tcp", old, time.Second); err == nil {
		conn.Close()
		t.Errorf("the old address %s still accepts connections", old)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	again := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer again.Close()
	if err := again.Ping(ctx).Err(); err != nil || s.Port() != port {
		t.Errorf("after Restart: PING %v on port %d, want it on %d", err, s.Port(), port)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Rebind(ctx, port+1); err == nil || s.Port() != port {
		t.Errorf("Rebind of a stopped server = %v, port %d; want an error and port %d", err, s.Port(), port)
	}
}
