// Package drillcheck holds the invariants the drill programs (drill,
// drill-sentinel, drill-docker) check once their load has stopped and
// every part has settled, read through the service as an operator would.
package drillcheck

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	v1 "github.com/shardis/shardis/proto/shardis/v1"
	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
)

// Verdict is how a drill prints a checked invariant: HOLDS or VIOLATED.
func Verdict(ok bool) string {
	if ok {
		return "HOLDS"
	}
	return "VIOLATED"
}

// Stock checks, through GetStock, that every SKU of skus adds up once
// nothing is pending: available + reserved + confirmed = the loaded
// quantity with nothing reserved, and per node the same sum with no
// negative counter and every node reachable; then that the units
// confirmed over all SKUs are confirmedUnits, the units of the orders
// whose Confirm was acknowledged (no oversell). It prints one line per
// invariant and returns a problem per violation (nil when all hold).
func Stock(ctx context.Context, inv shardisv1connect.InventoryServiceClient, skus []*v1.LoadStockRequest, confirmedUnits int64) []string {
	var problems []string
	var total int64
	for _, m := range skus {
		res, err := inv.GetStock(ctx, connect.NewRequest(&v1.GetStockRequest{RouteKey: m.RouteKey, SkuId: m.SkuId}))
		if err != nil {
			return append(problems, fmt.Sprintf("GetStock %s: %v", m.SkuId, err))
		}
		s := res.Msg.Stock
		ok := s.Available+s.Reserved+s.Confirmed == m.Quantity && s.Loaded == m.Quantity && s.Reserved == 0
		for _, n := range s.Nodes {
			if !n.Reachable || n.Available < 0 || n.Reserved < 0 || n.Confirmed < 0 || n.Available+n.Reserved+n.Confirmed != n.Loaded {
				ok = false
			}
		}
		fmt.Printf("%-40s available %d + reserved %d + confirmed %d = %d of %d loaded: %s\n", "invariant "+m.SkuId,
			s.Available, s.Reserved, s.Confirmed, s.Available+s.Reserved+s.Confirmed, m.Quantity, Verdict(ok))
		if !ok {
			problems = append(problems, "stock of "+m.SkuId+" does not add up (or a node's counter is negative or a node unreachable)")
		}
		total += s.Confirmed
	}
	fmt.Printf("%-40s %d units confirmed, %d units in confirmed orders: %s\n", "invariant confirmed units (no oversell)",
		total, confirmedUnits, Verdict(total == confirmedUnits))
	if total != confirmedUnits {
		problems = append(problems, fmt.Sprintf("%d units confirmed, but confirmed orders hold %d", total, confirmedUnits))
	}
	return problems
}
