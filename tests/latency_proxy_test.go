package tests

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// latencyProxy forwards TCP connections on a loopback port to a target,
// delaying every chunk by delay in each direction (a slow link without
// netem or root; SetDelay changes it for chunks read after). It counts round trips: a client→server chunk sent while
// no request of its connection is waiting for a reply starts one; the
// first server→client chunk ends it. A pipeline is one round trip.
type latencyProxy struct {
	t      testing.TB
	ln     net.Listener
	target string
	delay  atomic.Int64 // a time.Duration
	trips  atomic.Int64
	mu     sync.Mutex
	conns  []net.Conn // guarded by mu
	closed bool       // guarded by mu
	wg     sync.WaitGroup
}

// startLatencyProxy listens on a free loopback port and forwards to
// target; it is closed when the test ends.
func startLatencyProxy(t testing.TB, target string, delay time.Duration) *latencyProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &latencyProxy{t: t, ln: ln, target: target}
	p.delay.Store(int64(delay))
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr is the proxy's host:port.
func (p *latencyProxy) Addr() string { return p.ln.Addr().String() }

// SetDelay makes every chunk read from now on wait d in each direction.
func (p *latencyProxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// RoundTrips is the number of round trips through the proxy so far.
func (p *latencyProxy) RoundTrips() int64 { return p.trips.Load() }

func (p *latencyProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		if !p.track(c, up) {
			return
		}
		var waiting atomic.Bool // a request of this connection awaits its reply
		p.wg.Add(2)
		go p.pipe(c, up, func() {
			if waiting.CompareAndSwap(false, true) {
				p.trips.Add(1)
			}
		})
		go p.pipe(up, c, func() { waiting.Store(false) })
	}
}

// track records a connection pair to close at the end; false when the
// proxy is already closed (the pair is closed then).
func (p *latencyProxy) track(c, up net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		_ = up.Close()
		return false
	}
	p.conns = append(p.conns, c, up)
	return true
}

type chunk struct {
	data []byte
	due  time.Time
}

// pipe copies from src to dst, each chunk delay after it was read, in
// order; seen runs when a chunk is read. Either side closing ends both.
func (p *latencyProxy) pipe(src, dst net.Conn, seen func()) {
	defer p.wg.Done()
	q := make(chan chunk, 4096)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range q {
			time.Sleep(time.Until(c.due))
			if _, err := dst.Write(c.data); err != nil {
				_ = src.Close() // ends the reader
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		k, err := src.Read(buf)
		if k > 0 {
			seen()
			q <- chunk{data: append([]byte(nil), buf[:k]...), due: time.Now().Add(time.Duration(p.delay.Load()))}
		}
		if err != nil {
			break
		}
	}
	close(q)
	<-done
	_ = src.Close()
	_ = dst.Close()
}

func (p *latencyProxy) close() {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.mu.Unlock()
	_ = p.ln.Close()
	for _, c := range conns {
		_ = c.Close()
	}
	p.wg.Wait()
}
