package bench

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

	"github.com/shardis/shardis/internal/redisproc"
)

// Twemproxy is a nutcracker child process proxying one ketama pool over
// the benchmark's nodes.
type Twemproxy struct {
	addr string
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// NutcrackerVersion returns "nutcracker-x.y.z", or "" when it is missing.
func NutcrackerVersion() string {
	out, err := exec.Command("nutcracker", "--version").CombinedOutput()
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimPrefix(strings.TrimSpace(line), "This is ")
}

// StartTwemproxy writes a nutcracker configuration (distribution ketama,
// redis: true, one server line "addr:1 name" per node, in the given
// order) and starts nutcracker on a free loopback port, as a child in its
// own process group that the kernel kills if this process dies. It
// returns once the proxy answers PING through every node.
func StartTwemproxy(names, addrs []string) (*Twemproxy, error) {
	bin, err := exec.LookPath("nutcracker")
	if err != nil {
		return nil, fmt.Errorf("nutcracker (twemproxy) not found in PATH; run `make deps-bench`: %w", err)
	}
	dir, err := os.MkdirTemp("", "bench-twemproxy-*")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := redisproc.FreePort()
		if err != nil {
			return nil, err
		}
		stats, err := redisproc.FreePort()
		if err != nil {
			return nil, err
		}
		t, err := spawnTwemproxy(bin, dir, port, stats, names, addrs)
		if err == nil {
			return t, nil
		}
		lastErr = err
	}
	_ = os.RemoveAll(dir)
	return nil, lastErr
}

func spawnTwemproxy(bin, dir string, port, stats int, names, addrs []string) (*Twemproxy, error) {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	var b strings.Builder
	fmt.Fprintf(&b, "bench:\n  listen: %s\n  hash: fnv1a_64\n  distribution: ketama\n  redis: true\n", addr)
	b.WriteString("  auto_eject_hosts: false\n  preconnect: true\n  timeout: 1000\n  servers:\n")
	for i, a := range addrs {
		fmt.Fprintf(&b, "   - %s:1 %s\n", a, names[i])
	}
	conf := filepath.Join(dir, "nutcracker.yml")
	if err := os.WriteFile(conf, []byte(b.String()), 0o644); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "nutcracker.log")
	cmd := exec.Command(bin, "-c", conf, "-o", logPath, "-a", "127.0.0.1", "-s", strconv.Itoa(stats), "-v", "4")
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting nutcracker: %w", err)
	}
	t := &Twemproxy{addr: addr, dir: dir, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(t.done) }()

	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true, MaxRetries: -1,
		Dialer: TwemproxyDialer(200 * time.Millisecond), ReadTimeout: time.Second, PoolSize: 1})
	defer c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		select {
		case <-t.done:
			log, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("nutcracker exited at start: %s", tail(string(log), 600))
		default:
		}
		// GET of a key on every node proves each backend is reachable.
		ok := c.Ping(context.Background()).Err() == nil
		for i := 0; ok && i < 30; i++ {
			if err := c.Get(context.Background(), "probe:"+strconv.Itoa(i)).Err(); err != nil && !errors.Is(err, redis.Nil) {
				ok = false
			}
		}
		if ok {
			return t, nil
		}
		if time.Now().After(deadline) {
			t.killProc()
			log, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("nutcracker on %s did not answer within 5s: %s", addr, tail(string(log), 600))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Addr returns the proxy's listen address.
func (t *Twemproxy) Addr() string { return t.addr }

// Pid returns nutcracker's process id.
func (t *Twemproxy) Pid() int { return t.cmd.Process.Pid }

// Kill SIGKILLs nutcracker's process group, waits for it to exit and
// removes its directory. It is idempotent.
func (t *Twemproxy) Kill() {
	if t == nil {
		return
	}
	t.killProc()
	_ = os.RemoveAll(t.dir)
}

func (t *Twemproxy) killProc() {
	_ = syscall.Kill(-t.cmd.Process.Pid, syscall.SIGKILL)
	<-t.done
}

// TwemproxyDialer returns a go-redis Dialer for twemproxy. go-redis v9
// opens every connection with HELLO (even for Protocol 2), a command
// twemproxy 0.5 does not know: it closes the connection, so the client
// never gets one (go-redis issue #2616). The dialer answers that one HELLO
// itself with an error reply, as an old Redis would, and go-redis goes on
// with RESP2; every later byte passes through untouched, and the
// connection still exposes its socket (syscall.Conn) to go-redis's pool
// health checks like a plain TCP connection does.
func TwemproxyDialer(timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout, KeepAlive: 5 * time.Minute}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &helloShim{TCPConn: c.(*net.TCPConn)}, nil
	}
}

type helloShim struct {
	*net.TCPConn
	checked bool
	pending []byte
}

var helloCmd = []byte("$5\r\nhello\r\n")

func (c *helloShim) Write(b []byte) (int, error) {
	if !c.checked {
		c.checked = true
		// "*<n>\r\n$5\r\nhello\r\n…": HELLO is always the first command.
		if i := bytes.Index(b, []byte("\r\n")); len(b) > 0 && b[0] == '*' && i > 0 &&
			len(b) >= i+2+len(helloCmd) && bytes.EqualFold(b[i+2:i+2+len(helloCmd)], helloCmd) {
			c.pending = []byte("-ERR unknown command 'HELLO'\r\n")
			return len(b), nil
		}
	}
	return c.TCPConn.Write(b)
}

func (c *helloShim) Read(b []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(b, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.TCPConn.Read(b)
}

func tail(s string, n int) string {
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return strings.TrimSpace(s)
}
