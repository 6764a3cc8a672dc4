package service

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
)

// grpc.health.v1.Health/Watch on both ports (healthwatch.go), over
// grpc-go's health client and real nodes. Before, both ports answered
// Watch unimplemented.

// review3Ports starts the service over three real nodes with the gRPC
// port on, a token and max_body_bytes 4096 (as startGRPCService), and
// returns it, its nodes and a grpc-go health client per port, by name.
// The clients send no token: health is a probe.
func review3Ports(t *testing.T) (*Server, []*redistest.Server, map[string]healthpb.HealthClient) {
	t.Helper()
	s, srvs := startService(t, func(cfg *config.Config) {
		cfg.Service.GRPCListen = "127.0.0.1:0"
		cfg.Service.AuthToken = "s3cret"
		cfg.Service.MaxBodyBytes = 4096
		cfg.Health.Timeout = 2 * time.Second
	})
	clients := map[string]healthpb.HealthClient{}
	for port, addr := range map[string]string{"service port": s.Addr(), "gRPC port": s.GRPCAddr()} {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		clients[port] = healthpb.NewHealthClient(conn)
	}
	return s, srvs, clients
}

// watchRecv is one message (or the end) of a Watch stream.
type watchRecv struct {
	st  healthpb.HealthCheckResponse_ServingStatus
	err error
}

// review3Watch opens a Watch of service and returns its messages on a
// channel (closed after the stream's end, sent as an error).
func review3Watch(ctx context.Context, t *testing.T, hc healthpb.HealthClient, service string) <-chan watchRecv {
	t.Helper()
	stream, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		t.Fatalf("Watch(%q): %v", service, err)
	}
	out := make(chan watchRecv, 16)
	go func() {
		defer close(out)
		for {
			res, err := stream.Recv()
			if err != nil {
				out <- watchRecv{err: err}
				return
			}
			out <- watchRecv{st: res.GetStatus()}
		}
	}()
	return out
}

// review3Next waits for the next message of a Watch stream.
func review3Next(t *testing.T, what string, ch <-chan watchRecv, within time.Duration) watchRecv {
	t.Helper()
	select {
	case r, ok := <-ch:
		if !ok {
			t.Fatalf("%s: stream already ended", what)
		}
		return r
	case <-time.After(within):
		t.Fatalf("%s: no message within %v", what, within)
	}
	return watchRecv{}
}

// review3Expect waits for status want as the next message.
func review3Expect(t *testing.T, what string, ch <-chan watchRecv, want healthpb.HealthCheckResponse_ServingStatus, within time.Duration) {
	t.Helper()
	if r := review3Next(t, what, ch, within); r.err != nil || r.st != want {
		t.Fatalf("%s: got %v (err %v), want %v", what, r.st, r.err, want)
	}
}

// review3Quiet fails when ch delivers anything within d.
func review3Quiet(t *testing.T, what string, ch <-chan watchRecv, d time.Duration) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s: unexpected %v (err %v) while the status did not change", what, r.st, r.err)
	case <-time.After(d):
	}
}

// review3Goroutines returns the stacks of the goroutines of the Watch
// machinery still running (the hub's loop, a watchHealth call).
func review3Goroutines() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var left []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "(*healthHub).run") || strings.Contains(g, "watchHealth") {
			left = append(left, g)
		}
	}
	return strings.Join(left, "\n\n")
}

