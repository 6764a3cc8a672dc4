// Command drill-sentinel is `make drill-sentinel`: the failover drill of
// Sentinel-managed shards, with local processes. Each shard is a master
// group (one master, one replica, three redis-sentinel processes on
// loopback ports); the shardis service runs over them with
// inventory.durability replica (or --durability none). Under a steady
// order load over HTTP it kills one master with SIGKILL, then reports how
// long the service took to mark the shard DOWN and to mark it UP again on
// the promoted replica (without a restart), the orders by outcome and
// code, and whether every invariant holds after healing: no acknowledged
// reservation, confirmation or cancellation lost, no unit oversold
// (confirmed units are exactly the confirmed orders', every SKU's
// available + reserved + confirmed is what was loaded), nothing left
// pending. It exits 0 only if they hold.
//
// The killed master is brought back as a replica of the promoted one
// (REPLICAOF, as an operator would) after --outage: with durability
// replica a group without a replica acknowledges no write.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/drillcheck"
	"github.com/shardis/shardis/internal/redisproc"
	"github.com/shardis/shardis/internal/service"
	"github.com/shardis/shardis/node"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
)

func main() {
	// go-redis's own lines (a dial failure while a node is down or not
	// yet started) go through slog at debug level, dropped here.
	node.RouteRedisLogs(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	workers := flag.Int("workers", 8, "concurrent order clients")
	outage := flag.Duration("outage", 4*time.Second, "how long after the kill the old master comes back as a replica")
	victim := flag.String("kill", "n1", "shard (node) whose master is killed")
	durability := flag.String("durability", config.DurabilityReplica, "inventory.durability: none or replica")
	flag.Parse()
	ok, err := drill(*workers, *outage, *victim, *durability)
	if err != nil {
		fmt.Fprintln(os.Stderr, "drill-sentinel:", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}

// outcomes of the order load.
type outcomes struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	codes      map[string]int64
	reserved   map[string]int64 // acknowledged Reserve: order → units
	confirmed  map[string]bool  // acknowledged Confirm
	cancelled  map[string]bool  // acknowledged Cancel
}

// acked is what the clients were told, for the checks. The caller holds
// o.mu.
func (o *outcomes) acked() drillcheck.Acked {
	return drillcheck.Acked{Reserved: o.reserved, Confirmed: o.confirmed, Cancelled: o.cancelled}
}

func drill(workers int, outage time.Duration, victim, durability string) (bool, error) {
	names := []string{"n1", "n2"}
	cfg := config.Default()
	cfg.Service.Listen = "127.0.0.1:0"
	cfg.Nodes = map[string]config.Node{}
	groups := map[string]*redisproc.Group{}
	defer func() {
		for _, g := range groups {
			_ = g.Close()
		}
	}()
	for _, name := range names {
		g, err := redisproc.StartGroup(redisproc.GroupOptions{Name: "shard-" + name, KillWithParent: true})
		if err != nil {
			return false, err
		}
		groups[name] = g
		cfg.Nodes[name] = config.Node{Weight: 1, Sentinel: config.Sentinel{Master: g.Name, Addrs: g.SentinelAddrs()}}
	}
	g, ok := groups[victim]
	if !ok {
		return false, fmt.Errorf("--kill %q: want one of %v", victim, names)
	}
	cfg.Servers = map[string]config.Server{"inventory": {OnNodeDown: config.OnNodeDownFail,
		Routes: map[string][]string{"clothes": names, "books": {"n2"}}}}
	cfg.Health.Heartbeat = 200 * time.Millisecond
	cfg.Health.Backoff = []time.Duration{200 * time.Millisecond, 400 * time.Millisecond}
	cfg.Inventory.ReservationTTL = 3 * time.Second
	cfg.Inventory.ReconcileInterval = 500 * time.Millisecond
	cfg.Inventory.Durability = durability
	if err := cfg.Validate(); err != nil {
		return false, err
	}
	ctx := context.Background()
	srv, err := service.Start(ctx, &cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return false, err
	}
	defer srv.Shutdown(context.Background())
	base := "http://" + srv.Addr()
	inv := shardisv1connect.NewInventoryServiceClient(http.DefaultClient, base)
	admin := shardisv1connect.NewAdminServiceClient(http.DefaultClient, base)

	skus := []*v1.LoadStockRequest{{RouteKey: "clothes", SkuId: "sku-a", Quantity: 50000}, {RouteKey: "books", SkuId: "sku-b", Quantity: 50000}}
	for _, m := range skus {
		if _, err := inv.LoadStock(ctx, connect.NewRequest(m)); err != nil {
			return false, fmt.Errorf("load %s: %w", m.SkuId, err)
		}
	}
	fmt.Printf("drill-sentinel: 2 shards (master + replica + 3 sentinels each, no persistence), durability %s, %d order clients, kill -9 the master of %s\n",
		durability, workers, victim)

	out := &outcomes{codes: map[string]int64{}, reserved: map[string]int64{}, confirmed: map[string]bool{}, cancelled: map[string]bool{}}
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			for i := 0; loadCtx.Err() == nil; i++ {
				order(loadCtx, inv, fmt.Sprintf("w%d-%d", w, i), rng, out)
			}
		}()
	}

	time.Sleep(2 * time.Second)
	old, err := g.Master(ctx)
	if err != nil {
		return false, err
	}
	killed := time.Now()
	if err := g.ByAddr(old).Kill(); err != nil {
		return false, err
	}
	downAfter, _, err := waitState(ctx, admin, victim, v1.NodeState_NODE_STATE_DOWN, 10*time.Second)
	if err != nil {
		return false, err
	}
	promoted, err := g.WaitPromoted(ctx, old, 30*time.Second)
	if err != nil {
		return false, err
	}
	promotedAfter := time.Since(killed)
	_, addr, err := waitState(ctx, admin, victim, v1.NodeState_NODE_STATE_UP, 30*time.Second)
	if err != nil {
		// With durability none the promoted replica may lack writes that
		// were acknowledged: the node is then refused as rolled back.
		fmt.Printf("VIOLATION: %v: %s\n", err, downReason(ctx, admin, victim))
		return false, nil
	}
	upAfter := time.Since(killed)
	time.Sleep(time.Until(killed.Add(outage)))
	if err := g.Rejoin(ctx, old); err != nil {
		return false, err
	}
	if err := g.WaitSettled(ctx, 30*time.Second); err != nil {
		return false, err
	}
	rejoined := time.Since(killed)
	time.Sleep(2 * time.Second)
	stopLoad()
	wg.Wait()

	holds := true
	fmt.Printf("\n%-40s %v\n", "time to mark "+victim+" DOWN", downAfter.Round(time.Millisecond))
	fmt.Printf("%-40s %v (%s -> %s)\n", "sentinels promoted the replica after", promotedAfter.Round(time.Millisecond), old, promoted)
	fmt.Printf("%-40s %v after the kill, on %s\n", "time to mark "+victim+" UP", upAfter.Round(time.Millisecond), addr)
	if !strings.Contains(addr, promoted) {
		fmt.Printf("VIOLATION: %s is UP on %q, not on the promoted replica %s\n", victim, addr, promoted)
		holds = false
	}
	fmt.Printf("%-40s %v after the kill\n", "old master back as a replica", rejoined.Round(time.Millisecond))
	fmt.Printf("%-40s %d ok, %d failed\n", "reserves", out.ok.Load(), out.failed.Load())
	out.mu.Lock()
	for code, n := range out.codes {
		fmt.Printf("%-40s %d\n", "  failed with "+code, n)
	}
	fmt.Printf("%-40s %d confirmed, %d cancelled (acknowledged)\n", "of the ok orders", len(out.confirmed), len(out.cancelled))
	out.mu.Unlock()
	st := srv.Inv.Stats()
	rs := srv.Rec.Stats()
	fmt.Printf("%-40s %d by failed reserves, %d by the reconciler, %d deferred\n", "parts rolled back", st.PartsRolledBack, rs.Cancelled, st.PartsDeferred)

	// Heal: every reservation expires (TTL) and the reconciler returns it.
	problems := heal(ctx, &cfg, groups, out, skus, inv, cfg.Inventory.ReservationTTL+20*time.Second)
	for _, p := range problems {
		fmt.Println("VIOLATION:", p)
	}
	holds = holds && len(problems) == 0
	fmt.Printf("\ndrill-sentinel %s\n", drillcheck.Verdict(holds))
	return holds, nil
}

