package bench

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"connectrpc.com/connect"

	"github.com/shardis/shardis/internal/service"
	"github.com/shardis/shardis/inventory"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
)

// RPC variants.
const (
	VarLib = "library: Inventory.Reserve"
	VarRPC = "shardis serve: Connect over HTTP/2 (h2c)"
)

// RPCResult holds the library and RPC series of the 1-item reserve.
type RPCResult struct {
	Conc     int
	Variants []string
	Series   map[string]*Series
	Rounds   RoundStats
}

// RunRPC measures the 1-item reserve through `shardis serve` (the service
// started in this process, as `shardis serve` runs it: Connect handlers,
// interceptors, metrics, reconciler) from a Connect client over
// cleartext HTTP/2, against the same reserve through the library,
// interleaved in rounds.
func RunRPC(ctx context.Context, c *Cluster, p Plan, progress func(string)) (*RPCResult, error) {
	cfg := BenchConfig(c.Addrs)
	srv, err := service.Start(ctx, cfg, c.Log)
	if err != nil {
		return nil, err
	}
	defer srv.Shutdown(context.Background())
	tr := &http.Transport{Protocols: new(http.Protocols), MaxIdleConnsPerHost: p.Conc}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	client := shardisv1connect.NewInventoryServiceClient(&http.Client{Transport: tr}, "http://"+srv.Addr())

	skus := make([]string, p.SKUs)
	for i := range skus {
		skus[i] = "s-" + strconv.Itoa(i)
	}
	nodes := append(c.Router.Nodes(), srv.Router.Nodes()...)
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
			_, err := client.Reserve(ctx, connect.NewRequest(&v1.ReserveRequest{
				OrderId: orderID(w, 'r'),
				Items:   []*v1.Item{{RouteKey: routeAll, SkuId: skus[w.Rng.IntN(len(skus))], Quantity: 1}},
			}))
			return err
		},
	}
	variants := []string{VarLib, VarRPC}
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
		}, fmt.Sprintf("orders/s library %.0f, rpc %.0f", got[VarLib].OpsPerSec(), got[VarRPC].OpsPerSec()), nil
	})
	res.Rounds = st
	if err != nil {
		return res, err
	}
	return res, nil
}
