// Package redistest spawns real redis-server processes on free loopback
// ports for integration tests. It is a thin testing.TB wrapper over
// internal/redisproc, which does the process management.
//
// Every server is started in its own process group and bound to 127.0.0.1.
// A server with Options set uses a t.TempDir() as its working directory,
// and a t.Cleanup registered by Start SIGKILLs its whole process group
// (also when the test failed or the server is paused), so it does not
// outlive its test. A server with the zero Options that its test did not
// kill, stop, restart, pause or resume is instead reset when the test ends
// and handed to a later Start in this process: moved to a new port, its
// clients disconnected, its data, scripts, functions and statistics
// flushed, its configuration set back (pool.go says what exactly, and when
// it is killed after all). On Linux every server is also SIGKILLed by the
// kernel if the test binary dies without running its cleanups (panic,
// -timeout, kill -9) or exits.
//
// Failures (redis-server missing, server not coming up) are reported with
// t.Fatalf on the testing.TB passed to Start, so methods that can fail
// (Restart) must be called from that test's goroutine or one of its subtests
// that shares its lifetime. Signal delivery failures in Kill, Stop, Pause
// and Resume (which do not happen in practice) are reported with t.Errorf.
package redistest

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/internal/redisproc"
)

// notFoundMsg is the fatal message when redis-server is not installed.
const notFoundMsg = "redis-server not found in PATH; run `make test`, which installs it"

// Options configures Start. Zero value: no persistence, no password.
type Options struct {
	// AOF enables append-only persistence with appendfsync always, so data
	// written before a Kill (kill -9) survives a Restart.
	AOF bool
	// Password, if non-empty, is set as requirepass; Client and the
	// readiness probe authenticate with it.
	Password string
	// Args are extra redis-server arguments appended after the harness's
	// own, e.g. {"--maxmemory", "1mb"}.
	Args []string
	// Env is extra environment (KEY=value) for the server process, e.g.
	// SkewClock's.
	Env []string
}

// SkewClock returns the environment (for Options.Env) that runs a server
// with its wall clock (gettimeofday, time, clock_gettime of
// CLOCK_REALTIME: Redis's TIME and key expiry) moved by the number of ms
// written in file, which a test may rewrite while the server runs (read
// again at most every 10 ms); the monotonic clock is left alone. It
// builds a small LD_PRELOAD library with gcc (libfaketime deadlocks in
// Redis 7's jemalloc start-up) and skips the test when gcc is missing.
func SkewClock(t testing.TB, file string) []string {
	t.Helper()
	lib, err := redisproc.BuildSkewClock(t.TempDir())
	if errors.Is(err, redisproc.ErrNoCompiler) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return redisproc.SkewEnv(lib, file)
}

// SetSkew writes ms to a SkewClock file: the servers started with it
// read their wall clock ms later (earlier when negative) from then on.
func SetSkew(t testing.TB, file string, ms int64) {
	t.Helper()
	if err := redisproc.SetSkew(file, ms); err != nil {
		t.Fatal(err)
	}
}

// Server is one redis-server process started for a test. Its port and
// directory are fixed for its lifetime; the process behind it can be
// killed, stopped, paused and restarted. All methods are safe for
// concurrent use.
type Server struct {
	t    testing.TB
	opts Options
	srv  *redisproc.Server
	pool *pooled // nil: not for the pool (Options set)
	addr string  // srv's address while this test has it (a reset moves a pooled server)
	port int

	touched  atomic.Bool // Kill, Stop, Restart, Pause or Resume was called
	released atomic.Bool // the test ended: Kill, Stop, Restart, Pause and Resume are no-ops
}

// Start starts a redis-server configured by opts on a free loopback port
// and returns once it answers PING: with opts set, in a fresh t.TempDir();
// with the zero Options, a server from the pool when one is idle (empty,
// on a port no earlier test used), else a new one in a folder of the
// pool's. It fails the test with t.Fatalf if redis-server is not in PATH
// or does not come up within 10s (the message includes the tail of its
// log). If the chosen port turns out to be taken, Start retries with
// another port, up to 5 times. A t.Cleanup stops the server (SIGKILL) when
// the test ends, or resets it for the pool (see the package comment).
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.zero() {
		p := takeIdle()
		if p == nil {
			var err error
			if p, err = startPooled(); err != nil {
				fail(t, err)
			}
		}
		s := &Server{t: t, srv: p.srv, pool: p, addr: p.srv.Addr(), port: p.srv.Port()}
		t.Cleanup(s.cleanup)
		return s
	}
	dir := t.TempDir() // before t.Cleanup below: removed after the kill
	srv, err := redisproc.Start(redisproc.Options{
		Dir:            dir,
		AOF:            opts.AOF,
		Password:       opts.Password,
		Args:           opts.Args,
		Env:            opts.Env,
		KillWithParent: true,
	})
	if err != nil {
		fail(t, err)
	}
	s := &Server{t: t, opts: opts, srv: srv, addr: srv.Addr(), port: srv.Port()}
	t.Cleanup(s.cleanup)
	return s
}

