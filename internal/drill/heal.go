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
	"github.com/shardis/shardis/router"
)

// MasterAddr returns the address of node name's Redis master (node is
// its configuration): its addr, or for a Sentinel group what the first
// answering sentinel names, asked as the router asks (DialSentinel).
func MasterAddr(ctx context.Context, name string, node config.Node) (string, error) {
	if !node.Sentinel.On() {
		return node.Addr, nil
	}
	var last error
	for _, a := range node.Sentinel.Addrs {
		s, err := DialSentinel(name, node, a)
		if err != nil {
			return "", err
		}
		hp, err := s.GetMasterAddrByName(ctx, node.Sentinel.Master).Result()
		_ = s.Close()
		if err == nil && len(hp) == 2 {
			return hp[0] + ":" + hp[1], nil
		}
		last = fmt.Errorf("node %s: sentinel %s, master %s: %v", name, a, node.Sentinel.Master, err)
	}
	return "", last
}

// Dial returns a client of the server at addr that serves node name (node
// is its configuration; addr its master as MasterAddr names it, or a
// server of its group), dialed as the router dials the node's data
// servers: with the node's username, password, database and TLS
// (router.NodeTLS). It fails only when the node's TLS files do not load.
func Dial(name string, node config.Node, addr string) (*redis.Client, error) {
	tlsCfg, err := router.NodeTLS(name, node)
	if err != nil {
		return nil, err
	}
	return redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, Username: node.Username, Password: node.Password,
		DB: node.DB, TLSConfig: tlsCfg}), nil
}

// DialSentinel returns a client of the sentinel at addr of node name's
// Sentinel group, dialed as the router dials the sentinels: with the
// sentinels' username, password and TLS (router.NodeTLS). It fails only
// when the node's TLS files do not load.
func DialSentinel(name string, node config.Node, addr string) (*redis.SentinelClient, error) {
	tlsCfg, err := router.NodeTLS(name, node)
	if err != nil {
		return nil, err
	}
	return redis.NewSentinelClient(&redis.Options{Addr: addr, Protocol: 2, Username: node.Sentinel.Username,
		Password: node.Sentinel.Password, TLSConfig: tlsCfg}), nil
}

// masters returns a client of every node's master (Dial), by node name,
// and a function that closes them.
func masters(ctx context.Context, cfg *config.Config) (map[string]*redis.Client, func(), error) {
	out := map[string]*redis.Client{}
	closeAll := func() {
		for _, c := range out {
			_ = c.Close()
		}
	}
	for name, node := range cfg.Nodes {
		addr, err := MasterAddr(ctx, name, node)
		var c *redis.Client
		if err == nil {
			c, err = Dial(name, node, addr)
		}
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		out[name] = c
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
