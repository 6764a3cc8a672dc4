package cache_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardis/shardis/cache"
)

// blackholeProxy forwards TCP to a Redis server; Blackhole makes every
// pub/sub connection open at that time drop all bytes both ways without
// closing (what a NAT or firewall that forgot an idle connection does),
// while the other connections, and new ones, keep working.
type blackholeProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	pairs []*bhPair
}

type bhPair struct {
	client, server net.Conn
	sub, dead      atomic.Bool
}

func newBlackholeProxy(t *testing.T, target string) *blackholeProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &blackholeProxy{ln: ln}
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, pr := range p.pairs {
			_ = pr.client.Close()
			_ = pr.server.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			pr := &bhPair{client: c, server: u}
			p.mu.Lock()
			p.pairs = append(p.pairs, pr)
			p.mu.Unlock()
			go pr.pump(u, c, true)
			go pr.pump(c, u, false)
		}
	}()
	return p
}

func (pr *bhPair) pump(dst, src net.Conn, fromClient bool) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		k, err := src.Read(buf)
		if k > 0 {
			if fromClient && bytes.Contains(bytes.ToLower(buf[:k]), []byte("subscribe")) {
				pr.sub.Store(true)
			}
			if !pr.dead.Load() {
				if _, werr := dst.Write(buf[:k]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// Blackhole silences the pub/sub connections open now; it returns how many.
func (p *blackholeProxy) Blackhole() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, pr := range p.pairs {
		if pr.sub.Load() {
			pr.dead.Store(true)
			n++
		}
	}
	return n
}

// A subscription whose connection went silent (no error, no close: the
// path dropped it) looks healthy to a reader that only waits for
// messages: every invalidation sent on it is lost, and the instance's L1
// serves the old value until L1TTL while its reads of the node still work.
// The subscriber must notice the silence (it hears nothing, not even a
// reply to a PING) and drop the L1 as for any broken subscription.
func TestReview6SilentSubscriptionIsNoticed(t *testing.T) {
	e := newEnv(t, 1)
	p := newBlackholeProxy(t, e.srv[0].Addr())
	rB := e.routerVia(t, "n1", p.ln.Addr().String())
	opts := cache.Options{TTL: time.Minute, L1Size: 100}
	a := e.caches(opts)[0]
	b, err := cache.New(rB, "cache", "r", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	var key string
	for i := 0; key == ""; i++ { // a key whose only copy is on n1
		k := fmt.Sprintf("sku%d", i)
		if n, err := e.rtrs[0].Pick("cache", "r", k); err == nil && n.Name() == "n1" {
			key = k
		}
	}
	noLoad := func(context.Context, string) ([]byte, error) { return nil, errors.New("no load expected") }
	// B's subscription on n1 is made once an invalidation reaches it.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if err := a.Set(e.ctx, key, []byte("v1")); err != nil {
			t.Fatal(err)
		}
		if b.Stats().Invalidations > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("B heard no invalidation")
		}
	}
	if v, err := b.Get(e.ctx, key, noLoad); err != nil || string(v) != "v1" {
		t.Fatalf("B's first read: %q, %v", v, err)
	}
	if n := p.Blackhole(); n == 0 {
		t.Fatal("no pub/sub connection through the proxy")
	}
	if v, err := b.Get(e.ctx, key, noLoad); err != nil || string(v) != "v1" { // in B's L1
		t.Fatalf("B's second read: %q, %v", v, err)
	}
	if err := a.Set(e.ctx, key, []byte("v2")); err != nil {
		t.Fatal(err)
	}
	var v []byte
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if v, err = b.Get(e.ctx, key, noLoad); err == nil && string(v) == "v2" {
			return
		}
	}
	t.Fatalf("B still reads %q, %v 15s after Set(v2) (its subscription on n1 went silent; n1 usable to B: reads work)", v, err)
}
