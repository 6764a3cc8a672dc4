package service

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	_ "google.golang.org/grpc/encoding/gzip" // gzip-compressed calls, as the service port takes them
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	v1 "github.com/shardis/shardis/proto/shardis/v1"
	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
)

// The gRPC port.
//
// The service port (service.listen) speaks Connect, gRPC and gRPC-Web
// over net/http. With service.grpc_listen set, the same two services are
// also served to gRPC clients over grpc-go's own HTTP/2 transport on a
// port of their own: the same Handlers, the same bearer token, metrics
// (shardis_rpc_requests_total by procedure and code) and logs, the same
// body limit (a larger message is refused with resource_exhausted naming
// the limit), the standard health service answering from readiness as on
// the service port, and reflection. The transport is the difference: in
// `make bench` a call answered at once costs a fraction of the CPU over
// grpc-go's transport that it costs over net/http's HTTP/2 (BENCHMARKS.md,
// the RPC section's floor rows). Binary protobuf ignores unknown fields,
// as protobuf's compatibility rule asks; gRPC clients send nothing else.
// A request compressed with gzip is served (its limit counts the message
// decompressed) and its reply compressed the same way, as on the service
// port; before grpc-go's gzip codec was linked in, every compressed call
// was answered unimplemented.

// grpcMethod is one unary method of a service on the gRPC port.
type grpcMethod struct {
	name string
	// call decodes the request with dec, runs the handler on it with the
	// call's metadata as headers, and returns the reply message.
	call func(ctx context.Context, md metadata.MD, dec func(any) error) (proto.Message, error)
}

// unaryMethod adapts a Connect handler method to the gRPC port.
func unaryMethod[Req, Res any, PReq interface {
	*Req
	proto.Message
}](name string, h func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error)) grpcMethod {
	return grpcMethod{name: name, call: func(ctx context.Context, md metadata.MD, dec func(any) error) (proto.Message, error) {
		msg := PReq(new(Req))
		if err := dec(msg); err != nil {
			// grpc-go's own refusals (a message over the limit:
			// resource_exhausted) keep their code.
			if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown && st.Code() != codes.Internal {
				return nil, connect.NewError(connect.Code(st.Code()), errors.New(st.Message()))
			}
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("decoding the request: %w", err))
		}
		req := connect.NewRequest((*Req)(msg))
		for k, vs := range md {
			for _, v := range vs {
				req.Header().Add(k, v)
			}
		}
		res, err := h(ctx, req)
		if err != nil {
			return nil, err
		}
		return any(res.Msg).(proto.Message), nil
	}}
}

// grpcServices lists every method of the two services, by service name.
// TestGRPCPortServesEveryMethod holds the list against the .proto.
func grpcServices(h *Handlers) map[string][]grpcMethod {
	return map[string][]grpcMethod{
		shardisv1connect.InventoryServiceName: {
			unaryMethod[v1.LoadStockRequest]("LoadStock", h.LoadStock),
			unaryMethod[v1.GetStockRequest]("GetStock", h.GetStock),
			unaryMethod[v1.NewOrderIdRequest]("NewOrderId", h.NewOrderId),
			unaryMethod[v1.ReserveRequest]("Reserve", h.Reserve),
			unaryMethod[v1.ConfirmRequest]("Confirm", h.Confirm),
			unaryMethod[v1.CancelRequest]("Cancel", h.Cancel),
		},
		shardisv1connect.AdminServiceName: {
			unaryMethod[v1.ListNodesRequest]("ListNodes", h.ListNodes),
			unaryMethod[v1.SetRouteEnabledRequest]("SetRouteEnabled", h.SetRouteEnabled),
			unaryMethod[v1.ReadRedoLogRequest]("ReadRedoLog", h.ReadRedoLog),
			unaryMethod[v1.AckRedoLogRequest]("AckRedoLog", h.AckRedoLog),
			unaryMethod[v1.ListStuckPartsRequest]("ListStuckParts", h.ListStuckParts),
			unaryMethod[v1.RetryStuckPartRequest]("RetryStuckPart", h.RetryStuckPart),
			unaryMethod[v1.SettleStuckPartRequest]("SettleStuckPart", h.SettleStuckPart),
			unaryMethod[v1.AcceptNodeRequest]("AcceptNode", h.AcceptNode),
		},
	}
}

