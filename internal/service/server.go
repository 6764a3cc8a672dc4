package service

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/health"
	"github.com/shardis/shardis/internal/metrics"
	"github.com/shardis/shardis/internal/stack"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
	"github.com/shardis/shardis/rollback"
	"github.com/shardis/shardis/router"
)

// Server is a running `shardis serve`: router, inventory, reconciler,
// metrics and the HTTP listener.
type Server struct {
	cfg     *config.Config
	log     *slog.Logger
	Router  *router.Router       // the router over the configured nodes
	Inv     *inventory.Inventory // the inventory over Router
	Rec     *rollback.Reconciler // the running reconciler of Inv's nodes
	Queue   *rollback.Queue      // the deferred-settle queue Inv feeds and Rec drains
	Metrics *metrics.Metrics     // the Prometheus metrics the server exposes, bound to Router, Inv and Rec
	http    *http.Server
	ln      net.Listener
	served  chan error
	// grpc and grpcLn are the gRPC port (grpc.go); nil when
	// service.grpc_listen is not set.
	grpc   *grpc.Server
	grpcLn net.Listener
	// watch feeds grpc.health.v1.Health/Watch on both ports
	// (healthwatch.go).
	watch *healthHub
}

// Start builds everything from cfg, listens on cfg.Service.Listen (an
// address with port 0 picks a free port; see Addr) and serves in the
// background until Shutdown.
func Start(ctx context.Context, cfg *config.Config, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.Default()
	}
	s := &Server{cfg: cfg, log: log, Metrics: metrics.New(), served: make(chan error, 1)}
	s.watch = newHealthHub(func() bool { return s.unready() == "" }, healthWatchEvery)
	st, err := stack.Open(ctx, cfg, stack.Options{
		Logger: log,
		Router: router.Options{
			ObserveCommand: s.Metrics.ObserveCommand,
			OnProbe:        s.Metrics.OnProbe,
			OnStateChange: func(ev health.Event) {
				s.Metrics.OnStateChange(ev.Target, ev.Up)
				s.watch.poke()
			},
		},
	})
	if err != nil {
		return nil, err
	}
	s.Router, s.Inv, s.Queue, s.Rec = st.Router, st.Inventory, st.Queue, st.Reconciler
	s.Metrics.Bind(s.Router, s.Inv, s.Rec)

	tlsCfg, err := serverTLS(cfg.Service.TLS)
	if err != nil {
		s.closeLibs()
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Service.Listen)
	if err != nil {
		s.closeLibs()
		return nil, fmt.Errorf("service.listen %s: %w", cfg.Service.Listen, err)
	}
	if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
	}
	s.ln = ln
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	protocols.SetUnencryptedHTTP2(tlsCfg == nil)
	s.http = &http.Server{
		Handler:           s.handler(),
		Protocols:         protocols,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	if err := s.startGRPC(tlsCfg); err != nil {
		_ = ln.Close()
		s.closeLibs()
		return nil, err
	}
	go func() {
		err := s.http.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.served <- err
	}()
	log.Info("shardis serving", "addr", s.Addr(), "tls", tlsCfg != nil, "auth", cfg.Service.AuthToken != "")
	return s, nil
}

// Addr returns the address the service listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Done returns a channel that receives the serve error (nil after a clean
// Shutdown) once the listener stops.
func (s *Server) Done() <-chan error { return s.served }

// Shutdown stops accepting calls on both ports at once, ends every
// grpc.health.v1 Watch stream (NOT_SERVING, then unavailable), waits for
// in-flight calls (up to ctx; then the gRPC port's are cut off), then
// stops the reconciler and closes node clients.
func (s *Server) Shutdown(ctx context.Context) error {
	s.watch.stop()
	grpcDone := make(chan struct{})
	go func() {
		defer close(grpcDone)
		s.stopGRPC(ctx)
	}()
	err := s.http.Shutdown(ctx)
	<-grpcDone
	s.watch.wait()
	s.closeLibs()
	return err
}

func (s *Server) closeLibs() {
	if s.Rec != nil {
		s.Rec.Close()
	}
	if s.Inv != nil {
		s.Inv.Close()
	}
	if s.Router != nil {
		s.Router.Close()
	}
}

func (s *Server) handler() http.Handler {
	h := &Handlers{Router: s.Router, Inventory: s.Inv}
	opts := []connect.HandlerOption{
		connect.WithReadMaxBytes(s.cfg.Service.MaxBodyBytes),
		// Replies are a few hundred bytes: gzip would cost more CPU per
		// call (a compressor reset is ~1 KB of tables) than it saves.
		connect.WithCompressMinBytes(compressMinBytes),
		connect.WithCodec(strictJSON{}), connect.WithCodec(strictJSONCharset{}), connect.WithCodec(binaryProto{}),
		connect.WithInterceptors(seenInterceptor(), s.Metrics.RPCInterceptor(), logInterceptor(s.log),
			callerCodeInterceptor(), jsonNamesInterceptor(), authInterceptor(s.cfg.Service.AuthToken)),
	}
	mux := http.NewServeMux()
	mux.Handle(shardisv1connect.NewInventoryServiceHandler(h, opts...))
	mux.Handle(shardisv1connect.NewAdminServiceHandler(h, opts...))
	s.mountProbes(mux)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.Metrics.Registry, promhttp.HandlerOpts{}))
	return s.frontDoor(mux)
}

// compressMinBytes is the smallest reply the service compresses for a
// client that accepts gzip (a Reserve's reply is well under it).
const compressMinBytes = 4096

// authInterceptor requires "Authorization: Bearer <token>" when token is
// set, compared in constant time. The token never reaches a log.
func authInterceptor(token string) connect.Interceptor {
	want := []byte("Bearer " + token)
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if token != "" {
				got := []byte(req.Header().Get("Authorization"))
				if subtle.ConstantTimeCompare(got, want) != 1 {
					return nil, connect.NewError(connect.CodeUnauthenticated, errors.New(errBearer))
				}
			}
			return next(ctx, req)
		}
	})
}

// logInterceptor logs every call's procedure, code and duration.
func logInterceptor(log *slog.Logger) connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			start := time.Now()
			res, err := next(ctx, req)
			logRPC(ctx, log, req.Spec().Procedure, err, time.Since(start))
			return res, err
		}
	})
}

// logRPC logs one answered call of procedure: an error at info, or warn
// when the service or a node failed (internal, unavailable); success at
// debug.
func logRPC(ctx context.Context, log *slog.Logger, procedure string, err error, d time.Duration) {
	proc := procedure[strings.LastIndex(procedure, "/")+1:]
	if err != nil {
		code := connect.CodeOf(err)
		level := slog.LevelInfo
		if code == connect.CodeInternal || code == connect.CodeUnavailable {
			level = slog.LevelWarn
		}
		log.Log(ctx, level, "rpc", "method", proc, "code", code.String(), "err", err.Error(), "duration", d)
	} else {
		log.Debug("rpc", "method", proc, "code", "ok", "duration", d)
	}
}

func serverTLS(t config.ServiceTLS) (*tls.Config, error) {
	if t.CertFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("service.tls: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	if t.ClientCAFile != "" {
		pem, err := os.ReadFile(t.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("service.tls.client_ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("service.tls.client_ca_file %s: no PEM certificate found", t.ClientCAFile)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}
