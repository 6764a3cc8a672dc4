// Package pgproc starts, supervises and stops real PostgreSQL servers
// (Debian's postgresql package: initdb, postgres) bound to 127.0.0.1, for
// tests (through internal/pgtest), `make run` and the benchmark. It does
// not depend on the testing package.
//
// A server is a data directory initialised by initdb on first start, run
// by the postgres binary on a loopback TCP port (no Unix socket), in its
// own process group so that Kill takes its backends down with it. PostgreSQL
// refuses to run as root: when this process is root, initdb and postgres
// run as the user "postgres" (the Debian package creates it; "nobody"
// otherwise) and the data directory is handed to that user, so its parent
// folders must be searchable by it (a folder under /tmp, or a checkout
// that is not private to root).
//
// The package targets Linux (process groups, parent-death signal,
// credentials of child processes).
package pgproc

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrNotFound is wrapped by Start's error when the PostgreSQL server
// binaries (initdb, postgres) cannot be found.
var ErrNotFound = errors.New("PostgreSQL server binaries (initdb, postgres) not found")

// BinEnv names an environment variable that, when set, is the folder
// holding initdb and postgres (it overrides the search).
const BinEnv = "SHARDIS_PG_BIN"

// Options configures Start. The zero value starts a throw-away server
// (fsync off) with trust authentication on a free port in a new temporary
// directory.
type Options struct {
	// Dir is the data directory. initdb runs when it holds no cluster yet
	// (no PG_VERSION); an existing cluster is started as it is, so data
	// survives from one Start to the next. "" means a new temporary
	// directory, removed by Close.
	Dir string
	// Port is the TCP port on 127.0.0.1; 0 picks a free one.
	Port int
	// User is the superuser initdb creates.
	// default: shardis
	User string
	// Password, when set, is the superuser's password and TCP connections
	// must give it (scram-sha-256); "" trusts every loopback connection.
	// Used by initdb only: an existing cluster keeps its own.
	Password string
	// Durable keeps fsync on (the server survives a machine crash). Off,
	// a killed server still loses nothing committed (commits are written
	// to the OS before they return), only a machine crash can; tests and
	// benchmarks run faster.
	Durable bool
	// BinDir holds initdb and postgres.
	// default: $SHARDIS_PG_BIN, else the newest /usr/lib/postgresql/*/bin,
	// else PATH
	BinDir string
	// ReadyTimeout bounds the wait for the server to accept connections.
	// default: 30s
	ReadyTimeout time.Duration
	// Template, when set, is a data directory holding a cluster that no
	// server has run (made by Init with the same User and Password): a
	// data directory without a cluster gets a copy of it instead of a run
	// of initdb.
	Template string
	// KillWithParent asks the kernel to SIGKILL the server when the thread
	// that started it exits (the parent dying, even by kill -9).
	KillWithParent bool
	// MaxConnections is the server's max_connections: a server that many
	// tests share holds more client connections at once than one test's.
	// default: 100
	MaxConnections int
}

// Server is one PostgreSQL server started by Start. Its port and data
// directory are fixed for its lifetime; the process can be killed,
// stopped and restarted. Safe for concurrent use.
type Server struct {
	bin     string
	opts    Options
	port    int
	dir     string
	ownsDir bool
	cred    *syscall.Credential // nil when not root

	mu     sync.Mutex
	proc   *process
	closed bool
}

// Start initialises the data directory when needed, starts postgres and
// returns once it accepts connections. On failure nothing is left running
// and the error includes the tail of the server's log.
func Start(opts Options) (*Server, error) {
	s, err := newServer(opts)
	if err != nil {
		return nil, err
	}
	opts = s.opts
	if opts.Dir == "" {
		if s.dir, err = os.MkdirTemp("", "pgproc-*"); err != nil {
			return nil, fmt.Errorf("pgproc: creating data dir: %w", err)
		}
		s.ownsDir = true
	} else if s.dir, err = filepath.Abs(opts.Dir); err != nil {
		return nil, fmt.Errorf("pgproc: data dir %q: %w", opts.Dir, err)
	}
	fail := func(err error) (*Server, error) {
		if s.ownsDir {
			_ = os.RemoveAll(s.dir)
		}
		return nil, err
	}
	if err := s.initdb(); err != nil {
		return fail(err)
	}
	for attempt := 0; ; attempt++ {
		s.port = opts.Port
		if s.port == 0 {
			if s.port, err = freePort(); err != nil {
				return fail(err)
			}
		}
		p, err := s.spawn()
		if err == nil {
			s.proc = p
			return s, nil
		}
		inUse := errors.Is(err, errOtherServer) || strings.Contains(err.Error(), "in use")
		if opts.Port != 0 || attempt >= 4 || !inUse {
			return fail(fmt.Errorf("pgproc: starting postgres: %w", err))
		}
	}
}

// Init makes opts.Dir hold a cluster, as Start's initdb would, without
// starting a server: a template for tests, which copy it into each new
// server's data directory instead of running initdb for each (about 2.4 s
// of CPU each on 2 cores). It does nothing when Dir already holds a
// cluster. Only Dir, User, Password and BinDir are read.
func Init(opts Options) error {
	opts.Template = "" // Init makes templates; it does not copy one
	if opts.Dir == "" {
		return errors.New("pgproc: Init needs a data directory (Options.Dir)")
	}
	s, err := newServer(opts)
	if err != nil {
		return err
	}
	if s.dir, err = filepath.Abs(opts.Dir); err != nil {
		return fmt.Errorf("pgproc: data dir %q: %w", opts.Dir, err)
	}
	return s.initdb()
}

