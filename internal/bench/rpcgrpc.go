package bench

import (
	"context"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

// The grpc-go floor: the RPC floor's call (a canned 1-item Reserve
// reply, no work) served by grpc-go's own HTTP/2 transport to a grpc-go
// client, in the same service child. Beside the Connect floor it shows
// what the other Go RPC stack costs for the same call on this machine:
// the anchor the issue names (grpc-go's unary benchmark), measured here.

// reserveMethod is the full gRPC method name of InventoryService.Reserve.
const reserveMethod = "/shardis.v1.InventoryService/Reserve"

// grpcFloorDesc serves InventoryService.Reserve only, answering as
// floorReserver does. Written by hand: the project generates Connect
// code, not grpc-go's.
var grpcFloorDesc = grpc.ServiceDesc{
	ServiceName: "shardis.v1.InventoryService",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Reserve",
		Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			req := new(v1.ReserveRequest)
			if err := dec(req); err != nil {
				return nil, err
			}
			return floorReply(req.GetOrderId()), nil
		},
	}},
}

// grpcFloorServer starts the grpc-go floor on a free loopback port.
func grpcFloorServer() (*grpc.Server, net.Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	s := grpc.NewServer()
	s.RegisterService(&grpcFloorDesc, struct{}{})
	return s, ln, nil
}

// grpcReserveClient is a grpc-go client of InventoryService.Reserve at
// addr: the grpc-go floor, or the service's gRPC port.
type grpcReserveClient struct{ conn *grpc.ClientConn }

func newGRPCReserveClient(addr string) (*grpcReserveClient, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	return &grpcReserveClient{conn: conn}, nil
}

func (c *grpcReserveClient) Reserve(ctx context.Context, req *v1.ReserveRequest) (*v1.ReserveResponse, error) {
	res := new(v1.ReserveResponse)
	if err := c.conn.Invoke(ctx, reserveMethod, req, res); err != nil {
		return nil, err
	}
	return res, nil
}

func (c *grpcReserveClient) Close() error { return c.conn.Close() }
