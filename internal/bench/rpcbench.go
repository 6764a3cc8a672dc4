package bench

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"connectrpc.com/connect"

	"github.com/shardis/shardis/inventory"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
)

// RPC variants.
const (
	VarLib = "library: Inventory.Reserve"
	VarRPC = "shardis serve: Connect over HTTP/2 (h2c)"
	// VarRPCFloor is the RPC floor, a yardstick, not shardis: the same
	// client and call against a Connect handler with connect-go's
	// defaults that answers a canned 1-item reply at once (rpcserve.go),
	// in the same service process: what the RPC stack costs by itself.
	VarRPCFloor = "floor: the same call answered at once (Connect, no work)"
	// VarGRPC is the same reserve through the service's gRPC port
	// (service.grpc_listen: grpc-go's transport) from a grpc-go client.
	VarGRPC = "shardis serve: gRPC, grpc-go client and transport (service.grpc_listen)"
	// VarRPCFloorGRPC is the same floor over grpc-go's own transport,
	// client and server (rpcgrpc.go).
	VarRPCFloorGRPC = "floor: the same call answered at once (grpc-go, no work)"
)

// rpcConnsPer is how many of the load's goroutines share one HTTP/2
// connection to the service.
var rpcConnsPer = 16

// RPCResult holds the library and RPC series of the 1-item reserve.
type RPCResult struct {
	Conc     int                // concurrent goroutines of the load (Plan.Conc)
	Variants []string           // the variants measured, in the report's order
	Series   map[string]*Series // each variant's samples over the rounds, by variant name
	Rounds   RoundStats         // how the rounds went (kept, discarded)
}

// RunRPC measures the 1-item reserve through `shardis serve` (the service
// in a process of its own, as `shardis serve` runs it: Connect handlers,
// interceptors, metrics, reconciler; rpcserve.go) from a Connect client
// over cleartext HTTP/2, against the same reserve through the library,
// interleaved in rounds. The service's CPU is counted apart from this
// process's (the client's).
func RunRPC(ctx context.Context, c *Cluster, p Plan, progress func(string)) (*RPCResult, error) {
	srv, err := StartServiceProc(c.Addrs, p.RPCProfile)
	if err != nil {
		return nil, err
	}
	c.Service.Store(srv)
	defer func() { c.Service.Store(nil); srv.Stop() }()
	// One HTTP/2 connection per rpcConns goroutines, as a client pool
	// would open: one connection carries every stream through one
	// reader and one writer goroutine on each side.
	nconn := max(1, p.Conc/rpcConnsPer)
	clients := make([]shardisv1connect.InventoryServiceClient, nconn)
	floors := make([]shardisv1connect.InventoryServiceClient, nconn)
	gfloors := make([]*grpcReserveClient, nconn)
	grpcs := make([]*grpcReserveClient, nconn)
	for i := range nconn {
		if gfloors[i], err = newGRPCReserveClient(srv.GRPCFloorAddr); err != nil {
			return nil, err
		}
		defer gfloors[i].Close()
		if grpcs[i], err = newGRPCReserveClient(srv.GRPCAddr); err != nil {
			return nil, err
		}
		defer grpcs[i].Close()
		tr := &http.Transport{Protocols: new(http.Protocols)}
		tr.Protocols.SetUnencryptedHTTP2(true)
		defer tr.CloseIdleConnections()
		clients[i] = shardisv1connect.NewInventoryServiceClient(&http.Client{Transport: tr}, "http://"+srv.Addr)
		floors[i] = shardisv1connect.NewInventoryServiceClient(&http.Client{Transport: tr}, "http://"+srv.FloorAddr)
	}

	skus := make([]string, p.SKUs)
	for i := range skus {
		skus[i] = "s-" + strconv.Itoa(i)
	}
	nodes := c.Router.Nodes()
	setup := func() error {
		return retrySetup(nodes, func() error {
			if err := c.Reset(ctx); err != nil {
				return err
			}
			for _, s := range skus {
				if _, err := c.Inv.LoadStock(ctx, routeAll, s, inventory.MaxQuantity, 0); err != nil {
					return err
				}
			}
			return nil
		})
	}
	items := make([][]inventory.Item, len(skus))
	for i, s := range skus {
		items[i] = []inventory.Item{{Route: routeAll, SKU: s, Quantity: 1}}
	}
	ops := map[string]Op{
		VarLib: func(w *Worker) error {
			_, err := c.Inv.Reserve(ctx, orderID(w, 'l'), items[w.Rng.IntN(len(items))], "", 0)
			return err
		},
		VarRPC: func(w *Worker) error {
			_, err := clients[w.ID%nconn].Reserve(ctx, connect.NewRequest(&v1.ReserveRequest{
				OrderId: orderID(w, 'r'),
				Items:   []*v1.Item{{RouteKey: routeAll, SkuId: skus[w.Rng.IntN(len(skus))], Quantity: 1}},
			}))
			return err
		},
		VarRPCFloor: func(w *Worker) error {
			_, err := floors[w.ID%nconn].Reserve(ctx, connect.NewRequest(&v1.ReserveRequest{
				OrderId: orderID(w, 'f'),
				Items:   []*v1.Item{{RouteKey: routeAll, SkuId: skus[w.Rng.IntN(len(skus))], Quantity: 1}},
			}))
			return err
		},
	}
	ops[VarRPCFloorGRPC] = func(w *Worker) error {
		_, err := gfloors[w.ID%nconn].Reserve(ctx, &v1.ReserveRequest{
			OrderId: orderID(w, 'g'),
			Items:   []*v1.Item{{RouteKey: routeAll, SkuId: skus[w.Rng.IntN(len(skus))], Quantity: 1}},
		})
		return err
	}
	ops[VarGRPC] = func(w *Worker) error {
		_, err := grpcs[w.ID%nconn].Reserve(ctx, &v1.ReserveRequest{
			OrderId: orderID(w, 'G'),
			Items:   []*v1.Item{{RouteKey: routeAll, SkuId: skus[w.Rng.IntN(len(skus))], Quantity: 1}},
		})
		return err
	}
	variants := []string{VarLib, VarRPC, VarGRPC, VarRPCFloor, VarRPCFloorGRPC}
	res := &RPCResult{Conc: p.Conc, Variants: variants, Series: map[string]*Series{}}
	for _, v := range variants {
		res.Series[v] = &Series{Name: v}
	}
	load := NewLoad(p.Conc, 4)
	for _, v := range variants {
		if err := setup(); err != nil {
			return nil, err
		}
		load.Run(p.Warmup, ops[v])
	}
	st, err := runRounds(p, c.Meter, progress, "rpc", func(int) (func(), string, error) {
		got := map[string]Sample{}
		for _, v := range variants {
			if err := setup(); err != nil {
				return nil, "", err
			}
			got[v] = c.measure(load, p.Round, ops[v])
		}
		return func() {
				for v, s := range got {
					res.Series[v].Add(s)
				}
			}, fmt.Sprintf("orders/s library %.0f, connect %.0f, grpc %.0f, connect floor %.0f, grpc-go floor %.0f", got[VarLib].OpsPerSec(), got[VarRPC].OpsPerSec(),
				got[VarGRPC].OpsPerSec(), got[VarRPCFloor].OpsPerSec(), got[VarRPCFloorGRPC].OpsPerSec()), nil
	})
	res.Rounds = st
	if err != nil {
		return res, err
	}
	return res, nil
}