// grpcDesc is the grpc-go description of service's methods: each call is
// authenticated, run, observed (metrics, log) and its error turned into a
// gRPC status with the same code the service port answers.
func (s *Server) grpcDesc(service string, methods []grpcMethod) *grpc.ServiceDesc {
	want := []byte("Bearer " + s.cfg.Service.AuthToken)
	desc := &grpc.ServiceDesc{ServiceName: service, HandlerType: (*any)(nil), Metadata: "shardis/v1/shardis.proto"}
	for _, m := range methods {
		procedure := "/" + service + "/" + m.name
		desc.Methods = append(desc.Methods, grpc.MethodDesc{
			MethodName: m.name,
			Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				start := time.Now()
				md, _ := metadata.FromIncomingContext(ctx)
				var res proto.Message
				var err error
				if s.cfg.Service.AuthToken != "" && !bearerOK(md, want) {
					err = connect.NewError(connect.CodeUnauthenticated, errors.New("missing or wrong bearer token"))
				} else {
					res, err = m.call(ctx, md, dec)
				}
				err = callerCode(ctx, err)
				s.Metrics.ObserveRPC(procedure, err, time.Since(start))
				logRPC(ctx, s.log, procedure, err, time.Since(start))
				if err != nil {
					return nil, grpcStatus(err)
				}
				return res, nil
			},
		})
	}
	return desc
}

// bearerOK reports whether md carries "authorization: <want>", compared
// in constant time.
func bearerOK(md metadata.MD, want []byte) bool {
	got := md.Get("authorization")
	return len(got) == 1 && subtle.ConstantTimeCompare([]byte(got[0]), want) == 1
}

// callerCode gives an error answered once the call's own context ended
// the code of that, as Connect gives it: deadline_exceeded past the
// deadline (by the clock: go-redis sets a connection's deadline to the
// context's, so a read on a silent node fails with "i/o timeout" a moment
// before the context's timer fires), canceled when the client went away.
// Only an error of no code, unavailable (a node that did not answer in
// time, an outcome left unknown) or canceled is the context's doing; its
// message stays (an unknown outcome still says to retry with the same
// order id). Canceled past the deadline is deadline_exceeded too: at the
// deadline grpc-go closes the stream, cancelling the call's context, on
// a timer of its own that can fire before the context's (seen once under
// load, ci521). Any other answer (insufficient stock, a corrupt value)
// keeps its code. Before, a call cut by its deadline was answered,
// counted and logged at warn as unavailable, a node's failure, whenever
// the read lost the race.
func callerCode(ctx context.Context, err error) error {
	var ce *connect.Error
	if err == nil || errors.As(err, &ce) && ce.Code() != connect.CodeUnavailable && ce.Code() != connect.CodeCanceled {
		return err
	}
	code := connect.CodeCanceled
	switch d, ok := ctx.Deadline(); {
	case ok && !time.Now().Before(d):
		code = connect.CodeDeadlineExceeded
	case ctx.Err() == nil:
		return err
	}
	if ce == nil {
		return connect.NewError(code, err)
	}
	out := connect.NewError(code, trimmed{msg: ce.Message(), err: ce.Unwrap()})
	for _, d := range ce.Details() {
		out.AddDetail(d)
	}
	for k, v := range ce.Meta() {
		out.Meta()[k] = v
	}
	return out
}

// callerCodeInterceptor applies callerCode to the service port's calls
// (inside the metrics and log interceptors: they see the code answered).
func callerCodeInterceptor() connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			res, err := next(ctx, req)
			if err != nil {
				return nil, callerCode(ctx, err)
			}
			return res, nil
		}
	})
}

