package service

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	v1 "github.com/shardis/shardis/proto/shardis/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Shutdown stops both ports at once: while the service port waits for a
// request still in flight, the gRPC port takes no new call (Shutdown
// "stops accepting calls"), and a gRPC call in flight gets the same grace.
// Before, the gRPC port was stopped only once the service port had
// drained: it served new calls all that time, and had no grace left when
// the drain used up Shutdown's context.
func TestShutdownStopsBothPortsAtOnce(t *testing.T) {
	s, conn := startGRPCService(t)
	authed := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer s3cret")
	const reserve = "/shardis.v1.InventoryService/Reserve"
	req := func(id string) *v1.ReserveRequest {
		return &v1.ReserveRequest{OrderId: id, Items: []*v1.Item{{RouteKey: "all", SkuId: "hat", Quantity: 1}}}
	}
	if err := conn.Invoke(authed, reserve, req("before"), new(v1.ReserveResponse)); err != nil {
		t.Fatalf("reserve before the shutdown: %v", err)
	}
	// A request on the service port that stays in flight: its body never
	// arrives whole.
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := fmt.Fprintf(c, "POST /shardis.v1.InventoryService/GetStock HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
		"Authorization: Bearer s3cret\r\nContent-Length: 100\r\n\r\n{\"route"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the server reads the headers and waits for the body
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(ctx) }()
	time.Sleep(300 * time.Millisecond) // Shutdown began; the service port drains
	cctx, ccancel := context.WithTimeout(authed, time.Second)
	defer ccancel()
	err = conn.Invoke(cctx, reserve, req("during"), new(v1.ReserveResponse))
	if err == nil {
		t.Errorf("a gRPC Reserve sent 300 ms into Shutdown was served: the gRPC port still took new calls")
	} else if code := status.Code(err); code != codes.Unavailable {
		t.Errorf("a gRPC Reserve sent during Shutdown: %v (%v), want Unavailable", err, code)
	}
	<-shut
}
