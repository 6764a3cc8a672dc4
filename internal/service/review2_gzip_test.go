package service

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

// TestReview2GzipOnBothPorts holds the gRPC port to the service port's
// compression (README, "The gRPC port": the same services, to any gRPC
// client): a gRPC client that compresses its requests with gzip, the one
// compression every gRPC implementation offers, is served on both ports,
// its reply decoded, and a message that gzip shrinks under the limit is
// still refused by its decompressed size. The client is connect-go's
// gRPC client (its own gzip): a grpc-go client would register grpc-go's
// gzip in this process and hide what the shardis binary lacks. Before,
// the gRPC port answered unimplemented ("grpc: Decompressor is not
// installed for grpc-encoding "gzip"") to every compressed call:
// nothing imported grpc-go's gzip codec.
func TestReview2GzipOnBothPorts(t *testing.T) {
	s, _ := startGRPCService(t) // max_body_bytes 4096, token s3cret, 5 hats
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	auth := connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer s3cret")
			return next(ctx, req)
		}
	}))
	h2c := review2H2C(t)
	const path = "/shardis.v1.InventoryService/Reserve"
	for name, c := range map[string]*connect.Client[v1.ReserveRequest, v1.ReserveResponse]{
		"service port, gRPC":     connect.NewClient[v1.ReserveRequest, v1.ReserveResponse](h2c, "http://"+s.Addr()+path, auth, connect.WithGRPC(), connect.WithSendGzip()),
		"service port, gRPC-Web": connect.NewClient[v1.ReserveRequest, v1.ReserveResponse](http.DefaultClient, "http://"+s.Addr()+path, auth, connect.WithGRPCWeb(), connect.WithSendGzip()),
		"service port, Connect":  connect.NewClient[v1.ReserveRequest, v1.ReserveResponse](http.DefaultClient, "http://"+s.Addr()+path, auth, connect.WithSendGzip()),
		"gRPC port":              connect.NewClient[v1.ReserveRequest, v1.ReserveResponse](h2c, "http://"+s.GRPCAddr()+path, auth, connect.WithGRPC(), connect.WithSendGzip()),
	} {
		id := "gz-" + strings.ReplaceAll(name, " ", "")
		res, err := c.CallUnary(ctx, connect.NewRequest(&v1.ReserveRequest{OrderId: id,
			Items: []*v1.Item{{RouteKey: "all", SkuId: "hat", Quantity: 1}}}))
		if err != nil || res.Msg.GetOrderId() != id {
			t.Errorf("%s, a gzip request: %v %v, want it served", name, res, err)
		}
		big := &v1.ReserveRequest{OrderId: id + "-big", UserId: strings.Repeat("u", 5000),
			Items: []*v1.Item{{RouteKey: "all", SkuId: "hat", Quantity: 1}}}
		_, err = c.CallUnary(ctx, connect.NewRequest(big))
		if connect.CodeOf(err) != connect.CodeResourceExhausted {
			t.Errorf("%s, a gzip request of 5000+ bytes decompressed (limit 4096): %v, want resource_exhausted", name, err)
		}
	}
}
