package cache_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/cache"
	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/router"
)

// A "not found" marker lives NegativeTTL (package doc: "leaves a marker
// for Options.NegativeTTL"); with L1 on, it must not hide a key created
// after that for the L1's TTL (default: the value TTL, 5 min).
func TestL1NegativeMarkerLivesNegativeTTL(t *testing.T) {
	e := newEnv(t, 1)
	c := e.caches(cache.Options{TTL: time.Minute, NegativeTTL: 300 * time.Millisecond, L1Size: 100})[0]
	time.Sleep(300 * time.Millisecond) // subscriptions made
	var exists atomic.Bool
	load := func(ctx context.Context, key string) ([]byte, error) {
		if !exists.Load() {
			return nil, cache.ErrNotFound
		}
		return []byte("created"), nil
	}
	if _, err := c.Get(e.ctx, "sku", load); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("first Get = %v, want ErrNotFound", err)
	}
	exists.Store(true)      // the row is created (no Invalidate: the marker's TTL bounds this)
	time.Sleep(time.Second) // > 3 NegativeTTL
	v, err := c.Get(e.ctx, "sku", load)
	if err != nil || string(v) != "created" {
		t.Fatalf("Get 1s after the row was created, NegativeTTL 300ms: %q, %v; want \"created\" (the marker expired in Redis: %v)",
			v, err, redisHas(t, e, "sku"))
	}
}

func redisHas(t *testing.T, e *env, key string) bool {
	for _, s := range e.srv {
		if n, _ := s.Client(t).Keys(e.ctx, "shardis:cache:*:k:"+key).Result(); len(n) > 0 {
			return true
		}
	}
	return false
}

// gateHook holds a GET of one cache key after its reply arrived, until
// released.
type gateHook struct {
	suffix   string
	armed    atomic.Bool
	replied  chan struct{}
	released chan struct{}
}

func (h *gateHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *gateHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.hold(cmd)
		}
		return err
	}
}

func (h *gateHook) hold(cmd redis.Cmder) {
	if cmd.Name() == "get" && len(cmd.Args()) > 1 && strings.HasSuffix(cmd.Args()[1].(string), h.suffix) && h.armed.CompareAndSwap(true, false) {
		close(h.replied)
		<-h.released
	}
}
func (h *gateHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.hold(cmd)
		return err
	}
}

var _ = net.Dial

// A plain read (a hit in Redis, no fill) that got the old value before a
// Set, and puts it in L1 after the Set's invalidation reached this
// instance, keeps serving the old value from L1 until L1TTL, although the
// invalidation arrived (no publish was lost) and Redis holds the new value.
func TestL1DropsAReadRacingAnInvalidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	cs := e.caches(cache.Options{TTL: time.Minute, L1Size: 100})
	time.Sleep(300 * time.Millisecond) // subscriptions made
	reader, writer := cs[0], cs[1]
	if err := writer.Set(e.ctx, "item", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	h := &gateHook{suffix: ":k:item", replied: make(chan struct{}), released: make(chan struct{})}
	for _, name := range []string{"n1", "n2", "n3"} {
		n, _ := e.rtrs[0].Node(name)
		n.Client().AddHook(h)
	}
	h.armed.Store(true)
	got := make(chan string, 1)
	go func() {
		v, err := reader.Get(e.ctx, "item", func(context.Context, string) ([]byte, error) { return nil, errors.New("no load") })
		got <- string(v) + " " + errOf(err)
	}()
	select { // the reader's GET answered v1
	case <-h.replied:
	case <-time.After(10 * time.Second):
		t.Fatal("the reader's GET was not seen")
	}
	inv := reader.Stats().Invalidations
	if err := writer.Set(e.ctx, "item", []byte("v2")); err != nil {
		t.Fatal(err)
	}
	for reader.Stats().Invalidations == inv { // the reader's instance dropped "item" from its L1
		time.Sleep(time.Millisecond)
	}
	close(h.released)
	t.Logf("read that raced the Set: %s", <-got)
	time.Sleep(500 * time.Millisecond)
	v, err := reader.Get(e.ctx, "item", func(context.Context, string) ([]byte, error) { return nil, errors.New("no load") })
	if err != nil || string(v) != "v2" {
		t.Fatalf("Get 500ms after Set(v2) returned and its invalidation reached this instance: %q, %v; want \"v2\" (Redis holds v2)", v, err)
	}
}

