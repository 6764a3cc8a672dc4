package bench

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/shardis/shardis/internal/service"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
)

// The RPC section runs `shardis serve` in a process of its own, as users
// run it, so the service's CPU is read apart from the client's
// (/proc/<pid>/stat) and the two do not share one Go scheduler. The
// child is this very binary started again with ServeEnv set: the
// benchmark's main calls ServeChild first thing.

// ServeEnv names the environment variable that makes the benchmark binary
// a service child: its value is the nodes' addresses, comma-separated
// (like nodeNames). ServeProfileEnv, when set too, names a file the child
// writes a CPU profile of its whole life to.
const (
	ServeEnv        = "SHARDIS_BENCH_SERVE"
	ServeProfileEnv = "SHARDIS_BENCH_SERVE_PROFILE"
)

// ServeChild runs the service child when ServeEnv is set and then exits
// the process; it returns at once otherwise. The child serves
// BenchConfig over the given addresses on a free port and the RPC floor
// (floorServer) and the grpc-go floor (rpcgrpc.go) on two others, with its
// gRPC port (service.grpc_listen) on, prints "listening ADDR FLOOR_ADDR
// GRPC_FLOOR_ADDR GRPC_ADDR" on stdout,
// and stops when its stdin closes (the parent is gone or done) or on
// SIGTERM.
func ServeChild() {
	runChild("service child", ServeEnv, ServeProfileEnv, func(v string) error { return serveChild(strings.Split(v, ",")) })
}

func serveChild(addrs []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	cfg := BenchConfig(addrs)
	cfg.Service.GRPCListen = "127.0.0.1:0"
	srv, err := service.Start(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	floor, floorLn, err := floorServer()
	if err != nil {
		_ = srv.Shutdown(context.Background())
		return err
	}
	go func() { _ = floor.Serve(floorLn) }()
	defer floor.Close()
	gfloor, gln, err := grpcFloorServer()
	if err != nil {
		_ = srv.Shutdown(context.Background())
		return err
	}
	go func() { _ = gfloor.Serve(gln) }()
	defer gfloor.Stop()
	fmt.Printf("listening %s %s %s %s\n", srv.Addr(), floorLn.Addr(), gln.Addr(), srv.GRPCAddr())
	select {
	case <-ctx.Done():
	case <-untilStdinCloses():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// floorReserver answers every Reserve with the reply of a 1-item order
// without doing anything: the RPC floor, what Connect over HTTP/2 costs by
// itself for a call of this size.
type floorReserver struct {
	shardisv1connect.UnimplementedInventoryServiceHandler
}

func (floorReserver) Reserve(_ context.Context, req *connect.Request[v1.ReserveRequest]) (*connect.Response[v1.ReserveResponse], error) {
	return connect.NewResponse(floorReply(req.Msg.GetOrderId())), nil
}

// floorReply is the floors' canned reply: a 1-item reservation of id.
func floorReply(id string) *v1.ReserveResponse {
	return &v1.ReserveResponse{
		OrderId:        id,
		Receipts:       []*v1.Receipt{{SkuId: "s-0", Quantity: 1, Node: "n1", RedoLog: "inv:redo:0", Offset: 1}},
		DeadlineUnixMs: time.Now().Add(15 * time.Minute).UnixMilli(),
		TtlSeconds:     900,
	}
}

// floorServer is the RPC floor's server: connect-go's defaults, cleartext
// HTTP/2 as the service's, on a free loopback port.
func floorServer() (*http.Server, net.Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.Handle(shardisv1connect.NewInventoryServiceHandler(floorReserver{}))
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	return &http.Server{Handler: mux, Protocols: protocols, ReadHeaderTimeout: 10 * time.Second}, ln, nil
}

// ServiceProc is a running service child.
type ServiceProc struct {
	*childProc
	Addr string // the service's Connect address (host:port)
	// FloorAddr is the RPC floor's address (floorServer), GRPCFloorAddr
	// the grpc-go floor's (rpcgrpc.go).
	FloorAddr, GRPCFloorAddr string
	// GRPCAddr is the service's gRPC port (service.grpc_listen).
	GRPCAddr string
}

// StartServiceProc starts the service child over addrs and waits until it
// listens. profile, when not "", is where the child writes its CPU
// profile (complete once Stop returns).
func StartServiceProc(addrs []string, profile string) (*ServiceProc, error) {
	child, l, err := startChild("service child", ServeEnv+"="+strings.Join(addrs, ","), ServeProfileEnv+"="+profile)
	if err != nil {
		return nil, err
	}
	if addrs, found := strings.CutPrefix(l, "listening "); found {
		if f := strings.Fields(addrs); len(f) == 4 {
			return &ServiceProc{childProc: child, Addr: f[0], FloorAddr: f[1], GRPCFloorAddr: f[2], GRPCAddr: f[3]}, nil
		}
	}
	child.Stop()
	return nil, fmt.Errorf("service child said %q instead of its address", l)
}
