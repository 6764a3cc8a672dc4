package redisproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// process is one spawned redis-server. done is closed by the waiter
// goroutine once the process has exited and been reaped; that goroutine
// ends with it.
type process struct {
	pid     int
	done    chan struct{}
	waitErr error // valid after done is closed
}

// exited reports whether the process has exited.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the process's whole process group (pgid == pid
// because of Setpgid), so children forked by redis are hit too. A group
// that no longer exists (ESRCH: the process exited meanwhile) is not an
// error.
func (p *process) signal(sig syscall.Signal) error {
	if err := syscall.Kill(-p.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("redisproc: sending %v to redis-server pid %d: %w", sig, p.pid, err)
	}
	return nil
}

// startError describes a redis-server that exited or never answered.
type startError struct {
	addrInUse bool
	tornAOF   bool // it refused an AOF that ends inside a write (tornAOFLog)
	msg       string
}

func (e *startError) Error() string { return e.msg }

// IsAddrInUse reports whether err, from Start or Restart, says redis
// could not bind a port (its own, retried by Start when it picked it, or
// one its Args name, such as a --tls-port, which the caller picks again).
func IsAddrInUse(err error) bool { return isAddrInUse(err) }

// isAddrInUse reports whether err says redis could not bind its port.
func isAddrInUse(err error) bool {
	var se *startError
	return errors.As(err, &se) && se.addrInUse
}

// isTornAOF reports whether err says redis refused to load an AOF that
// ends inside a write.
func isTornAOF(err error) bool {
	var se *startError
	return errors.As(err, &se) && se.tornAOF
}

func (s *Server) logPath() string          { return filepath.Join(s.dir, "redis.log") }
func (s *Server) stderrPath() string       { return filepath.Join(s.dir, "redis.stderr") }
func (s *Server) sentinelConfPath() string { return filepath.Join(s.dir, "sentinel.conf") }

// args returns the redis-server (or redis-sentinel) command line for s.
func (s *Server) args() []string {
	var a []string
	if s.opts.SentinelConf != "" {
		a = append(a, s.sentinelConfPath()) // a sentinel's config file comes first
	}
	a = append(a,
		"--port", strconv.Itoa(s.Port()),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--save", "",
		"--daemonize", "no",
		"--protected-mode", "no",
		"--logfile", s.logPath(),
	)
	if s.opts.AOF && s.opts.SentinelConf == "" {
		// aof-load-truncated no: an AOF cut inside a write is refused,
		// and Restart repairs it (RepairAOF says why)
		a = append(a, "--appendonly", "yes", "--appendfsync", "always", "--aof-load-truncated", "no")
	}
	if s.opts.Password != "" {
		a = append(a, "--requirepass", s.opts.Password)
	}
	return append(a, s.opts.Args...)
}

// spawn starts redis-server on s.port and waits until it answers PING.
// On failure the process is killed and reaped and a *startError returned.
func (s *Server) spawn() (*process, error) {
	var logOffset int64
	if fi, err := os.Stat(s.logPath()); err == nil {
		logOffset = fi.Size()
	}
	// Output before the logfile is opened (e.g. config errors) goes here.
	out, err := os.Create(s.stderrPath())
	if err != nil {
		return nil, fmt.Errorf("creating %s: %w", s.stderrPath(), err)
	}
	cmd := exec.Command(s.bin, s.args()...)
	cmd.Dir = s.dir
	if len(s.opts.Env) > 0 {
		cmd.Env = append(os.Environ(), s.opts.Env...)
	}
	cmd.Stdout = out // *os.File: passed directly, no copying goroutine
	cmd.Stderr = out
	cmd.SysProcAttr = sysProcAttr(s.opts.KillWithParent)
	err = cmd.Start()
	_ = out.Close()
	if err != nil {
		return nil, fmt.Errorf("exec %s: %w", s.bin, err)
	}
	p := &process{pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()

	if err := s.waitReady(p); err != nil {
		_ = p.signal(syscall.SIGKILL)
		<-p.done
		return nil, s.describe(err, p, logOffset)
	}
	return p, nil
}

// waitReady polls until p answers PING on s.Addr(), p exits, or
// s.opts.ReadyTimeout passes.
func (s *Server) waitReady(p *process) error {
	c := s.AdminClient(500 * time.Millisecond)
	defer c.Close()

	deadline := time.NewTimer(s.opts.ReadyTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	lastErr := errors.New("no probe completed")
	for {
		select {
		case <-p.done:
			return fmt.Errorf("redis-server exited before answering PING: %v", p.waitErr)
		case <-deadline.C:
			return fmt.Errorf("redis-server did not answer PING within %v (last error: %v)", s.opts.ReadyTimeout, lastErr)
		case <-tick.C:
		}
		if lastErr = s.probe(c, p.pid); lastErr == nil {
			return nil
		}
	}
}

// AdminClient returns a one-connection client of the server's current
// address that does not retry, authenticating with Options.Password, with
// timeout for each read and write and 40% of it to dial (the caller
// closes it).
func (s *Server) AdminClient(timeout time.Duration) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                     s.Addr(),
		Password:                 s.opts.Password,
		Protocol:                 2,
		DialTimeout:              timeout * 2 / 5,
		ReadTimeout:              timeout,
		WriteTimeout:             timeout,
		MaxRetries:               -1,
		PoolSize:                 1,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
}

// probe checks once that the redis-server with the given pid answers on
// s.Addr(). A LOADING reply or a different server on the port is an error.
func (s *Server) probe(c *redis.Client, pid int) error {
	conn, err := net.DialTimeout("tcp", s.Addr(), 200*time.Millisecond)
	if err != nil {
		return err
	}
	_ = conn.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("PING: %w", err)
	}
	// Make sure the answer came from our process, not from another
	// server that grabbed the port first.
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return fmt.Errorf("INFO: %w", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			if v != strconv.Itoa(pid) {
				return fmt.Errorf("port %d is served by another redis-server (pid %s, ours %d)", s.Port(), v, pid)
			}
			return nil
		}
	}
	return nil
}

// describe wraps err with the tail of this run's log and stderr output.
func (s *Server) describe(err error, p *process, logOffset int64) error {
	logTail := readTail(s.logPath(), logOffset)
	errTail := strings.TrimSpace(readTail(s.stderrPath(), 0))
	inUse := strings.Contains(logTail, "Address already in use") ||
		strings.Contains(errTail, "Address already in use")
	var b strings.Builder
	fmt.Fprintf(&b, "%s (pid %d, addr %s, dir %s)", err, p.pid, s.Addr(), s.dir)
	if errTail != "" {
		fmt.Fprintf(&b, "\n--- stdout/stderr ---\n%s", errTail)
	}
	if logTail == "" {
		logTail = "(empty)"
	}
	fmt.Fprintf(&b, "\n--- tail of %s ---\n%s", s.logPath(), logTail)
	return &startError{addrInUse: inUse, tornAOF: strings.Contains(logTail, tornAOFLog), msg: b.String()}
}

// readTail returns the last 20 lines of path starting at offset, or a
// note why it could not be read.
func readTail(path string, offset int64) string {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return ""
		}
		return fmt.Sprintf("(reading %s: %v)", path, err)
	}
	if offset > 0 && offset <= int64(len(data)) {
		data = data[offset:]
	}
	data = bytes.TrimRight(data, "\n")
	lines := bytes.Split(data, []byte("\n"))
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
