package bench

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/router"
)

// lookupRouter returns a router over three real redis-server nodes (Pick
// needs them UP) with the benchmark's configuration, and the hand ring.
func lookupRouter(b *testing.B) (*router.Router, *router.Ring) {
	b.Helper()
	srvs := redistest.StartN(b, 3, redistest.Options{})
	addrs := make([]string, len(srvs))
	for i, s := range srvs {
		addrs[i] = s.Addr()
	}
	r, err := router.New(context.Background(), BenchConfig(addrs), router.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.Close() })
	ms := make([]router.Member, len(nodeNames))
	for i, n := range nodeNames {
		ms[i] = router.Member{Name: n, Weight: 1}
	}
	hand, err := router.NewRing(ms)
	if err != nil {
		b.Fatal(err)
	}
	return r, hand
}

// BenchmarkLookup is the routing-cost section as a Go benchmark:
// go test -run '^$' -bench Lookup -benchmem ./internal/bench/
func BenchmarkLookup(b *testing.B) {
	r, hand := lookupRouter(b)
	for _, bm := range LookupBenchmarks(r, hand) {
		b.Run(bm.Name, bm.F)
	}
}

func TestPercentile(t *testing.T) {
	xs := make([]int64, 100)
	for i := range xs {
		xs[i] = int64(i + 1)
	}
	if p := percentile(xs, 0.5); p != 50 {
		t.Errorf("p50 = %d, want 50", p)
	}
	if p := percentile(xs, 0.99); p != 99 {
		t.Errorf("p99 = %d, want 99", p)
	}
	if p := percentile(nil, 0.99); p != 0 {
		t.Errorf("empty p99 = %d", p)
	}
}

func TestHelloShim(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, tc := range []struct {
		first string
		local bool // answered by the shim, never sent
	}{
		{"*2\r\n$5\r\nhello\r\n$1\r\n2\r\n", true},
		{"*2\r\n$5\r\nHELLO\r\n$1\r\n2\r\n", true},
		{"*2\r\n$3\r\nget\r\n$1\r\nk\r\n", false},
	} {
		c, err := TwemproxyDialer(time.Second)(context.Background(), "tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		srv, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte(tc.first)); err != nil {
			t.Fatal(err)
		}
		// A second command always passes through.
		if _, err := c.Write([]byte("*1\r\n$4\r\nping\r\n")); err != nil {
			t.Fatal(err)
		}
		want := "*1\r\n$4\r\nping\r\n"
		if !tc.local {
			want = tc.first + want
		}
		got := make([]byte, len(want))
		_ = srv.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := io.ReadFull(srv, got); err != nil || string(got) != want {
			t.Errorf("%q: server read %q (%v), want %q", tc.first, got, err, want)
		}
		if tc.local {
			reply := make([]byte, 64)
			n, err := c.Read(reply)
			if err != nil || !strings.HasPrefix(string(reply[:n]), "-ERR") {
				t.Errorf("%q: client read %q (%v), want an error reply", tc.first, reply[:n], err)
			}
		}
		_ = c.Close()
		_ = srv.Close()
	}
}

func TestSeedScripts(t *testing.T) {
	srvs := redistest.StartN(t, 3, redistest.Options{})
	addrs := make([]string, len(srvs))
	for i, s := range srvs {
		addrs[i] = s.Addr()
	}
	r, err := router.New(context.Background(), BenchConfig(addrs), router.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := checkSeed(context.Background(), r.Nodes()); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkGet compares one GET through each client from many goroutines
// (RunParallel): go test -run '^$' -bench Get -benchmem -cpuprofile
// cpu.prof ./internal/bench/ shows where the client-side CPU goes.
func BenchmarkGet(b *testing.B) {
	c, err := StartCluster(context.Background(), false, true, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	keys := kvKeys(10000)
	if err := c.preload(ctx, keys, "v"); err != nil {
		b.Fatal(err)
	}
	set, _ := c.Router.Set(kvServer, kvRoute)
	for _, v := range []struct {
		name string
		get  func(key string) error
	}{
		{"direct", func(key string) error { return c.Direct[c.HandRing.Home(key)].Get(ctx, key).Err() }},
		{"directap", func(key string) error { return c.DirectAP[c.HandRing.Home(key)].Get(ctx, key).Err() }},
		{"router", func(key string) error {
			cl, err := c.Router.Client(kvServer, kvRoute, key)
			if err != nil {
				return err
			}
			return cl.Get(ctx, key).Err()
		}},
		{"setpick", func(key string) error {
			n, err := set.Pick(key)
			if err != nil {
				return err
			}
			return n.Client().Get(ctx, key).Err()
		}},
		{"ring", func(key string) error { return c.Ring.Get(ctx, key).Err() }},
		{"twemproxy", func(key string) error { return c.TwemClient.Get(ctx, key).Err() }},
	} {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(32)
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					if err := v.get(keys[i%len(keys)]); err != nil {
						b.Error(err)
						return
					}
					i += 7
				}
			})
		})
	}
}
