package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/drillcheck"
	"github.com/shardis/shardis/internal/redisproc"
	"github.com/shardis/shardis/inventory"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
)

// masters returns a client of every group's current master, by node name.
func masters(ctx context.Context, groups map[string]*redisproc.Group) (map[string]*redis.Client, func(), error) {
	out := map[string]*redis.Client{}
	closeAll := func() {
		for _, c := range out {
			_ = c.Close()
		}
	}
	for name, g := range groups {
		addr, err := g.Master(ctx)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		out[name] = redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	}
	return out, closeAll, nil
}

// heal waits (up to limit) until no part is pending on any group's master,
// then checks every invariant and returns the violations.
func heal(ctx context.Context, cfg *config.Config, groups map[string]*redisproc.Group, out *outcomes,
	skus []*v1.LoadStockRequest, inv shardisv1connect.InventoryServiceClient, limit time.Duration) []string {
	var problems []string
	cs, closeAll, err := masters(ctx, groups)
	if err != nil {
		return []string{err.Error()}
	}
	defer closeAll()
	deadline := time.Now().Add(limit)
	var pending int64
	for {
		pending = 0
		for _, c := range cs {
			n, err := c.ZCard(ctx, inventory.PendingKey).Result()
			if err != nil {
				n = 1 << 30
			}
			pending += n
		}
		if pending == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	fmt.Printf("%-40s %d\n", "parts still pending", pending)
	if pending > 0 {
		problems = append(problems, fmt.Sprintf("%d parts still pending %v after the load", pending, limit))
	}

	// Every acknowledged outcome is on the order's home master.
	homes, err := inventory.NewHomes(cfg)
	if err != nil {
		return append(problems, err.Error())
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	problems = append(problems, drillcheck.LostOutcomes(ctx, cs, homes, out.acked())...)

	// No unit oversold: confirmed units are exactly the confirmed orders'.
	confirmedUnits, ps := drillcheck.ConfirmedOrderUnits(ctx, cs, out.reserved)
	problems = append(problems, ps...)
	return append(problems, drillcheck.Stock(ctx, inv, skus, confirmedUnits)...)
}
