package main

import (
	"context"
	"fmt"
	"sort"
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
	var lost []string
	for id := range out.reserved {
		home := homes.Home(id)
		word, _ := cs[home].HGet(ctx, inventory.OrderKey(id), "status").Result()
		status := inventory.OrderState(word)
		want := ""
		switch {
		case out.confirmed[id] && status != inventory.OrderConfirmed:
			want = "confirmed (Confirm was acknowledged)"
		case out.cancelled[id] && status != inventory.OrderCancelled:
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
	for i, l := range lost {
		if i == 10 {
			problems = append(problems, fmt.Sprintf("… and %d more lost outcomes", len(lost)-10))
			break
		}
		problems = append(problems, l)
	}

	// No unit oversold: confirmed units are exactly the confirmed orders'.
	var confirmedUnits int64
	for name, c := range cs {
		iter := c.Scan(ctx, 0, inventory.OrderKey("*"), 1000).Iterator()
		for iter.Next(ctx) {
			status, _ := c.HGet(ctx, iter.Val(), "status").Result()
			if inventory.OrderState(status) != inventory.OrderConfirmed {
				continue
			}
			_, id := inventory.ParseKey(iter.Val())
			units, ok := out.reserved[id]
			if !ok {
				problems = append(problems, fmt.Sprintf("order %s on %s is confirmed, but its Reserve was never acknowledged", id, name))
			}
			confirmedUnits += units
		}
		if err := iter.Err(); err != nil {
			problems = append(problems, err.Error())
		}
	}
	return append(problems, drillcheck.Stock(ctx, inv, skus, confirmedUnits)...)
}