func order(ctx context.Context, inv shardisv1connect.InventoryServiceClient, id string, rng *rand.Rand, out *outcomes) {
	qty := 1 + rng.Int64N(2)
	items := []*v1.Item{{RouteKey: "clothes", SkuId: "sku-a", Quantity: qty}}
	units := qty
	if rng.IntN(2) == 0 {
		items = append(items, &v1.Item{RouteKey: "books", SkuId: "sku-b", Quantity: 1})
		units++
	}
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err := inv.Reserve(rctx, connect.NewRequest(&v1.ReserveRequest{OrderId: id, Items: items, TtlSeconds: 3}))
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		out.failed.Add(1)
		out.mu.Lock()
		out.codes[connect.CodeOf(err).String()]++
		out.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		return
	}
	out.ok.Add(1)
	out.mu.Lock()
	out.reserved[id] = units
	out.mu.Unlock()
	switch rng.IntN(10) {
	case 0: // let it expire: the reconciler must return it
	case 1, 2, 3:
		if _, err := inv.Cancel(rctx, connect.NewRequest(&v1.CancelRequest{OrderId: id})); err == nil {
			out.mu.Lock()
			out.cancelled[id] = true
			out.mu.Unlock()
		}
	default:
		if _, err := inv.Confirm(rctx, connect.NewRequest(&v1.ConfirmRequest{OrderId: id})); err == nil {
			out.mu.Lock()
			out.confirmed[id] = true
			out.mu.Unlock()
		}
	}
}

// waitState polls ListNodes until node name is in state want, and returns
// how long that took and the node's address as listed.
func waitState(ctx context.Context, admin shardisv1connect.AdminServiceClient, name string, want v1.NodeState, limit time.Duration) (time.Duration, string, error) {
	start := time.Now()
	for time.Since(start) < limit {
		res, err := admin.ListNodes(ctx, connect.NewRequest(&v1.ListNodesRequest{}))
		if err == nil {
			for _, n := range res.Msg.Nodes {
				if n.Name == name && n.State == want {
					return time.Since(start), n.Addr, nil
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return 0, "", fmt.Errorf("node %s did not become %v within %v", name, want, limit)
}

// downReason returns why ListNodes says node name is DOWN.
func downReason(ctx context.Context, admin shardisv1connect.AdminServiceClient, name string) string {
	res, err := admin.ListNodes(ctx, connect.NewRequest(&v1.ListNodesRequest{}))
	if err != nil {
		return err.Error()
	}
	for _, n := range res.Msg.Nodes {
		if n.Name == name {
			return n.DownReason
		}
	}
	return "not listed"
}
