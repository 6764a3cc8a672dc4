package drill

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/inventory"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
)

// MasterAddr returns the address of node's Redis master: its addr, or for
// a Sentinel group what the first answering sentinel names.
func MasterAddr(ctx context.Context, node config.Node) (string, error) {
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

// masters returns a client of every node's master, by node name, and a
// function that closes them.
func masters(ctx context.Context, cfg *config.Config) (map[string]*redis.Client, func(), error) {
	out := map[string]*redis.Client{}
	closeAll := func() {
		for _, c := range out {
			_ = c.Close()
		}
	}
	for name, node := range cfg.Nodes {
		addr, err := MasterAddr(ctx, node)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		out[name] = redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, Username: node.Username, Password: node.Password})
	}
	return out, closeAll, nil
}

// waitNoPending polls every master until no part is pending on any, at
// most limit; it returns how many still are (a master it cannot read
// counts as 2^30).
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

// Heal waits (up to limit) until no part is pending on any node's master,
// then checks every invariant of the drills and returns the violations:
// nothing left pending (else it prints each pending part and its order's
// record), no acknowledged reservation, confirmation or cancellation lost,
// confirmed units exactly the confirmed orders' (no oversell), and per
// SKU and per node available + reserved + confirmed = loaded with nothing
// reserved. It prints a line per check.
func Heal(ctx context.Context, cfg *config.Config, out *Outcomes, skus []*v1.LoadStockRequest,
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
		dumpPending(ctx, cs)
	}
	homes, err := inventory.NewHomes(cfg)
	if err != nil {
		return append(problems, err.Error())
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	problems = append(problems, LostOutcomes(ctx, cs, homes, out.acked())...)
	confirmedUnits, ps := ConfirmedOrderUnits(ctx, cs, out.acks)
	problems = append(problems, ps...)
	return append(problems, Stock(ctx, inv, skus, confirmedUnits)...)
}

// dumpPending prints every part still pending on cs (node name → master)
// and its order's record wherever one is found.
func dumpPending(ctx context.Context, cs map[string]*redis.Client) {
	for name, c := range cs {
		ids, _ := c.ZRangeWithScores(ctx, inventory.PendingKey, 0, -1).Result()
		for _, z := range ids {
			id, _ := inventory.PendingPartID(ctx, c, z.Member.(string))
			part, _ := inventory.ReadPart(ctx, c, id).Fields()
			order := part["order"]
			if len(part) == 0 { // an inline part (inventory/inline.go): its order's record holds it
				if i := strings.LastIndexByte(id, '|'); i > 0 {
					if j := strings.LastIndexByte(id[:i], '|'); j > 0 {
						order = id[:j]
					}
				}
			}
			fmt.Printf("  pending on %s: %s deadline=%.0f part=%v\n", name, id, z.Score, part)
			for oname, oc := range cs {
				if rec, _ := inventory.ReadOrder(ctx, oc, order).Fields(); len(rec) > 0 {
					fmt.Printf("    order record on %s: %v\n", oname, rec)
				}
			}
		}
	}
}
