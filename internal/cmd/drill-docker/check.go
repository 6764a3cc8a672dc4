package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/drillcheck"
	"github.com/shardis/shardis/inventory"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
)

// masterAddr returns the address of node's Redis master: its addr, or for
// a Sentinel group what the first answering sentinel names.
func masterAddr(ctx context.Context, node config.Node) (string, error) {
	if !node.Sentinel.On() {
		return node.Addr, nil
	}
	var last error
	for _, a := range node.Sentinel.Addrs {
		s := redis.NewSentinelClient(&redis.Options{Addr: a, Protocol: 2})
		hp, err := s.GetMasterAddrByName(ctx, node.Sentinel.Master).Result()
		_ = s.Close()
		if err == nil && len(hp) == 2 {
			return hp[0] + ":" + hp[1], nil
		}
		last = fmt.Errorf("sentinel %s, master %s: %v", a, node.Sentinel.Master, err)
	}
	return "", last
}

// masters returns a client of every node's master, by node name.
func masters(ctx context.Context, cfg *config.Config) (map[string]*redis.Client, func(), error) {
	out := map[string]*redis.Client{}
	closeAll := func() {
		for _, c := range out {
			_ = c.Close()
		}
	}
	for name, node := range cfg.Nodes {
		addr, err := masterAddr(ctx, node)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		out[name] = redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, Username: node.Username, Password: node.Password})
	}
	return out, closeAll, nil
}

// waitNoPending polls every master until no part is pending on any, at
// most limit; it returns how many still are.
func waitNoPending(ctx context.Context, cs map[string]*redis.Client, limit time.Duration) int64 {
	deadline := time.Now().Add(limit)
	for {
		var pending int64
		for _, c := range cs {
			n, err := c.ZCard(ctx, inventory.PendingKey).Result()
			if err != nil {
				n = 1 << 30
			}
			pending += n
		}
		if pending == 0 || time.Now().After(deadline) {
			return pending
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// heal waits (up to limit) until no part is pending on any master, then
// checks every invariant of `make drill` and `make drill-sentinel` and
// returns the violations: nothing left pending, no acknowledged
// reservation, confirmation or cancellation lost, confirmed units exactly
// the confirmed orders' (no oversell), and per SKU and per node
// available + reserved + confirmed = loaded with nothing reserved.
func heal(ctx context.Context, cfg *config.Config, out *outcomes, skus []*v1.LoadStockRequest,
	inv shardisv1connect.InventoryServiceClient, limit time.Duration) []string {
	var problems []string
	cs, closeAll, err := masters(ctx, cfg)
	if err != nil {
		return []string{err.Error()}
	}
	defer closeAll()
	pending := waitNoPending(ctx, cs, limit)
	fmt.Printf("%-40s %d\n", "parts still pending", pending)
	if pending > 0 {
		problems = append(problems, fmt.Sprintf("%d parts still pending %v after the load", pending, limit))
	}
	homes, err := inventory.NewHomes(cfg)
	if err != nil {
		return append(problems, err.Error())
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	problems = append(problems, drillcheck.LostOutcomes(ctx, cs, homes, out.acked())...)
	confirmedUnits, ps := drillcheck.ConfirmedOrderUnits(ctx, cs, out.reserved)
	problems = append(problems, ps...)
	return append(problems, drillcheck.Stock(ctx, inv, skus, confirmedUnits)...)
}