// grpcStatus is err as a gRPC status: Connect's codes are gRPC's, by
// number and meaning.
func grpcStatus(err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return status.Error(codes.Code(ce.Code()), ce.Message())
	}
	return status.Error(codes.Unknown, err.Error())
}

// grpcHealth answers grpc.health.v1.Health/Check and Watch on the gRPC
// port from readiness, as healthChecker and watchHandler do on the
// service port.
type grpcHealth struct {
	healthpb.UnimplementedHealthServer
	s *Server
}

func (h grpcHealth) Check(_ context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if !healthServed(req.GetService()) {
		return nil, status.Errorf(codes.NotFound, "unknown service %q", req.GetService())
	}
	if h.s.unready() != "" {
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}, nil
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// Watch streams readiness on the gRPC port from the same hub as the
// service port's Watch (watchHealth).
func (h grpcHealth) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	err := h.s.watchHealth(stream.Context(), req.GetService(), func(st healthpb.HealthCheckResponse_ServingStatus) error {
		return stream.Send(&healthpb.HealthCheckResponse{Status: st})
	})
	if _, ok := status.FromError(err); ok {
		return err // nil, or stream.Send's own status
	}
	return grpcStatus(err)
}

// startGRPC listens on service.grpc_listen (nothing when it is empty) and
// serves the gRPC port in the background until stopGRPC.
func (s *Server) startGRPC(tlsCfg *tls.Config) error {
	addr := s.cfg.Service.GRPCListen
	if addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("service.grpc_listen %s: %w", addr, err)
	}
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(s.cfg.Service.MaxBodyBytes),
		grpc.UnknownServiceHandler(s.unknownMethod),
	}
	if tlsCfg != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	gs := grpc.NewServer(opts...)
	h := &Handlers{Router: s.Router, Inventory: s.Inv}
	for service, methods := range grpcServices(h) {
		gs.RegisterService(s.grpcDesc(service, methods), struct{}{})
	}
	healthpb.RegisterHealthServer(gs, grpcHealth{s: s})
	reflection.Register(gs)
	s.grpc, s.grpcLn = gs, ln
	go func() { _ = gs.Serve(ln) }()
	s.log.Info("shardis serving gRPC (grpc-go transport)", "addr", ln.Addr().String(), "tls", tlsCfg != nil)
	return nil
}

// unknownMethod answers a call of a method the gRPC port does not serve.
// One under /shardis.v1. is answered, counted and logged as the service
// port answers it (frontDoor): unauthenticated without the token, else
// unimplemented, as procedure "unknown" in shardis_rpc_requests_total.
// Others (another API's) are answered unimplemented, uncounted, as there.
func (s *Server) unknownMethod(_ any, stream grpc.ServerStream) error {
	start := time.Now()
	method, _ := grpc.MethodFromServerStream(stream)
	unimplemented := status.Error(codes.Unimplemented, "no such procedure: "+method)
	if !strings.HasPrefix(method, "/shardis.v1.") {
		return unimplemented
	}
	ctx := stream.Context()
	md, _ := metadata.FromIncomingContext(ctx)
	if s.cfg.Service.AuthToken != "" && !bearerOK(md, []byte("Bearer "+s.cfg.Service.AuthToken)) {
		s.answered(ctx, "unknown", connect.CodeUnauthenticated.String(), errBearer, start)
		return status.Error(codes.Unauthenticated, errBearer)
	}
	s.answered(ctx, "unknown", connect.CodeUnimplemented.String(), "no such procedure", start)
	return unimplemented
}

// GRPCAddr returns the address of the gRPC port, or "" when
// service.grpc_listen is not set.
func (s *Server) GRPCAddr() string {
	if s.grpcLn == nil {
		return ""
	}
	return s.grpcLn.Addr().String()
}

// stopGRPC stops the gRPC port gracefully, cutting the calls still in
// flight when ctx ends.
func (s *Server) stopGRPC(ctx context.Context) {
	if s.grpc == nil {
		return
	}
	done := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.grpc.Stop()
		<-done
	}
}
