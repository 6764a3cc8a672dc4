package pgproc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// stopTimeout is how long Stop waits after the fast-shutdown signal
// before it kills the server.
const stopTimeout = 15 * time.Second

// process is one postmaster.
type process struct {
	pid  int
	done chan struct{} // closed once the postmaster exited and was reaped
	err  error         // Wait's result; read after done
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signalGroup signals the postmaster's whole process group.
func (p *process) signalGroup(sig syscall.Signal) error {
	err := syscall.Kill(-p.pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

func (s *Server) logPath() string { return filepath.Join(s.dir, "postgres.log") }

// maxConnections is Options.MaxConnections or its default.
func (s *Server) maxConnections() int {
	if s.opts.MaxConnections > 0 {
		return s.opts.MaxConnections
	}
	return 100
}

// spawn starts postgres and waits until it accepts connections.
func (s *Server) spawn() (*process, error) {
	logf, err := os.OpenFile(s.logPath(), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("log file: %w", err)
	}
	defer logf.Close()
	if s.cred != nil {
		_ = logf.Chown(int(s.cred.Uid), int(s.cred.Gid))
	}
	off, _ := logf.Seek(0, 2)
	args := []string{"-D", s.dir, "-p", strconv.Itoa(s.port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=",
		"-c", "shared_buffers=64MB", "-c", "max_connections=" + strconv.Itoa(s.maxConnections())}
	if !s.opts.Durable {
		args = append(args, "-c", "fsync=off", "-c", "full_page_writes=off")
	}
	cmd := exec.Command(filepath.Join(s.bin, "postgres"), args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = s.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: s.cred}
	if s.opts.KillWithParent {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := s.waitReady(p); err != nil {
		_ = p.signalGroup(syscall.SIGKILL)
		<-p.done
		return nil, fmt.Errorf("%w\n--- %s (tail) ---\n%s", err, s.logPath(), s.logTail(off))
	}
	return p, nil
}

// errOtherServer is waitReady's answer when the server answering on the
// port is not the one it started.
var errOtherServer = errors.New("port in use by another server")

// waitReady polls until the server answers a query, it exits, or the
// ready timeout passes. The server that answers must be the one started
// on s.dir: a port picked free may be taken by another process before the
// postmaster binds it (the postmaster then exits), and until it exits
// the other server answers on the port. That case fails with
// errOtherServer, which reads as "in use" (Start picks another port).
func (s *Server) waitReady(p *process) error {
	deadline := time.Now().Add(s.opts.ReadyTimeout)
	var last error
	for time.Now().Before(deadline) {
		if p.exited() {
			return fmt.Errorf("postgres on %s exited: %v", s.Addr(), p.err)
		}
		dir, err := s.dataDirectory()
		if err == nil {
			if !sameDir(dir, s.dir) {
				return fmt.Errorf("postgres on %s: %w (its data directory is %s, not %s)", s.Addr(), errOtherServer, dir, s.dir)
			}
			return nil
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("postgres on %s not ready within %v: %v", s.Addr(), s.opts.ReadyTimeout, last)
}

// dataDirectory asks the server on s's port for its data directory.
func (s *Server) dataDirectory() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var dir string
	err = conn.QueryRow(ctx, "SHOW data_directory").Scan(&dir)
	return dir, err
}

// sameDir reports whether a and b name one directory.
func sameDir(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(sa, sb)
}

func (s *Server) logTail(off int64) string {
	b, err := os.ReadFile(s.logPath())
	if err != nil {
		return err.Error()
	}
	if off > 0 && off <= int64(len(b)) {
		b = b[off:]
	}
	return tail(string(b), 3000)
}

// Kill SIGKILLs the server's process group (the postmaster and every
// backend), like kill -9, and waits until the postmaster was reaped.
// Committed transactions survive (see Options.Durable). A no-op when the
// server is not running.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.killLocked()
}

func (s *Server) killLocked() error {
	if s.proc == nil || s.proc.exited() {
		return nil
	}
	if err := s.proc.signalGroup(syscall.SIGKILL); err != nil {
		return fmt.Errorf("pgproc: kill postgres %d: %w", s.proc.pid, err)
	}
	<-s.proc.done
	return nil
}

// Stop shuts the server down (fast shutdown: sessions are disconnected,
// open transactions rolled back) and waits for it, killing it after 15s.
// A no-op when the server is not running.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked()
}

func (s *Server) stopLocked() error {
	if s.proc == nil || s.proc.exited() {
		return nil
	}
	if err := syscall.Kill(s.proc.pid, syscall.SIGINT); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("pgproc: stop postgres %d: %w", s.proc.pid, err)
	}
	select {
	case <-s.proc.done:
		return nil
	case <-time.After(stopTimeout):
		return s.killLocked()
	}
}

// Restart starts the server again on the same port and data directory
// (killing it first if it runs) and returns once it accepts connections.
// After a kill its backends may take a moment to go away: Restart retries
// until the ready timeout. It fails after Close.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("pgproc: server is closed")
	}
	if err := s.killLocked(); err != nil {
		return err
	}
	deadline := time.Now().Add(s.opts.ReadyTimeout)
	for {
		p, err := s.spawn()
		if err == nil {
			s.proc = p
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgproc: restarting postgres on %s: %w", s.Addr(), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Running reports whether the postmaster is alive.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && !s.proc.exited()
}

// Close stops the server and, when Start created the data directory,
// removes it. Idempotent; Restart fails afterwards.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	err := s.stopLocked()
	if s.proc != nil && !s.proc.exited() {
		return err
	}
	s.closed = true
	if s.ownsDir {
		if rerr := os.RemoveAll(s.dir); rerr != nil {
			err = errors.Join(err, fmt.Errorf("pgproc: removing %s: %w", s.dir, rerr))
		}
	}
	return err
}

// CreateDatabase creates database name (owned by the superuser) unless it
// exists.
func (s *Server) CreateDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return fmt.Errorf("pgproc: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return fmt.Errorf("pgproc: %w", err)
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("pgproc: create database %s: %w", name, err)
	}
	return nil
}
