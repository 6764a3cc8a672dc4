package pgsync_test

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardis/shardis/pgsync"
)

// cutProxy forwards TCP connections to PostgreSQL. Armed, it lets the
// next COMMIT a client sends through, swallows the server's answer and
// cuts the connection: the transaction is committed, the client cannot
// know (the outcome of its COMMIT is unknown to it). When the test ends
// it closes its listener and every connection, and waits for its
// goroutines.
type cutProxy struct {
	ln    net.Listener
	to    string
	armed atomic.Int32
	cuts  atomic.Int32
	wg    sync.WaitGroup // serve and the forwarding goroutines

	mu    sync.Mutex
	conns map[net.Conn]bool // open, both sides (track, untrack); nil once closed
}

func startCutProxy(t *testing.T, to string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, to: to, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

// close closes the listener and every open connection, and waits for
// the proxy's goroutines.
func (p *cutProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}

// track adds c and s to the open connections; false (both closed) once
// the proxy is closed.
func (p *cutProxy) track(c, s net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		_ = c.Close()
		_ = s.Close()
		return false
	}
	p.conns[c], p.conns[s] = true, true
	return true
}

// untrack closes c and s and takes them off the open connections.
func (p *cutProxy) untrack(c, s net.Conn) {
	_ = c.Close()
	_ = s.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c) // a no-op on the nil map once closed
	delete(p.conns, s)
}

func (p *cutProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.to)
		if err != nil {
			_ = c.Close()
			continue
		}
		if !p.track(c, s) {
			return
		}
		var cut atomic.Bool
		p.wg.Add(2)
		go func() { // client → server
			defer p.wg.Done()
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					if p.armed.Load() > 0 && bytes.Contains(bytes.ToLower(buf[:n]), []byte("commit\x00")) && p.armed.Add(-1) >= 0 {
						cut.Store(true)
					}
					if _, werr := s.Write(buf[:n]); werr != nil {
						break
					}
					if cut.Load() {
						time.Sleep(200 * time.Millisecond) // the server commits
						p.cuts.Add(1)
						break
					}
				}
				if err != nil {
					break
				}
			}
			p.untrack(c, s)
		}()
		go func() { // server → client, nothing once cut
			defer p.wg.Done()
			buf := make([]byte, 64<<10)
			for {
				n, err := s.Read(buf)
				if n > 0 && !cut.Load() {
					if _, werr := c.Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			p.untrack(c, s)
		}()
	}
}

// A landing whose COMMIT reaches PostgreSQL but whose answer never
// reaches the sync (the connection cut while COMMIT is in flight), again
// and again: the sync retries from the position it knows, finds the
// database's, and lands every part once with its final state; every
// position reaches its queue's head.
func TestSyncCommitOutcomeUnknown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	skus := [][2]string{{"one", "d"}}
	e.loadStock("one", "d", 1000)
	host := strings.SplitN(strings.SplitN(e.pgURL, "@", 2)[1], "/", 2)[0] // postgres://user@host:port/db
	p := startCutProxy(t, host)
	dsn := strings.Replace(e.pgURL, host, p.ln.Addr().String(), 1)
	pool, err := pgsync.Connect(ctx, dsn, 3, pgsync.Settings{}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	m := pgsync.NewMetrics(nil)
	s := pgsync.New(e.inv, pool, pgsync.Settings{Batch: 3, PollInterval: 20 * time.Millisecond,
		SettleInterval: 100 * time.Millisecond, RetryBackoff: 100 * time.Millisecond, Logger: testLog(t), Metrics: m})
	s.Start()
	defer s.Close()
	for round := range 6 {
		p.armed.Store(2)
		e.reserveN("r"+string(rune('a'+round)), "one", "d", 7, time.Minute)
		for i := range 7 {
			id := "r" + string(rune('a'+round)) + "-" + string(rune('0'+i))
			switch i % 3 {
			case 0:
				_, _ = e.inv.Confirm(ctx, id)
			case 1:
				_, _ = e.inv.Cancel(ctx, id)
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	p.armed.Store(0)
	if p.cuts.Load() == 0 {
		t.Fatal("no COMMIT was cut")
	}
	t.Logf("%d COMMITs cut", p.cuts.Load())
	e.waitConsistent(20*time.Second, skus, nil)
	var dup int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT node, part_id FROM stock_movements GROUP BY 1, 2 HAVING count(*) > 1) d`).Scan(&dup); err != nil || dup != 0 {
		t.Errorf("parts with more than one row: %d %v", dup, err)
	}
}
