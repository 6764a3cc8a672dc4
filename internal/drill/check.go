// Package drill is what the drill programs (make drill, drill-sentinel and
// drill-docker) share: the order load they run over HTTP while a node
// fails (load.go), and the invariants they check once the load has
// stopped and every part has settled (this file, heal.go), read through
// the service and the nodes' masters as an operator would.
package drill

import (
	"context"
	"fmt"
	"sort"

	"connectrpc.com/connect"
	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/inventory"
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
// nothing is pending (stockAddsUp), then that the units confirmed over all
// SKUs are confirmedUnits, the units of the orders whose Confirm was
// acknowledged (no oversell). It prints one line per invariant and returns
// a problem per violation (nil when all hold).
func Stock(ctx context.Context, inv shardisv1connect.InventoryServiceClient, skus []*v1.LoadStockRequest, confirmedUnits int64) []string {
	problems, total, err := stockAddsUp(ctx, inv, skus)
	if err != nil {
		return append(problems, err.Error())
	}
	fmt.Printf("%-40s %d units confirmed, %d units in confirmed orders: %s\n", "invariant confirmed units (no oversell)",
		total, confirmedUnits, Verdict(total == confirmedUnits))
	if total != confirmedUnits {
		problems = append(problems, fmt.Sprintf("%d units confirmed, but confirmed orders hold %d", total, confirmedUnits))
	}
	return problems
}

// stockAddsUp checks, through GetStock, that every SKU of skus adds up
// once nothing is pending: available + reserved + confirmed = the loaded
// quantity with nothing reserved, and per node the same sum with no
// negative counter and every node reachable. It prints one line per SKU
// and returns a problem per violation (nil when all hold) and the units
// confirmed over all SKUs; it stops at the first GetStock that fails and
// returns its error, naming the SKU.
func stockAddsUp(ctx context.Context, inv shardisv1connect.InventoryServiceClient, skus []*v1.LoadStockRequest) (problems []string, confirmed int64, err error) {
	for _, m := range skus {
		res, err := inv.GetStock(ctx, connect.NewRequest(&v1.GetStockRequest{RouteKey: m.RouteKey, SkuId: m.SkuId}))
		if err != nil {
			return problems, confirmed, fmt.Errorf("GetStock %s: %v", m.SkuId, err)
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
		confirmed += s.Confirmed
	}
	return problems, confirmed, nil
}

// Acked is what a drill's clients were told: the orders whose Reserve was
// acknowledged (order id → units), and those whose Confirm or Cancel was.
type Acked struct {
	Reserved  map[string]int64 // order id → units, for every acknowledged Reserve
	Confirmed map[string]bool  // order ids whose Confirm was acknowledged
	Cancelled map[string]bool  // order ids whose Cancel was acknowledged
}

// LostOutcomes checks that every acknowledged outcome is on the order's
// home node among masters (node name → client): a confirmed order is
// confirmed there, a cancelled one cancelled, any other acknowledged
// order reserved, confirmed or cancelled. It prints the count and
// returns the first ten losses (and how many more).
func LostOutcomes(ctx context.Context, masters map[string]*redis.Client, homes *inventory.Homes, a Acked) []string {
	var lost []string
	for id := range a.Reserved {
		home := homes.Home(id)
		f, _ := inventory.ReadOrder(ctx, masters[home], id).Fields() // either layout
		word := f["status"]
		status := inventory.OrderState(word)
		want := ""
		switch {
		case a.Confirmed[id] && status != inventory.OrderConfirmed:
			want = "confirmed (Confirm was acknowledged)"
		case a.Cancelled[id] && status != inventory.OrderCancelled:
			want = "cancelled (Cancel was acknowledged)"
		case status != inventory.OrderReserved && status != inventory.OrderConfirmed && status != inventory.OrderCancelled:
			want = "reserved, confirmed or cancelled (Reserve was acknowledged)"
		}
		if want != "" {
			lost = append(lost, fmt.Sprintf("order %s on %s is %q, want %s", id, home, word, want))
		}
	}
	sort.Strings(lost)
	fmt.Printf("%-40s %d\n", "acknowledged outcomes lost", len(lost))
	if len(lost) > 10 {
		lost = append(lost[:10], fmt.Sprintf("… and %d more lost outcomes", len(lost)-10))
	}
	return lost
}

// ConfirmedOrderUnits sums the units of the orders confirmed on masters
// (node name → client), as the acknowledged Reserves gave them; a
// confirmed order whose Reserve was never acknowledged is a problem.
func ConfirmedOrderUnits(ctx context.Context, masters map[string]*redis.Client, reserved map[string]int64) (int64, []string) {
	var units int64
	var problems []string
	for name, c := range masters {
		iter := c.Scan(ctx, 0, inventory.OrderKey("*"), 1000).Iterator()
		for iter.Next(ctx) {
			_, id := inventory.ParseKey(iter.Val())
			f, _ := inventory.ReadOrder(ctx, c, id).Fields() // either layout
			if inventory.OrderState(f["status"]) != inventory.OrderConfirmed {
				continue
			}
			u, ok := reserved[id]
			if !ok {
				problems = append(problems, fmt.Sprintf("order %s on %s is confirmed, but its Reserve was never acknowledged", id, name))
			}
			units += u
		}
		if err := iter.Err(); err != nil {
			problems = append(problems, fmt.Sprintf("scan orders on %s: %v", name, err))
		}
	}
	return units, problems
}