// review3NoWatchGoroutines waits a moment for the Watch goroutines to end.
func review3NoWatchGoroutines(t *testing.T, when string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := review3Goroutines()
		if left == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: goroutines of Watch still running:\n%s", when, left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// setRouteAll enables or drains route inventory/all on every node.
func setRouteAll(t *testing.T, s *Server, enabled bool, nodes ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, n := range nodes {
		if err := s.Router.SetRouteEnabled(ctx, n, "inventory", "all", enabled); err != nil {
			t.Fatalf("SetRouteEnabled(%s, %v): %v", n, enabled, err)
		}
	}
}

// Watch on both ports, without a token: the current status at once, a
// message at each change of readiness (every node drained: NOT_SERVING;
// one enabled again: SERVING) and none in between, SERVICE_UNKNOWN as a
// message for a service the instance does not serve, nothing left
// running once the watchers leave; Shutdown tells a watcher NOT_SERVING
// and ends its stream with unavailable, promptly (a Watch does not hold
// Shutdown for its grace), leaving no goroutine of Watch behind.
func TestReview3HealthWatchBothPorts(t *testing.T) {
	s, _, clients := review3Ports(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	streams := map[string]map[string]<-chan watchRecv{}
	for port, hc := range clients {
		streams[port] = map[string]<-chan watchRecv{
			"":                            review3Watch(ctx, t, hc, ""),
			"shardis.v1.InventoryService": review3Watch(ctx, t, hc, "shardis.v1.InventoryService"),
		}
	}
	for port, byService := range streams {
		for service, ch := range byService {
			review3Expect(t, port+" Watch("+service+") first message", ch, healthpb.HealthCheckResponse_SERVING, 10*time.Second)
		}
	}
	// An unknown service: SERVICE_UNKNOWN as a message, the stream open.
	for port, hc := range clients {
		uctx, ucancel := context.WithCancel(ctx)
		ch := review3Watch(uctx, t, hc, "nope.v1.Nothing")
		review3Expect(t, port+" Watch(nope.v1.Nothing)", ch, healthpb.HealthCheckResponse_SERVICE_UNKNOWN, 10*time.Second)
		review3Quiet(t, port+" Watch(nope.v1.Nothing) after SERVICE_UNKNOWN", ch, 200*time.Millisecond)
		ucancel()
	}
	review3Quiet(t, "service port Watch with nothing changed", streams["service port"][""], 1500*time.Millisecond)

	setRouteAll(t, s, false, "n1", "n2", "n3")
	for port, byService := range streams {
		for service, ch := range byService {
			review3Expect(t, port+" Watch("+service+") with every node drained", ch, healthpb.HealthCheckResponse_NOT_SERVING, 10*time.Second)
		}
	}
	setRouteAll(t, s, true, "n1")
	for port, byService := range streams {
		for service, ch := range byService {
			review3Expect(t, port+" Watch("+service+") with n1 enabled again", ch, healthpb.HealthCheckResponse_SERVING, 10*time.Second)
		}
	}

	// Watchers that leave leave nothing running (the hub's loop ends with
	// the last of them).
	cancel()
	for _, byService := range streams {
		for _, ch := range byService {
			for range ch {
			}
		}
	}
	review3NoWatchGoroutines(t, "after every watcher left")

	// Shutdown ends the streams: NOT_SERVING, then unavailable.
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	again := map[string]<-chan watchRecv{}
	for port, hc := range clients {
		again[port] = review3Watch(wctx, t, hc, "")
		review3Expect(t, port+" Watch before Shutdown", again[port], healthpb.HealthCheckResponse_SERVING, 10*time.Second)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	start := time.Now()
	if err := s.Shutdown(sctx); err != nil {
		t.Errorf("Shutdown with Watch streams open: %v (a Watch held it past its grace)", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Shutdown with Watch streams open took %v", d)
	}
	for port, ch := range again {
		review3Expect(t, port+" Watch at Shutdown", ch, healthpb.HealthCheckResponse_NOT_SERVING, 5*time.Second)
		r := review3Next(t, port+" Watch end at Shutdown", ch, 5*time.Second)
		if code := status.Code(r.err); code != codes.Unavailable {
			t.Errorf("%s Watch end at Shutdown: %v (err %v), want unavailable", port, r.st, r.err)
		}
	}
	review3NoWatchGoroutines(t, "after Shutdown")
}

// A node going DOWN reaches the watchers at once (the hub evaluates on
// each change of a node's state, not only at its tick): every node killed
// turns Watch NOT_SERVING on both ports, as Check.
func TestReview3HealthWatchNodesDown(t *testing.T) {
	_, srvs, clients := review3Ports(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	streams := map[string]<-chan watchRecv{}
	for port, hc := range clients {
		streams[port] = review3Watch(ctx, t, hc, "")
		review3Expect(t, port+" Watch first message", streams[port], healthpb.HealthCheckResponse_SERVING, 10*time.Second)
	}
	for _, r := range srvs {
		r.Kill()
	}
	for port, ch := range streams {
		review3Expect(t, port+" Watch with every node killed", ch, healthpb.HealthCheckResponse_NOT_SERVING, 20*time.Second)
	}
	hc := clients["gRPC port"]
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	defer ccancel()
	if res, err := hc.Check(cctx, &healthpb.HealthCheckRequest{}); err != nil || res.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("Check with every node killed: %v %v, want NOT_SERVING as Watch said", res, err)
	}
}

// Watch keeps Check's rules of the front door: unauthenticated (above),
// and a request over service.max_body_bytes refused with
// resource_exhausted on both ports.
func TestReview3HealthWatchBodyLimit(t *testing.T) {
	_, _, clients := review3Ports(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	big := &healthpb.HealthCheckRequest{Service: strings.Repeat("s", 5000)}
	for port, hc := range clients {
		stream, err := hc.Watch(ctx, big)
		if err == nil {
			_, err = stream.Recv()
		}
		if code := status.Code(err); code != codes.ResourceExhausted {
			t.Errorf("%s Watch of a 5000-byte request (limit 4096): %v, want resource_exhausted", port, err)
		}
	}
}
