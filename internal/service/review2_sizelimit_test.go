package service

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

// reserveOfSize returns a Reserve request whose binary encoding is size
// bytes (its user id, over the 128 bytes ids may have, fills it).
func reserveOfSize(t *testing.T, size int) *v1.ReserveRequest {
	t.Helper()
	req := &v1.ReserveRequest{OrderId: "o-1", Items: []*v1.Item{{RouteKey: "all", SkuId: "hat", Quantity: 1}}}
	base := proto.Size(req)
	for n := size - base - 3; n < size; n++ { // tag + 2-byte length + n bytes
		req.UserId = strings.Repeat("u", n)
		if proto.Size(req) == size {
			return req
		}
	}
	t.Fatalf("no Reserve request of %d bytes", size)
	return nil
}

// TestReview2MessageAtTheLimitOnEveryProtocol holds service.max_body_bytes
// to one limit on the message whatever carries it: a message of exactly
// the limit is served (refused by the handler for its over-long user id,
// invalid_argument), one byte more is refused with resource_exhausted, on
// Connect, gRPC and gRPC-Web on the service port and on the gRPC port, as
// connect-go's WithReadMaxBytes and grpc-go's MaxRecvMsgSize count it.
// Before, the front door counted the 5-byte envelope of gRPC and gRPC-Web
// against the limit: a message of 4092 to 4096 bytes that Connect and the
// gRPC port served was refused there as "over the limit of 4096 bytes".
func TestReview2MessageAtTheLimitOnEveryProtocol(t *testing.T) {
	s, conn := startGRPCService(t) // max_body_bytes 4096, token s3cret
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	auth := connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer s3cret")
			return next(ctx, req)
		}
	}))
	h2c := review2H2C(t)
	url := "http://" + s.Addr() + "/shardis.v1.InventoryService/Reserve"
	clients := map[string]*connect.Client[v1.ReserveRequest, v1.ReserveResponse]{
		"Connect":                 connect.NewClient[v1.ReserveRequest, v1.ReserveResponse](http.DefaultClient, url, auth),
		"gRPC (service port)":     connect.NewClient[v1.ReserveRequest, v1.ReserveResponse](h2c, url, auth, connect.WithGRPC()),
		"gRPC-Web (service port)": connect.NewClient[v1.ReserveRequest, v1.ReserveResponse](http.DefaultClient, url, auth, connect.WithGRPCWeb()),
	}
	for size, want := range map[int]connect.Code{4096: connect.CodeInvalidArgument, 4097: connect.CodeResourceExhausted} {
		req := reserveOfSize(t, size)
		for name, c := range clients {
			_, err := c.CallUnary(ctx, connect.NewRequest(req))
			if got := connect.CodeOf(err); got != want {
				t.Errorf("%s, a message of %d bytes (limit 4096): %v, want %v", name, size, err, want)
			}
		}
		err := conn.Invoke(metadataAuthed(ctx), "/shardis.v1.InventoryService/Reserve", req, new(v1.ReserveResponse))
		if got := connect.Code(status.Code(err)); got != want {
			t.Errorf("gRPC port, a message of %d bytes (limit 4096): %v, want %v", size, err, want)
		}
	}
}
