package redistest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/internal/redisproc"
)

// The pool: a server started with the zero Options that its test never
// killed, stopped, restarted, paused or resumed is not killed when the
// test ends but reset and kept for the next Start of this process that
// asks for the zero Options. Starting a redis-server costs about 40 ms of
// CPU (the dynamic loader's relocations, page faults, the event loop) and
// make test starts over a thousand; a reset costs a few commands.
//
// A reset server is a new server as far as a test can tell:
//   - it moves to a new port first (redisproc.Rebind), so a client left
//     over from the earlier test that dials again is refused, as it was
//     when the server was killed, and cannot reach the next test's data;
//     every connection still open is closed;
//   - its data, scripts and functions are flushed, its statistics, slow
//     log and latency history reset, a CLIENT PAUSE lifted, and every
//     configuration parameter a test changed set back to its value at
//     start; files a test made in its folder (a SAVE's dump.rdb) removed.
//
// A server the reset cannot bring back (a replica, an ACL user added, a
// parameter that will not go back, a server busy past the reset's
// deadline) is killed instead, as every server was before. The pooled
// servers live until this process exits (Linux: Pdeathsig kills them);
// their folders are in one folder per process under os.TempDir(), which a
// later process removes once this one is gone.
var pool struct {
	mu   sync.Mutex
	idle []*pooled // reset, waiting for a Start
}

// pooled is a server that may go back to the pool.
type pooled struct {
	srv  *redisproc.Server
	base map[string]string // CONFIG GET * when it started, without port
	acl  []string          // ACL LIST when it started
}

var poolRoot = sync.OnceValues(func() (string, error) {
	sweepPoolRoots()
	return os.MkdirTemp("", fmt.Sprintf("shardis-redistest-%d-", os.Getpid()))
})

// sweepPoolRoots removes the pool folders of processes that are gone.
func sweepPoolRoots() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "shardis-redistest-*-*"))
	for _, d := range dirs {
		pid, err := strconv.Atoi(strings.Split(filepath.Base(d), "-")[2])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(d)
		}
	}
}

// takeIdle returns a reset server that is still running, or nil.
func takeIdle() *pooled {
	pool.mu.Lock()
	defer pool.mu.Unlock()
	for len(pool.idle) > 0 {
		p := pool.idle[len(pool.idle)-1]
		pool.idle = pool.idle[:len(pool.idle)-1]
		if p.srv.Running() {
			return p
		}
		_ = p.srv.Close()
		_ = os.RemoveAll(p.srv.Dir())
	}
	return nil
}

func putIdle(p *pooled) {
	pool.mu.Lock()
	pool.idle = append(pool.idle, p)
	pool.mu.Unlock()
}

// startPooled starts a server with the zero Options in a folder of the
// pool's, and records what its reset restores.
func startPooled() (*pooled, error) {
	root, err := poolRoot()
	if err != nil {
		return nil, fmt.Errorf("redistest: pool folder: %w", err)
	}
	dir, err := os.MkdirTemp(root, "srv-")
	if err != nil {
		return nil, fmt.Errorf("redistest: pool folder: %w", err)
	}
	srv, err := redisproc.Start(redisproc.Options{Dir: dir, KillWithParent: true})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	p := &pooled{srv: srv}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := srv.AdminClient(2 * time.Second)
	defer c.Close()
	if p.base, err = configAll(ctx, c); err == nil {
		p.acl, err = c.ACLList(ctx).Result()
	}
	if err != nil {
		p.discard()
		return nil, fmt.Errorf("redistest: reading the new server's configuration: %w", err)
	}
	return p, nil
}

// discard kills the server and removes its folder.
func (p *pooled) discard() {
	_ = p.srv.Kill()
	_ = p.srv.Close()
	_ = os.RemoveAll(p.srv.Dir())
}

// reset makes the server as new (see the pool's comment), or fails; the
// caller then discards it.
func (p *pooled) reset() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	port, err := redisproc.FreePort()
	if err != nil {
		return err
	}
	if err := p.srv.Rebind(ctx, port); err != nil {
		return err
	}
	c := p.srv.AdminClient(2 * time.Second)
	defer c.Close()
	if err := run(ctx, c,
		[]any{"CLIENT", "UNPAUSE"},
		[]any{"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"},
		[]any{"CLIENT", "KILL", "TYPE", "pubsub", "SKIPME", "yes"},
		[]any{"FLUSHALL", "SYNC"},
		[]any{"SCRIPT", "FLUSH", "SYNC"},
		[]any{"FUNCTION", "FLUSH", "SYNC"},
	); err != nil {
		return err
	}
	info, err := c.Info(ctx, "replication", "keyspace").Result()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "role:master") || !strings.Contains(info, "connected_slaves:0") || strings.Contains(info, "keys=") {
		return fmt.Errorf("not a primary without replicas and keys:\n%s", info)
	}
	if err := p.restoreConfig(ctx, c); err != nil {
		return err
	}
	if acl, err := c.ACLList(ctx).Result(); err != nil || !slices.Equal(acl, p.acl) {
		return fmt.Errorf("ACL LIST %v, %v; want %v", acl, err, p.acl)
	}
	if err := run(ctx, c, []any{"CONFIG", "RESETSTAT"}, []any{"SLOWLOG", "RESET"}, []any{"LATENCY", "RESET"}); err != nil {
		return err
	}
	return p.clearFolder()
}

// run sends cmds one after another, stopping at the first that fails.
func run(ctx context.Context, c *redis.Client, cmds ...[]any) error {
	for _, cmd := range cmds {
		if err := c.Do(ctx, cmd...).Err(); err != nil {
			return fmt.Errorf("%v: %w", cmd, err)
		}
	}
	return nil
}

// restoreConfig sets every parameter back to its value at start.
func (p *pooled) restoreConfig(ctx context.Context, c *redis.Client) error {
	for range 2 { // a second look: what was set back stays back
		now, err := configAll(ctx, c)
		if err != nil {
			return err
		}
		if maps.Equal(now, p.base) {
			return nil
		}
		for k, v := range p.base {
			if now[k] != v {
				if err := c.ConfigSet(ctx, k, v).Err(); err != nil {
					return fmt.Errorf("CONFIG SET %s %q: %w", k, v, err)
				}
			}
		}
	}
	return errors.New("the configuration did not go back to its value at start")
}

// clearFolder removes what a test made in the server's folder (a SAVE's
// dump.rdb), keeping the log.
func (p *pooled) clearFolder() error {
	ents, err := os.ReadDir(p.srv.Dir())
	if err != nil {
		return err
	}
	for _, e := range ents {
		if n := e.Name(); n != "redis.log" && n != "redis.stderr" {
			if err := os.RemoveAll(filepath.Join(p.srv.Dir(), n)); err != nil {
				return err
			}
		}
	}
	return nil
}

// configAll returns CONFIG GET * without the port (which a reset moves).
func configAll(ctx context.Context, c *redis.Client) (map[string]string, error) {
	m, err := c.ConfigGet(ctx, "*").Result()
	if err != nil {
		return nil, err
	}
	delete(m, "port")
	return m, nil
}
