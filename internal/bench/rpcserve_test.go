package bench

import (
	"context"
	"net/http"
	"os"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/shardis/shardis/internal/redistest"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
)

// TestMain lets the test binary be the RPC section's service child too,
// as the benchmark binary is (ServeChild returns at once otherwise).
func TestMain(m *testing.M) {
	ServeChild()
	SyncChild()
	os.Exit(m.Run())
}

// TestServiceProc starts the service child over three real nodes: it
// reserves through the service (stock loaded through it too), the floor
// echoes the order id without touching the nodes, the child's CPU is its
// own (not this process's), and Stop ends the process.
func TestServiceProc(t *testing.T) {
	srvs := redistest.StartN(t, 3, redistest.Options{})
	p, err := StartServiceProc([]string{srvs[0].Addr(), srvs[1].Addr(), srvs[2].Addr()}, "")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	if p.Pid() == os.Getpid() || p.Addr == "" || p.FloorAddr == "" || p.GRPCAddr == "" || p.Addr == p.FloorAddr {
		t.Fatalf("child pid %d (ours %d), addr %q, floor %q", p.Pid(), os.Getpid(), p.Addr, p.FloorAddr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hc := &http.Client{}
	svc := shardisv1connect.NewInventoryServiceClient(hc, "http://"+p.Addr)
	floor := shardisv1connect.NewInventoryServiceClient(hc, "http://"+p.FloorAddr)
	gfloor, err := newGRPCReserveClient(p.GRPCFloorAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer gfloor.Close()

	var loadErr error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		// The nodes may still be coming up in the child's router.
		if _, loadErr = svc.LoadStock(ctx, connect.NewRequest(&v1.LoadStockRequest{RouteKey: routeAll, SkuId: "s-0", Quantity: 5})); loadErr == nil {
			break
		}
	}
	if loadErr != nil {
		t.Fatalf("LoadStock through the child: %v", loadErr)
	}
	before := procTicks(p.Pid())
	for i := range 200 {
		id := "o-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		res, err := svc.Reserve(ctx, connect.NewRequest(&v1.ReserveRequest{OrderId: id,
			Items: []*v1.Item{{RouteKey: routeAll, SkuId: "s-0", Quantity: 1}}}))
		if i < 5 && (err != nil || res.Msg.GetOrderId() != id) {
			t.Fatalf("reserve %d through the child: %v", i, err)
		}
		if i >= 5 && connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Fatalf("reserve %d past the 5 units: %v, want failed_precondition", i, err)
		}
		f, err := floor.Reserve(ctx, connect.NewRequest(&v1.ReserveRequest{OrderId: id}))
		if err != nil || f.Msg.GetOrderId() != id || len(f.Msg.GetReceipts()) != 1 {
			t.Fatalf("floor reserve %d: %v %v", i, f, err)
		}
		g, err := gfloor.Reserve(ctx, &v1.ReserveRequest{OrderId: id})
		if err != nil || g.GetOrderId() != id || len(g.GetReceipts()) != 1 {
			t.Fatalf("grpc-go floor reserve %d: %v %v", i, g, err)
		}
	}
	if after := procTicks(p.Pid()); after <= before {
		t.Errorf("the child used no CPU over 600 calls (%d → %d ticks): is its CPU read from its own pid?", before, after)
	}
	p.Stop()
	if procTicks(p.Pid()) != 0 {
		t.Errorf("the child's process is still there after Stop")
	}
}