// newServer fills opts' defaults and finds the binaries and the user the
// server runs as.
func newServer(opts Options) (*Server, error) {
	bin, err := FindBin(opts.BinDir)
	if err != nil {
		return nil, err
	}
	if opts.User == "" {
		opts.User = "shardis"
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = 30 * time.Second
	}
	s := &Server{bin: bin, opts: opts}
	if s.cred, err = childCredential(); err != nil {
		return nil, err
	}
	return s, nil
}

// FindBin returns the folder holding initdb and postgres: dir when set,
// else $SHARDIS_PG_BIN, else the newest /usr/lib/postgresql/*/bin (Debian),
// else the folder of postgres in PATH. The error wraps [ErrNotFound].
func FindBin(dir string) (string, error) {
	if dir == "" {
		dir = os.Getenv(BinEnv)
	}
	if dir != "" {
		if !hasServer(dir) {
			return "", fmt.Errorf("pgproc: %w in %s", ErrNotFound, dir)
		}
		return dir, nil
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(found, func(i, j int) bool { return version(found[i]) > version(found[j]) })
	for _, d := range found {
		if hasServer(d) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("postgres"); err == nil && hasServer(filepath.Dir(p)) {
		return filepath.Dir(p), nil
	}
	return "", fmt.Errorf("pgproc: %w (looked in $%s, /usr/lib/postgresql/*/bin and PATH); install Debian's postgresql package (`make deps-pg`)",
		ErrNotFound, BinEnv)
}

func hasServer(dir string) bool {
	for _, b := range []string{"initdb", "postgres"} {
		if st, err := os.Stat(filepath.Join(dir, b)); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// version reads the major version out of /usr/lib/postgresql/NN/bin.
func version(dir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return v
}

// childCredential returns who initdb and postgres run as: nil (this
// process's user) unless this process is root, which PostgreSQL refuses.
func childCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	var u *user.User
	var err error
	for _, name := range []string{"postgres", "nobody"} {
		if u, err = user.Lookup(name); err == nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("pgproc: running as root, and neither user postgres nor nobody exists to run PostgreSQL as: %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("pgproc: user %s has a non-numeric uid/gid %s/%s", u.Username, u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

// HasCluster reports whether dir holds a PostgreSQL cluster (its
// PG_VERSION file): Start runs such a directory as it is, and Init leaves
// it alone.
func HasCluster(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "PG_VERSION"))
	return err == nil
}

// initdb creates the cluster, by initdb or as a copy of Options.Template,
// unless dir already holds one.
func (s *Server) initdb() error {
	if HasCluster(s.dir) {
		return s.own()
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("pgproc: creating data dir: %w", err)
	}
	if err := os.Chmod(s.dir, 0o700); err != nil {
		return fmt.Errorf("pgproc: data dir %s: %w", s.dir, err)
	}
	if s.opts.Template != "" {
		if err := copyTree(s.opts.Template, s.dir); err != nil {
			return fmt.Errorf("pgproc: copying the template cluster %s: %w", s.opts.Template, err)
		}
		return s.own()
	}
	if err := s.own(); err != nil {
		return err
	}
	args := []string{"-D", s.dir, "-U", s.opts.User, "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions"}
	var pwFile string
	if s.opts.Password != "" {
		f, err := os.CreateTemp("", "pgproc-pw-*")
		if err != nil {
			return fmt.Errorf("pgproc: password file: %w", err)
		}
		pwFile = f.Name()
		defer os.Remove(pwFile)
		_, werr := f.WriteString(s.opts.Password + "\n")
		if cerr := f.Close(); werr != nil || cerr != nil {
			return fmt.Errorf("pgproc: password file: %w", errors.Join(werr, cerr))
		}
		if s.cred != nil {
			if err := os.Chown(pwFile, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
				return fmt.Errorf("pgproc: password file: %w", err)
			}
		}
		args = append(args, "--pwfile="+pwFile, "--auth-host=scram-sha-256", "--auth-local=scram-sha-256")
	} else {
		args = append(args, "--auth=trust")
	}
	cmd := exec.Command(filepath.Join(s.bin, "initdb"), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	cmd.Dir = os.TempDir()
	if out, err := cmd.CombinedOutput(); err != nil {
		hint := ""
		if s.cred != nil {
			hint = fmt.Sprintf(" (initdb runs as uid %d: every parent folder of %s must be searchable by it)", s.cred.Uid, s.dir)
		}
		return fmt.Errorf("pgproc: initdb %s: %w%s:\n%s", s.dir, err, hint, tail(string(out), 2000))
	}
	return nil
}

// own hands the data directory to the user postgres runs as.
func (s *Server) own() error {
	if s.cred == nil {
		return nil
	}
	return filepath.Walk(s.dir, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(path, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return fmt.Errorf("pgproc: handing %s to uid %d: %w", path, s.cred.Uid, err)
		}
		return nil
	})
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgproc: finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Addr returns "127.0.0.1:PORT".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port returns the server's TCP port; it never changes.
func (s *Server) Port() int { return s.port }

// Dir returns the data directory; the server's log is Dir()/postgres.log.
func (s *Server) Dir() string { return s.dir }

// DSN returns a connection URL for database db as the superuser (with the
// password when one was set), without TLS.
func (s *Server) DSN(db string) string {
	u := url.URL{Scheme: "postgres", Host: s.Addr(), Path: "/" + db, RawQuery: "sslmode=disable"}
	if s.opts.Password != "" {
		u.User = url.UserPassword(s.opts.User, s.opts.Password)
	} else {
		u.User = url.User(s.opts.User)
	}
	return u.String()
}

// Pid returns the postmaster's pid (its process group), or 0 when it is
// not running.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || s.proc.exited() {
		return 0
	}
	return s.proc.pid
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
