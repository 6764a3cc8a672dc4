// Package redisproc starts, supervises and stops real redis-server
// processes bound to 127.0.0.1. It is used by tests (through
// internal/redistest) and by programs such as the `make run` launcher, the
// failure drill, chaos and benchmark runners, so it does not depend on the
// testing package.
//
// Every server runs in its own process group, so signals reach any child
// redis forks (e.g. for an AOF rewrite). With Options.KillWithParent set
// (Linux only), the kernel SIGKILLs the server if the thread that started
// it exits, so it does not outlive a crashed parent. Servers are not
// otherwise stopped automatically: callers must Close, Stop or Kill them.
//
// The package targets Unix systems (it signals process groups).
package redisproc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// defaultReadyTimeout is used when Options.ReadyTimeout is 0.
	defaultReadyTimeout = 10 * time.Second
	// stopTimeout is how long Stop waits after SIGTERM before SIGKILL.
	stopTimeout = 5 * time.Second
	// startAttempts is how many ports Start tries when Options.Port is 0.
	startAttempts = 5
	// restartBusyTimeout is how long Restart retries a busy port.
	restartBusyTimeout = 5 * time.Second
)

// ErrNotFound is wrapped by the error Start returns when the redis-server
// binary (Options.Bin, or "redis-server" looked up in PATH) does not exist.
var ErrNotFound = errors.New("redis-server not found")

// errClosed is returned by Restart after Close.
var errClosed = errors.New("redisproc: server is closed")

// Options configures Start. The zero value starts a server without
// persistence or password on a free port in a new temporary directory.
type Options struct {
	// Port is the TCP port to listen on (always on 127.0.0.1). 0 picks a
	// free port; if redis then reports "Address already in use" (another
	// process grabbed it first), Start retries with a new free port, up to
	// 5 attempts in all. A non-zero Port is tried once.
	Port int
	// Dir is the server's working and data directory; it holds the log
	// (redis.log), the early stdout/stderr output (redis.stderr) and AOF
	// files. If Dir is "", Start creates a new temporary directory, which
	// Close removes (Start also removes it if it fails). A non-empty Dir
	// is made absolute, created (with parents, mode 0o755) if missing, and
	// never removed by this package.
	Dir string
	// TempRoot is where Start creates the temporary directory when Dir is
	// "".
	// default: os.TempDir()
	TempRoot string
	// AOF enables append-only persistence with appendfsync always, so data
	// written before a Kill (kill -9) survives a Restart, and
	// aof-load-truncated no, so an AOF a crash cut inside a write is
	// refused rather than loaded cut inside a script (RepairAOF says why;
	// Restart repairs it).
	AOF bool
	// Password, if non-empty, is set as requirepass; the readiness probe
	// authenticates with it.
	Password string
	// Args are extra redis-server arguments appended after the package's
	// own, so they can override them, e.g. {"--maxmemory", "1mb"}.
	Args []string
	// Env is extra environment (KEY=value) for the server process, added
	// to this process's, e.g. LD_PRELOAD and FAKETIME of libfaketime to
	// run the server with a skewed clock.
	Env []string
	// Bin is the redis-server executable: a path, or a name looked up in
	// PATH. "" means "redis-server" from PATH.
	Bin string
	// ReadyTimeout bounds how long Start and Restart wait for the server to
	// answer PING. 0 means 10s.
	ReadyTimeout time.Duration
	// SentinelConf, when non-empty, runs a Redis Sentinel instead of a
	// server: these lines (`sentinel monitor …`, `sentinel
	// down-after-milliseconds …`) are written to Dir/sentinel.conf, which
	// the sentinel then owns and rewrites (it is not rewritten on
	// Restart), and Bin defaults to "redis-sentinel". AOF is ignored.
	SentinelConf string
	// KillWithParent asks the kernel (Linux Pdeathsig) to SIGKILL the
	// server when the OS thread that started it exits, in practice when the
	// parent process dies, even by kill -9. Do not combine it with starting
	// servers from a goroutine locked to its thread (runtime.LockOSThread)
	// that later exits. Ignored on other systems.
	KillWithParent bool
}

