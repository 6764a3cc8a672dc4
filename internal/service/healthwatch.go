package service

import (
	"context"
	"errors"
	"sync"
	"time"

	"connectrpc.com/connect"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
)

// grpc.health.v1.Health/Watch, on both ports.
//
// Watch answers from the same readiness as Check (ready.go): SERVING for
// "" and the two shardis services when ready, NOT_SERVING otherwise,
// sent at once and then each time the answer changes. A service the
// instance does not serve gets SERVICE_UNKNOWN, sent as a message (Check
// answers not_found), and the stream stays open, as the gRPC health
// protocol asks. The stream ends when the client goes away, or when the
// server shuts down: a watcher last told SERVING is told NOT_SERVING,
// then the stream ends with unavailable. Like Check, Watch is
// unauthenticated and bound by service.max_body_bytes.
//
// The watchers share one healthHub: a single goroutine, running only
// while at least one stream watches, evaluates readiness (the cheap state
// Check reads) every healthWatchEvery and at once when a node changes
// state, and wakes the watchers when the answer changed. Nothing runs per
// watcher but its own call; before, Watch answered unimplemented on both
// ports.

// healthWatchEvery is how often the hub evaluates readiness while anyone
// watches (a node's change of state is seen at once).
const healthWatchEvery = time.Second

// errShuttingDown ends the Watch streams of a server shutting down.
var errShuttingDown = connect.NewError(connect.CodeUnavailable, errors.New("server is shutting down"))

// healthHub fans one evaluation of readiness out to every Watch stream.
type healthHub struct {
	ready func() bool
	every time.Duration

	mu       sync.Mutex
	watchers int
	running  bool
	closed   bool
	known    bool // serving holds an evaluation made since the loop started
	serving  bool
	changed  chan struct{} // closed (and replaced) when serving or known changes

	nudge chan struct{} // capacity 1: evaluate now
	quit  chan struct{} // closed by stop
	wg    sync.WaitGroup
}

// newHealthHub returns a hub evaluating ready every interval while
// anyone watches.
func newHealthHub(ready func() bool, every time.Duration) *healthHub {
	return &healthHub{ready: ready, every: every, changed: make(chan struct{}),
		nudge: make(chan struct{}, 1), quit: make(chan struct{})}
}

// poke asks for an evaluation now (a node changed state); it never blocks.
func (h *healthHub) poke() {
	select {
	case h.nudge <- struct{}{}:
	default:
	}
}

// join registers a watcher, starting the loop when it is the first; it
// returns the function to call when the watcher leaves, or
// errShuttingDown once stop began.
func (h *healthHub) join() (leave func(), err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, errShuttingDown
	}
	h.watchers++
	if !h.running {
		h.running = true
		h.wg.Add(1)
		go h.run()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			h.watchers--
			last := h.watchers == 0
			h.mu.Unlock()
			if last {
				h.poke() // the loop sees no watcher and ends now
			}
		})
	}, nil
}

// state returns the last evaluation (known false before the first) and
// the channel closed when it changes.
func (h *healthHub) state() (serving, known bool, changed <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.serving, h.known, h.changed
}

// run evaluates readiness at once, then every h.every and on each poke,
// until no watcher is left or stop.
func (h *healthHub) run() {
	defer h.wg.Done()
	t := time.NewTicker(h.every)
	defer t.Stop()
	for {
		select {
		case <-h.quit:
			return
		default:
		}
		serving := h.ready()
		h.mu.Lock()
		if !h.known || h.serving != serving {
			h.known, h.serving = true, serving
			close(h.changed)
			h.changed = make(chan struct{})
		}
		h.mu.Unlock()
		select {
		case <-h.quit:
			return
		case <-t.C:
		case <-h.nudge:
		}
		h.mu.Lock()
		if h.watchers == 0 {
			h.running, h.known = false, false
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
	}
}

// stop ends every Watch stream (they see quit) and refuses new ones;
// wait then waits for the loop to end.
func (h *healthHub) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.closed = true
		close(h.quit)
	}
}

// wait returns once the loop ended (after stop).
func (h *healthHub) wait() { h.wg.Wait() }

// healthServed reports whether service is one Check and Watch answer for.
func healthServed(service string) bool {
	switch service {
	case "", shardisv1connect.InventoryServiceName, shardisv1connect.AdminServiceName:
		return true
	}
	return false
}

// watchHealth serves one Watch of service (see the file comment), sending
// each status with send; it returns nil when ctx ends (the client went
// away), errShuttingDown when the server shuts down, or send's error.
func (s *Server) watchHealth(ctx context.Context, service string, send func(healthpb.HealthCheckResponse_ServingStatus) error) error {
	h := s.watch
	if !healthServed(service) {
		if err := send(healthpb.HealthCheckResponse_SERVICE_UNKNOWN); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-h.quit:
			return errShuttingDown
		}
	}
	leave, err := h.join()
	if err != nil {
		return err
	}
	defer leave()
	sent, last := false, false
	for {
		serving, known, changed := h.state()
		if known && (!sent || serving != last) {
			if err := send(servingStatus(serving)); err != nil {
				return err
			}
			sent, last = true, serving
		}
		select {
		case <-ctx.Done():
			return nil
		case <-h.quit:
			if last {
				_ = send(healthpb.HealthCheckResponse_NOT_SERVING)
			}
			return errShuttingDown
		case <-changed:
		}
	}
}

// servingStatus is SERVING or NOT_SERVING.
func servingStatus(serving bool) healthpb.HealthCheckResponse_ServingStatus {
	if serving {
		return healthpb.HealthCheckResponse_SERVING
	}
	return healthpb.HealthCheckResponse_NOT_SERVING
}

// watchProcedure is the path of grpc.health.v1.Health/Watch.
const watchProcedure = "/grpc.health.v1.Health/Watch"

// watchHandler serves Watch on the service port (grpchealth's handler
// answers only Check), opts applying as to Check.
func (s *Server) watchHandler(opts ...connect.HandlerOption) (string, *connect.Handler) {
	return watchProcedure, connect.NewServerStreamHandler(watchProcedure,
		func(ctx context.Context, req *connect.Request[healthpb.HealthCheckRequest], stream *connect.ServerStream[healthpb.HealthCheckResponse]) error {
			return s.watchHealth(ctx, req.Msg.GetService(), func(st healthpb.HealthCheckResponse_ServingStatus) error {
				return stream.Send(&healthpb.HealthCheckResponse{Status: st})
			})
		}, opts...)
}