// fail fails the test with Start's error.
func fail(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, redisproc.ErrNotFound) {
		t.Fatal(notFoundMsg)
	}
	t.Fatal(err)
}

// zero reports whether o is the zero Options (a pooled server).
func (o Options) zero() bool {
	return !o.AOF && o.Password == "" && len(o.Args) == 0 && len(o.Env) == 0
}

// StartN starts n independent servers with the same opts (see Start) and
// returns them in start order. Each has its own port and directory.
func StartN(t testing.TB, n int, opts Options) []*Server {
	t.Helper()
	servers := make([]*Server, n)
	for i := range servers {
		servers[i] = Start(t, opts)
	}
	return servers
}

// FreePort returns a loopback TCP port that was free at the time of the
// call (it listens on 127.0.0.1:0 and closes the listener). Another process
// may grab the port before the caller binds it. It fails the test if no
// port can be obtained.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := redisproc.FreePort()
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return port
}

// Addr returns the server's address, "127.0.0.1:PORT". It never changes,
// also across Restart (a pooled server that a later test has is elsewhere).
func (s *Server) Addr() string { return s.addr }

// Port returns the server's TCP port. It never changes, also across
// Restart.
func (s *Server) Port() int { return s.port }

// Dir returns the server's working and data directory (a t.TempDir(), or
// a pool's folder for the zero Options: the log of earlier tests' leases
// in it too); the log is Dir()/redis.log and AOF files live below it.
func (s *Server) Dir() string { return s.srv.Dir() }

// Running reports whether the redis-server process is alive (a paused
// process counts as running).
func (s *Server) Running() bool { return s.srv.Running() }

// Kill sends SIGKILL to the server's process group and waits until the
// process has exited, like kill -9 (without AOF all data is lost). It is idempotent
// and a no-op if the server is not running.
func (s *Server) Kill() { s.act(s.srv.Kill) }

// Stop shuts the server down gracefully: SIGTERM (resuming it if paused),
// then waits for it to exit, sending SIGKILL after 5s. It is idempotent and
// a no-op if the server is not running.
func (s *Server) Stop() { s.act(s.srv.Stop) }

// Restart starts redis-server again on the same port and directory (so AOF
// data is kept) and returns once it answers PING, authenticating if a
// password is set. If the server is still running it is killed first. If
// the port is briefly busy it retries for up to 5s. Failures are reported
// with t.Fatalf on the TB given to Start.
func (s *Server) Restart() {
	s.t.Helper()
	if !s.use() {
		return
	}
	if err := s.srv.Restart(); err != nil {
		s.t.Fatal(err)
	}
}

// Pause freezes the server's process group with SIGSTOP: connections stay
// open but nothing is answered until Resume. It is a no-op if the server is
// not running or already paused. Kill, Stop and cleanup handle paused servers.
func (s *Server) Pause() { s.act(s.srv.Pause) }

// Resume continues a server frozen by Pause with SIGCONT. It is a no-op if
// the server is not running or not paused.
func (s *Server) Resume() { s.act(s.srv.Resume) }

// Client returns a go-redis client for the server (authenticating with
// Options.Password), with go-redis default timeouts. The client is closed
// by a t.Cleanup on the given t. It keeps working across Restart.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), Password: s.opts.Password})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// report fails the test (without stopping it) if err is not nil.
func (s *Server) report(err error) {
	if err != nil {
		s.t.Helper()
		s.t.Errorf("redistest: %v", err)
	}
}

// act runs one of the process's lifecycle steps while the test has the
// server (see use), reporting its error.
func (s *Server) act(step func() error) {
	if s.use() {
		s.report(step())
	}
}

// use marks the server as no longer fit for the pool and reports whether
// its test still runs (after it, the server may be another test's).
func (s *Server) use() bool {
	s.touched.Store(true)
	return !s.released.Load()
}

// cleanup is registered with t.Cleanup. It hands a pooled server that its
// test left running untouched back to the pool once reset; any other it
// kills, then closes (the t.TempDir() is removed by the testing package;
// a pool's folder here).
func (s *Server) cleanup() {
	s.released.Store(true)
	if s.pool != nil {
		if !s.touched.Load() && s.srv.Running() {
			err := s.pool.reset()
			if err == nil {
				putIdle(s.pool)
				return
			}
			s.t.Logf("redistest: %s not reused (killed): %v", s.addr, err)
		}
		s.pool.discard()
		return
	}
	s.report(s.srv.Kill())
	s.report(s.srv.Close())
}
