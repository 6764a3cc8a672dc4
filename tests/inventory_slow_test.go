package tests

import (
	"io"
	"maps"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/rollback"
)

// slowProxy forwards TCP connections to a Redis server, delaying every
// chunk the client sends by delay: each command round trip takes at least
// delay longer, and the server stays healthy.
type slowProxy struct {
	ln    net.Listener
	to    string
	delay time.Duration
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

func newSlowProxy(t *testing.T, to string, delay time.Duration) *slowProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &slowProxy{ln: ln, to: to, delay: delay}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *slowProxy) addr() string { return p.ln.Addr().String() }

func (p *slowProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.to)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			_, _ = io.Copy(c, up)
			_ = c.Close()
		}()
		go func() {
			defer p.wg.Done()
			buf := make([]byte, 64<<10)
			for {
				k, err := c.Read(buf)
				if k > 0 {
					time.Sleep(p.delay)
					if _, werr := up.Write(buf[:k]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			_ = up.Close()
		}()
	}
}

func (p *slowProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// With one node 80 ms away (still UP) and parts on it due too, expired
// parts on the healthy nodes must settle within reconcile_interval + 3 s
// of their deadline: the reconciler works nodes concurrently and settles
// a node's due parts concurrently, whose order homes include the slow
// node. Two instances share the work. Decided one at a time, the healthy
// parts' orders homed on the slow node alone (about a third of 300) would
// take 100 × 80 ms = 8 s; concurrently they settled 0.4–0.7 s after the
// last deadline here, idle or with two busy loops beside. The 3 s leave
// room for a machine whose cores other test packages and work share: with
// 1 s, a clean-clone make test with one core busy elsewhere failed it.
func TestInvSlowNodeDoesNotDelayExpiry(t *testing.T) {
	slowHealth := invFastHealth
	slowHealth.Timeout = time.Second // 80 ms per command must not mark it down
	c := newInvCluster(t, invOpts{health: &slowHealth})
	ctx := invCtx(t, 90*time.Second)
	const perNode = 150
	const interval = 200 * time.Millisecond
	c.load("r", "slow-sku", 3*perNode+30, 0)
	ttl := 4 * time.Second
	var healthy []string
	healthy = append(healthy, invReserveOn(t, c, "sl-a", "slow-sku", "n1", perNode, ttl)...)
	healthy = append(healthy, invReserveOn(t, c, "sl-b", "slow-sku", "n2", perNode, ttl)...)
	onSlow := invReserveOn(t, c, "sl-c", "slow-sku", "n3", 60, ttl)

	// Two more "processes" that reach n3 through the proxy.
	proxy := newSlowProxy(t, c.srv["n3"].Addr(), 80*time.Millisecond)
	cfg := *c.cfg
	cfg.Nodes = maps.Clone(cfg.Nodes)
	n3 := cfg.Nodes["n3"]
	n3.Addr = proxy.addr()
	cfg.Nodes["n3"] = n3
	cfg.Inventory.ReconcileInterval = interval
	orig := c.cfg
	c.cfg = &cfg
	r2, inv2 := c.newInventory(t, nil)
	_, inv3 := c.newInventory(t, nil)
	c.cfg = orig
	slow, err := r2.Node("n3")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := slow.Client().Ping(ctx).Err(); err != nil {
		t.Fatalf("ping through the proxy: %v", err)
	}
	if d := time.Since(start); d < 80*time.Millisecond {
		t.Fatalf("a command through the proxy took %v, want >= 80ms", d)
	}

	recs := []*rollback.Reconciler{
		c.reconciler(inv2, nil, rollback.Settings{Interval: interval}),
		c.reconciler(inv3, nil, rollback.Settings{Interval: interval}),
	}
	for _, r := range recs {
		r.Start()
	}

	// The latest part deadline on the healthy nodes, by their index.
	var last float64
	for _, name := range []string{"n1", "n2"} {
		zs := c.clients[name].ZRangeWithScores(ctx, "inv:pending", -1, -1).Val()
		if len(zs) == 1 && zs[0].Score > last {
			last = zs[0].Score
		}
	}
	if last == 0 {
		t.Fatal("no pending parts on n1, n2")
	}
	const allowance = interval + 3*time.Second
	due := time.UnixMilli(int64(last)).Add(allowance)
	healthyClients := map[string]*redis.Client{"n1": c.clients["n1"], "n2": c.clients["n2"]}
	for {
		left, err := invPendingOf(ctx, healthyClients, healthy)
		if err == nil && len(left) == 0 {
			break
		}
		if time.Now().After(due) {
			t.Fatalf("%d parts on healthy nodes still pending %v after the last deadline (err %v)",
				len(left), allowance, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("healthy nodes settled %v after the last deadline", time.Since(due.Add(-allowance)))
	if slow.State() != node.StateUp {
		t.Errorf("slow node n3 is %v (%v), want still UP", slow.State(), slow.DownReason())
	}
	invWaitSettled(t, c, onSlow, 30*time.Second)
	// A part's state is visible on n3 about 80 ms before the reply that
	// lets its reconciler count it comes back through the proxy: wait for
	// the counts, then make sure no part is counted twice.
	cancelled := func() int64 {
		var n int64
		for _, r := range recs {
			n += r.Stats().Cancelled
		}
		return n
	}
	want := int64(len(healthy) + len(onSlow))
	for end := time.Now().Add(5 * time.Second); cancelled() < want && time.Now().Before(end); {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(3 * interval)
	if got := cancelled(); got != want {
		t.Errorf("reconcilers cancelled %d parts, want %d (each once)", got, want)
	}
}