func errOf(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

func waitUsable(t *testing.T, e *env, name string, want bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for _, r := range e.rtrs {
		n, _ := r.Node(name)
		for n.Usable() != want {
			if time.Now().After(deadline) {
				t.Fatalf("node %s usable=%v not reached", name, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// Set while a copy's node is unusable (paused, or partitioned from this
// instance) skips that copy and reports success; the copy keeps the value
// from before the Set and is served again once the node is back, for up to
// a whole TTL. For a key whose only copy is there, Set stores nothing and
// still returns nil.
func TestSetReportsAnUnusableCopy(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	cs := e.caches(cache.Options{TTL: time.Minute, Replicas: func(key string) int {
		if strings.HasPrefix(key, "hot") {
			return 3
		}
		return 1
	}})
	a, b := cs[0], cs[1]
	var cold string
	for i := 0; cold == ""; i++ {
		k := "cold" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		if n, err := e.rtrs[0].Pick("cache", "r", k); err == nil && n.Name() == "n2" {
			cold = k
		}
	}
	for _, k := range []string{"hot", cold} {
		if err := a.Set(e.ctx, k, []byte("v1")); err != nil {
			t.Fatal(err)
		}
	}
	e.srv[1].Pause()
	waitUsable(t, e, "n2", false)
	errHot := a.Set(e.ctx, "hot", []byte("v2"))
	errCold := a.Set(e.ctx, cold, []byte("v2"))
	e.srv[1].Resume()
	waitUsable(t, e, "n2", true)
	noLoad := func(context.Context, string) ([]byte, error) { return nil, errors.New("no load") }
	stale := 0
	for i := 0; i < 200; i++ {
		if v, err := b.Get(e.ctx, "hot", noLoad); err == nil && string(v) == "v1" {
			stale++
		}
	}
	vc, errc := b.Get(e.ctx, cold, noLoad)
	t.Logf("Set(hot, v2) = %v; Set(%s, v2) = %v; after n2 is back: %d of 200 reads of hot return v1; %s reads %q, %v", errHot, cold, errCold, stale, cold, vc, errc)
	if errHot == nil && stale > 0 {
		t.Errorf("Set(hot, v2) returned nil, yet %d of 200 later reads return the pre-Set value v1", stale)
	}
	if errCold == nil && string(vc) == "v1" {
		t.Errorf("Set(%s, v2) returned nil, yet a later read returns the pre-Set value v1", cold)
	}
}

// The in-process single flight runs the fill under the first caller's
// context: a caller that joins it with a live context gets the first
// caller's cancellation, and waits past its own deadline for the fill.
func TestSingleFlightJoinerKeepsItsContext(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	c := e.caches(cache.Options{})[0]
	started := make(chan struct{})
	var once atomic.Bool
	load := func(ctx context.Context, key string) ([]byte, error) {
		if once.CompareAndSwap(false, true) {
			close(started)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
			return []byte("v"), nil
		}
	}
	lctx, cancel := context.WithCancel(e.ctx)
	go func() { _, _ = c.Get(lctx, "k", load) }()
	<-started
	type res struct {
		v   string
		err error
	}
	out := make(chan res, 1)
	go func() { v, err := c.Get(e.ctx, "k", load); out <- res{string(v), err} }()
	time.Sleep(50 * time.Millisecond) // joined the flight
	cancel()                          // the first caller gives up
	r := <-out
	if r.err != nil {
		t.Errorf("a caller with a live context got %v (the first caller's cancellation), want the value", r.err)
	}
	// A waiter's own deadline: the fill takes 1s, the waiter allows 50ms
	// (and gets 450ms more for a loaded machine's scheduling).
	once.Store(true)
	go func() { _, _ = c.Get(e.ctx, "k2", load) }()
	time.Sleep(50 * time.Millisecond)
	sctx, scancel := context.WithTimeout(e.ctx, 50*time.Millisecond)
	defer scancel()
	start := time.Now()
	_, err := c.Get(sctx, "k2", load)
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("a caller with a 50ms deadline returned after %v (%v): it waited out the other caller's fill", d, err)
	}
}

// cutProxy forwards TCP to a node until cut: then it closes every
// connection and refuses new ones (this instance's path to the node is
// broken; other instances still reach it).
type cutProxy struct {
	ln    net.Listener
	cut   atomic.Bool
	mu    chan struct{}
	conns []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, mu: make(chan struct{}, 1)}
	t.Cleanup(func() { _ = ln.Close(); p.closeAll() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if p.cut.Load() {
				_ = c.Close()
				continue
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu <- struct{}{}
			p.conns = append(p.conns, c, u)
			<-p.mu
			go func() { _, _ = copyConn(u, c) }()
			go func() { _, _ = copyConn(c, u) }()
		}
	}()
	return p
}

func copyConn(dst, src net.Conn) (int64, error) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	var n int64
	for {
		k, err := src.Read(buf)
		if k > 0 {
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return n, werr
			}
			n += int64(k)
		}
		if err != nil {
			return n, err
		}
	}
}

func (p *cutProxy) closeAll() {
	p.mu <- struct{}{}
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
	<-p.mu
}

func (p *cutProxy) Cut() { p.cut.Store(true); p.closeAll() }

// Mend lets new connections through again.
func (p *cutProxy) Mend() { p.cut.Store(false) }

// routerVia returns a router of e's configuration whose node name is
// reached at addr (a proxy in front of it), closed with the test.
func (e *env) routerVia(t *testing.T, name, addr string) *router.Router {
	t.Helper()
	cfg := *e.cfg
	cfg.Nodes = map[string]config.Node{}
	for k, v := range e.cfg.Nodes {
		cfg.Nodes[k] = v
	}
	nb := cfg.Nodes[name]
	nb.Addr = addr
	cfg.Nodes[name] = nb
	r, err := router.New(e.ctx, &cfg, router.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// An instance whose subscription on one node is down (its path to that
// node is cut; the other instances still reach it) keeps filling and
// serving its L1 from the other nodes; a Set elsewhere publishes on that
// node only, so the instance never hears of it and serves the old value
// from L1 until L1TTL, although Redis holds the new value on every copy.
// The package promises the L1 is dropped whenever a subscription breaks:
// it is dropped once, at the break, not for the gap.
func TestInvalidationReachesAnL1FilledDuringASubscriptionGap(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	p := newCutProxy(t, e.srv[0].Addr())
	rB := e.routerVia(t, "n1", p.ln.Addr().String())
	opts := cache.Options{TTL: time.Minute, L1Size: 100, Replicas: func(string) int { return 2 }}
	a := e.caches(opts)[0]
	b, err := cache.New(rB, "cache", "r", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	time.Sleep(300 * time.Millisecond) // subscriptions made
	var key string
	for i := 0; key == ""; i++ {
		k := fmt.Sprintf("hot%d", i)
		if n, err := e.rtrs[0].Pick("cache", "r", k); err == nil && n.Name() == "n1" {
			key = k
		}
	}
	if err := a.Set(e.ctx, key, []byte("v1")); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	n1B, _ := rB.Node("n1")
	for deadline := time.Now().Add(10 * time.Second); n1B.Usable(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("n1 still usable to B")
		}
	}
	time.Sleep(700 * time.Millisecond) // B's session on n1 ended and its L1 was dropped
	noLoad := func(context.Context, string) ([]byte, error) { return nil, errors.New("no load") }
	if v, err := b.Get(e.ctx, key, noLoad); err != nil || string(v) != "v1" { // from the copy on n2/n3, into B's L1
		t.Fatalf("B's read: %q, %v", v, err)
	}
	if err := a.Set(e.ctx, key, []byte("v2")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	v, err := b.Get(e.ctx, key, noLoad)
	if err != nil || string(v) != "v2" {
		t.Fatalf("B reads %q, %v 500ms after Set(v2) wrote every copy; want \"v2\"", v, err)
	}
}

// A value read from Redis near the end of its TTL goes into L1 for a whole
// L1TTL: it is served up to TTL+L1TTL after it was loaded ("values live
// TTL ± jitter"; "L1TTL bounds how long an entry stays in L1").
func TestL1LivesNoLongerThanRedisTTL(t *testing.T) {
	e := newEnv(t, 2)
	cs := e.caches(cache.Options{TTL: time.Second, Jitter: 0.05, L1Size: 100})
	time.Sleep(300 * time.Millisecond) // subscriptions made
	var version atomic.Int64
	load := func(context.Context, string) ([]byte, error) { return []byte(fmt.Sprint(version.Load())), nil }
	if _, err := cs[0].Get(e.ctx, "row", load); err != nil { // loaded at t0, lives 0.95..1.05s
		t.Fatal(err)
	}
	t0 := time.Now()
	version.Store(1) // the row changes, with no Invalidate: the TTL bounds this
	time.Sleep(800 * time.Millisecond)
	if v, err := cs[1].Get(e.ctx, "row", load); err != nil || string(v) != "0" { // a Redis hit, into the L1 of instance 1
		t.Fatalf("read at t0+0.8s: %q, %v", v, err)
	}
	time.Sleep(time.Until(t0.Add(1500 * time.Millisecond)))
	v, err := cs[1].Get(e.ctx, "row", load)
	if err != nil || string(v) != "1" {
		t.Fatalf("read at t0+1.5s (TTL 1s ± 5%%): %q, %v; want the reloaded \"1\"", v, err)
	}
}
