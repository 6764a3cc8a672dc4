package service

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/shardis/shardis/config"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

// rawBytes is a request already encoded, sent as is by the raw codec.
type rawBytes []byte

// rawCodec lets a test send bytes a generated message cannot hold (an
// unknown field) and read replies as generated messages.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	if b, ok := v.(rawBytes); ok {
		return b, nil
	}
	return proto.Marshal(v.(proto.Message))
}
func (rawCodec) Unmarshal(b []byte, v any) error { return proto.Unmarshal(b, v.(proto.Message)) }
func (rawCodec) Name() string                    { return "proto" }

// startGRPCService starts the service over three real nodes with the gRPC
// port on, a token, and 5 units of "hat" on route "all"; it returns the
// server and a grpc-go connection to its gRPC port.
func startGRPCService(t *testing.T) (*Server, *grpc.ClientConn) {
	t.Helper()
	s, _ := startService(t, func(cfg *config.Config) {
		cfg.Service.GRPCListen = "127.0.0.1:0"
		cfg.Service.AuthToken = "s3cret"
		cfg.Service.MaxBodyBytes = 4096
		cfg.Health.Timeout = 5 * time.Second
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.Inv.LoadStock(ctx, "all", "hat", 5, 0); err != nil {
		t.Fatal(err)
	}
	if s.GRPCAddr() == "" || s.GRPCAddr() == s.Addr() {
		t.Fatalf("gRPC port %q, service port %q", s.GRPCAddr(), s.Addr())
	}
	conn, err := grpc.NewClient(s.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(nil), grpc.ForceCodec(rawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return s, conn
}

// TestGRPCPort holds the gRPC port (service.grpc_listen) to the service
// port's contract over a grpc-go client and real nodes: the token, codes
// (failed_precondition when short, not invalid_argument), an unknown
// binary field served (protobuf's compatibility rule), an oversized
// message refused with resource_exhausted naming the limit, health from
// readiness, and every answered call counted by code.
func TestGRPCPort(t *testing.T) {
	s, conn := startGRPCService(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	authed := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer s3cret")
	const reserve = "/shardis.v1.InventoryService/Reserve"
	req := func(id string, qty int64) *v1.ReserveRequest {
		return &v1.ReserveRequest{OrderId: id, Items: []*v1.Item{{RouteKey: "all", SkuId: "hat", Quantity: qty}}}
	}

	res := new(v1.ReserveResponse)
	if err := conn.Invoke(ctx, reserve, req("o-1", 1), res); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no token: %v, want Unauthenticated", err)
	}
	if err := conn.Invoke(authed, reserve, req("o-1", 2), res); err != nil || res.GetOrderId() != "o-1" || len(res.GetReceipts()) == 0 {
		t.Fatalf("reserve: %v %v", res, err)
	}
	err := conn.Invoke(authed, reserve, req("o-2", 4), res)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "hat") {
		t.Fatalf("4 of the 3 left: %v, want FailedPrecondition naming the SKU", err)
	}

	// Field 99, unknown to this server's .proto, on a valid request.
	b, err := proto.Marshal(req("o-3", 1))
	if err != nil {
		t.Fatal(err)
	}
	b = protowire.AppendTag(b, 99, protowire.BytesType)
	b = protowire.AppendString(b, "from a newer client")
	if err := conn.Invoke(authed, reserve, rawBytes(b), res); err != nil || res.GetOrderId() != "o-3" {
		t.Fatalf("request with unknown field 99: %v %v, want served", res, err)
	}

	big := req("o-4", 1)
	big.UserId = strings.Repeat("u", 5000)
	err = conn.Invoke(authed, reserve, big, res)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), "4096") {
		t.Fatalf("message over 4096 bytes: %v, want ResourceExhausted naming the limit", err)
	}

	hc := healthpb.NewHealthClient(conn)
	h, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v, want SERVING", h, err)
	}

	for code, want := range map[string]float64{"ok": 2, "unauthenticated": 1, "failed_precondition": 1, "resource_exhausted": 1} {
		if got := rpcCount(t, s, "InventoryService/Reserve", code); got != want {
			t.Errorf("shardis_rpc_requests_total{procedure=InventoryService/Reserve,code=%s} = %v, want %v", code, got, want)
		}
	}
}

// rpcCount reads shardis_rpc_requests_total{procedure, code} from the
// server's registry (0 when absent).
func rpcCount(t *testing.T, s *Server, procedure, code string) float64 {
	t.Helper()
	mfs, err := s.Metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "shardis_rpc_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["procedure"] == procedure && labels["code"] == code {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestGRPCPortServesEveryMethod holds the gRPC port's method list to the
// .proto: a method added there and not here would be unimplemented on
// that port only.
func TestGRPCPortServesEveryMethod(t *testing.T) {
	var want, got []string
	svcs := v1.File_shardis_v1_shardis_proto.Services()
	for i := range svcs.Len() {
		ms := svcs.Get(i).Methods()
		for j := range ms.Len() {
			want = append(want, string(svcs.Get(i).FullName())+"/"+string(ms.Get(j).Name()))
		}
	}
	for service, methods := range grpcServices(&Handlers{}) {
		for _, m := range methods {
			got = append(got, service+"/"+m.name)
		}
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(want, got) {
		t.Fatalf("gRPC port methods %v\n.proto methods %v", got, want)
	}
}