// rpcMisses explains the missed RPC targets with the run's own figures:
// the CPU the target leaves an RPC on a machine where every process
// shares the cores, against what the RPC floor (VarRPCFloor) spends.
func rpcMisses(r *Results, s Summary) string {
	rp := r.RPC
	if rp == nil {
		return ""
	}
	ratioMet, present := s.Targets["rpc_vs_library>=0.7"]
	cpuMet, cpuPresent := s.Targets["rpc_server_cpu_us_1item<=2x_library"]
	if (!present || ratioMet) && (!cpuPresent || cpuMet) {
		return ""
	}
	lib := rp.Series[VarLib]
	lc, ln, _ := lib.CPUPerOp()
	rc, rn, _ := rp.Series[VarRPC].CPUPerOp()
	rs := rp.Series[VarRPC].ServicePerOp()
	budget := time.Duration(float64(lc+ln) * (1/0.7 - 1))
	t := fmt.Sprintf("- **RPC vs the library** (%.3f, target 0.7; service CPU %s per 1-item reserve, target ≤ 2× the library's %s). "+
		"Per 1-item order the library's caller spent %s and the nodes %s; on cores every process shares, throughput follows CPU per order, so at 0.7 an RPC may add at most %s of client and service CPU. "+
		"Through `shardis serve` the client spent %s, the service %s (the library inside it included) and the nodes %s. ",
		s.RPCVsLibrary, fmtCPU(rs), fmtCPU(lc), fmtCPU(lc), fmtCPU(ln), fmtCPU(budget), fmtCPU(rc), fmtCPU(rs), fmtCPU(rn))
	if f := rp.Series[VarRPCFloor]; f != nil && len(f.Samples) > 0 {
		fc, _, _ := f.CPUPerOp()
		fs := f.ServicePerOp()
		t += fmt.Sprintf("The floor row, the same call over the same connections answered at once by a Connect handler with connect-go's defaults, ran at %.2f× the library and spent %s on the client and %s on the server per call: "+
			"%.1f× the whole budget before any work, so on this machine the target is out of reach of Connect over net/http's HTTP/2, whatever the handler does; "+
			"the service's own work on top of the floor is %s per order.",
			s.RPCFloorVsLibrary, fmtCPU(fc), fmtCPU(fs), float64(fc+fs)/float64(max(budget, 1)), fmtCPU(rs-fs))
	}
	if g, f := rp.Series[VarGRPC], rp.Series[VarRPCFloorGRPC]; g != nil && f != nil && len(g.Samples) > 0 && len(f.Samples) > 0 {
		gc, _, _ := g.CPUPerOp()
		fc, _, _ := f.CPUPerOp()
		fs := f.ServicePerOp()
		t += fmt.Sprintf(" Over grpc-go's transport (the gRPC port, `service.grpc_listen`) the same orders ran at %.2f× the library, the service spending %s and the client %s; "+
			"the grpc-go floor (the call answered at once) spent %s on the client and %s on the server, %.1f× the budget: the cheaper stack, still over what the target leaves.",
			s.RPCGRPCVsLibrary, fmtCPU(g.ServicePerOp()), fmtCPU(gc), fmtCPU(fc), fmtCPU(fs), float64(fc+fs)/float64(max(budget, 1)))
	}
	return t + "\n"
}
