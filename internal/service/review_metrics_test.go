package service

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

// TestReviewMetricsGRPCPortCountsUnknownProcedure holds the gRPC port to
// the service port's shardis_rpc_requests_total contract (README,
// Metrics: every answered request, procedure "unknown" for a path naming
// none; "The gRPC port": the same codes, metrics, logs): a call of a
// method the API does not have is counted as {procedure="unknown"} on
// both ports, with the code each answered (unauthenticated without the
// token, unimplemented with it).
func TestReviewMetricsGRPCPortCountsUnknownProcedure(t *testing.T) {
	s, conn := startGRPCService(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const nope = "/shardis.v1.InventoryService/Nope"

	// The service port, for reference.
	for _, auth := range []string{"", "Bearer s3cret"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+s.Addr()+nope, bytes.NewReader([]byte("{}")))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
	}
	for code, want := range map[string]float64{"unauthenticated": 1, "unimplemented": 1} {
		if got := rpcCount(t, s, "unknown", code); got != want {
			t.Fatalf("service port: shardis_rpc_requests_total{procedure=unknown,code=%s} = %v, want %v", code, got, want)
		}
	}

	res := new(v1.ReserveResponse)
	if err := conn.Invoke(ctx, nope, &v1.ReserveRequest{}, res); status.Code(err) != codes.Unauthenticated {
		t.Errorf("gRPC port, no token: %v, want Unauthenticated", err)
	}
	authed := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer s3cret")
	if err := conn.Invoke(authed, nope, &v1.ReserveRequest{}, res); status.Code(err) != codes.Unimplemented {
		t.Errorf("gRPC port: %v, want Unimplemented", err)
	}
	for code, want := range map[string]float64{"unauthenticated": 2, "unimplemented": 2} {
		if got := rpcCount(t, s, "unknown", code); got != want {
			t.Errorf("after the gRPC port's calls: shardis_rpc_requests_total{procedure=unknown,code=%s} = %v, want %v", code, got, want)
		}
	}
}