// Server is one redis-server started by Start. Its port and directory are
// fixed for its lifetime; the process behind it can be killed, stopped,
// paused and restarted. All methods are safe for concurrent use.
type Server struct {
	bin     string
	opts    Options
	port    atomic.Int64 // changed only by Start and Rebind
	dir     string
	ownsDir bool // dir was created by Start and is removed by Close

	mu      sync.Mutex
	proc    *process // current process; never nil after Start returns
	paused  bool
	closed  bool
	repairs []string // RepairAOF's reports, one per repair Restart made
}

// Start starts a redis-server configured by opts and returns once it
// answers PING (authenticating if a password is set). On failure no
// process is left running and the error describes the cause: it wraps
// ErrNotFound, with an installation hint, if the binary is missing, and
// otherwise includes the tail of the server's log and stderr output.
func Start(opts Options) (*Server, error) {
	if opts.SentinelConf != "" && opts.Bin == "" {
		opts.Bin = "redis-sentinel"
	}
	bin, err := lookBin(opts.Bin)
	if err != nil {
		return nil, err
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = defaultReadyTimeout
	}
	s := &Server{bin: bin, opts: opts}
	if opts.Dir == "" {
		if s.dir, err = os.MkdirTemp(opts.TempRoot, "redisproc-*"); err != nil {
			return nil, fmt.Errorf("redisproc: creating data dir: %w", err)
		}
		s.ownsDir = true
	} else {
		if s.dir, err = filepath.Abs(opts.Dir); err != nil {
			return nil, fmt.Errorf("redisproc: data dir %q: %w", opts.Dir, err)
		}
		if err := os.MkdirAll(s.dir, 0o755); err != nil {
			return nil, fmt.Errorf("redisproc: creating data dir: %w", err)
		}
	}

	if opts.SentinelConf != "" {
		if err := os.WriteFile(s.sentinelConfPath(), []byte(opts.SentinelConf+"\n"), 0o644); err != nil {
			if s.ownsDir {
				_ = os.RemoveAll(s.dir)
			}
			return nil, fmt.Errorf("redisproc: writing %s: %w", s.sentinelConfPath(), err)
		}
	}
	attempts := 1
	if opts.Port == 0 {
		attempts = startAttempts
	}
	for i := 0; i < attempts; i++ {
		port := opts.Port
		if port == 0 {
			if port, err = FreePort(); err != nil {
				break
			}
		}
		s.port.Store(int64(port))
		var p *process
		if p, err = s.spawn(); err == nil {
			s.proc = p
			return s, nil
		}
		if !isAddrInUse(err) {
			break
		}
	}
	if s.ownsDir {
		_ = os.RemoveAll(s.dir)
	}
	return nil, fmt.Errorf("redisproc: starting redis-server: %w", err)
}

// lookBin resolves the redis-server executable named by bin.
func lookBin(bin string) (string, error) {
	if bin == "" {
		path, err := exec.LookPath("redis-server")
		if err != nil {
			return "", fmt.Errorf("redisproc: %w in PATH; install it (`make deps-redis`) or set Options.Bin", ErrNotFound)
		}
		return path, nil
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		if bin == "redis-sentinel" {
			return "", fmt.Errorf("redisproc: %w: redis-sentinel is not in PATH; install it (`make deps-sentinel`, Debian package redis-sentinel)", ErrNotFound)
		}
		return "", fmt.Errorf("redisproc: %w: Options.Bin %q: %v", ErrNotFound, bin, err)
	}
	return path, nil
}

// FreePort returns a loopback TCP port that was free at the time of the
// call (it listens on 127.0.0.1:0 and closes the listener). Another process
// may grab the port before the caller binds it.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("redisproc: finding a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("redisproc: closing probe listener: %w", err)
	}
	return port, nil
}

// Addr returns the server's address, "127.0.0.1:PORT". Only Rebind
// changes it.
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port()))
}

// Port returns the server's TCP port. Only Rebind changes it; Restart
// keeps it.
func (s *Server) Port() int { return int(s.port.Load()) }

// Dir returns the server's absolute working and data directory; the log is
// Dir()/redis.log and AOF files live below it. It never changes.
func (s *Server) Dir() string { return s.dir }

// Pid returns the process id of the running redis-server (which is also
// its process group id), or 0 if it is not running.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || s.proc.exited() {
		return 0
	}
	return s.proc.pid
}

// Running reports whether the redis-server process is alive (a paused
// process counts as running).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && !s.proc.exited()
}
