// Command drill is `make drill`: the node-failure drill of docker/drill.sh
// with local processes. It starts three redis-server nodes (AOF on) and
// the shardis service, runs a steady order load over HTTP, kills one node
// with SIGKILL, restarts it, and reports how long the service took to mark
// it DOWN and UP, what the orders saw, what was rolled back, and whether
// every stock invariant holds at the end. It exits 0 only if they hold.
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
	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/drillcheck"
	"github.com/shardis/shardis/internal/redisproc"
	"github.com/shardis/shardis/internal/service"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
)

func main() {
	// go-redis's own lines (a dial failure while a node is down or not
	// yet started) go through slog at debug level, dropped here.
	node.RouteRedisLogs(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	workers := flag.Int("workers", 8, "concurrent order clients")
	outage := flag.Duration("outage", 3*time.Second, "how long the killed node stays down")
	victim := flag.String("kill", "n1", "node to kill")
	flag.Parse()
	ok, err := drill(*workers, *outage, *victim)
	if err != nil {
		fmt.Fprintln(os.Stderr, "drill:", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}

// counts tallies the drill's orders; okMinted and failedMinted are the
// part of ok and failed whose id came from NewOrderId. Every ok order is
// confirmed, cancelled, left to expire, or unsettled: its Confirm or
// Cancel failed (its node down, the call past its deadline, the load
// stopped mid-call), so it expires like a left one unless the call took
// effect before failing.
type counts struct {
	ok, failed, confirmed, cancelled, left, unsettled atomic.Int64
	okMinted, failedMinted                            atomic.Int64
}

// accounted returns confirmed+cancelled+left+unsettled and whether it is
// the ok count (every successful reserve followed to its end).
func (c *counts) accounted() (int64, bool) {
	sum := c.confirmed.Load() + c.cancelled.Load() + c.left.Load() + c.unsettled.Load()
	return sum, sum == c.ok.Load()
}

func drill(workers int, outage time.Duration, victim string) (bool, error) {
	names := []string{"n1", "n2", "n3"}
	cfg := config.Default()
	cfg.Service.Listen = "127.0.0.1:0"
	cfg.Nodes = map[string]config.Node{}
	servers := map[string]*redisproc.Server{}
	defer func() {
		for _, s := range servers {
			_ = s.Close()
		}
	}()
	for _, name := range names {
		s, err := redisproc.Start(redisproc.Options{AOF: true, KillWithParent: true})
		if err != nil {
			return false, err
		}
		servers[name] = s
		cfg.Nodes[name] = config.Node{Addr: s.Addr(), Weight: 1}
	}
	if _, ok := servers[victim]; !ok {
		return false, fmt.Errorf("--kill %q: want one of %v", victim, names)
	}
	cfg.Servers = map[string]config.Server{"inventory": {OnNodeDown: config.OnNodeDownFail,
		Routes: map[string][]string{"clothes": names, "books": {"n2", "n3"}}}}
	cfg.Inventory.ReservationTTL = 2 * time.Second
	cfg.Inventory.ReconcileInterval = 500 * time.Millisecond
	if err := cfg.Validate(); err != nil {
		return false, err
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	srv, err := service.Start(ctx, &cfg, log)
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
	fmt.Printf("drill: 3 nodes (AOF), %d order clients, kill -9 %s for %v\n", workers, victim, outage)

	var c counts
	codes := sync.Map{}
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := 0; loadCtx.Err() == nil; i++ {
				order(loadCtx, inv, fmt.Sprintf("w%d-%d", w, i), rng, &c, &codes)
			}
		}()
	}

	time.Sleep(2 * time.Second)
	killed := time.Now()
	if err := servers[victim].Kill(); err != nil {
		return false, err
	}
	downAfter, err := waitState(ctx, admin, victim, v1.NodeState_NODE_STATE_DOWN, 10*time.Second)
	if err != nil {
		return false, err
	}
	time.Sleep(outage - time.Since(killed))
	if err := servers[victim].Restart(); err != nil {
		return false, err
	}
	upAfter, err := waitState(ctx, admin, victim, v1.NodeState_NODE_STATE_UP, 30*time.Second)
	if err != nil {
		return false, err
	}
	time.Sleep(2 * time.Second)
	stopLoad()
	wg.Wait()

	// Heal: wait one TTL plus reconcile passes for every pending part.
	pendingLeft := waitNoPending(servers, cfg.Inventory.ReservationTTL+15*time.Second) // TTL + attempt lease
	holds := true
	fmt.Printf("\n%-34s %v\n", "time to mark "+victim+" DOWN", downAfter.Round(time.Millisecond))
	fmt.Printf("%-34s %v (after restart)\n", "time to mark "+victim+" UP", upAfter.Round(time.Millisecond))
	fmt.Printf("%-34s %d ok, %d failed\n", "orders", c.ok.Load(), c.failed.Load())
	fmt.Printf("%-34s %d ok, %d failed (the rest had ids made up by the client)\n", "  of them with minted ids", c.okMinted.Load(), c.failedMinted.Load())
	codes.Range(func(k, v any) bool {
		fmt.Printf("%-34s %d\n", "  failed with "+k.(string), v.(*atomic.Int64).Load())
		return true
	})
	fmt.Printf("%-34s %d confirmed, %d cancelled, %d left to expire, %d whose confirm or cancel failed (they expire)\n",
		"of the ok orders", c.confirmed.Load(), c.cancelled.Load(), c.left.Load(), c.unsettled.Load())
	sum, added := c.accounted()
	fmt.Printf("%-34s %d of %d ok orders: %s\n", "  accounted for", sum, c.ok.Load(), drillcheck.Verdict(added))
	holds = holds && added
	st := srv.Inv.Stats()
	rs := srv.Rec.Stats()
	fmt.Printf("%-34s %d by failed reserves, %d by the reconciler, %d deferred\n", "parts rolled back", st.PartsRolledBack, rs.Cancelled, st.PartsDeferred)
	fmt.Printf("%-34s %d\n", "parts still pending", pendingLeft)
	if pendingLeft > 0 {
		holds = false
		dumpPending(servers)
	}
	problems, _, err := drillcheck.StockAddsUp(ctx, inv, skus)
	if err != nil {
		return false, err
	}
	holds = holds && len(problems) == 0
	fmt.Printf("\ndrill %s\n", drillcheck.Verdict(holds))
	return holds, nil
}

func order(ctx context.Context, inv shardisv1connect.InventoryServiceClient, id string, rng *rand.Rand, c *counts, codes *sync.Map) {
	items := []*v1.Item{{RouteKey: "clothes", SkuId: "sku-a", Quantity: 1 + rng.Int64N(2)}}
	if rng.IntN(2) == 0 {
		items = append(items, &v1.Item{RouteKey: "books", SkuId: "sku-b", Quantity: 1})
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	// Half the orders get an id minted by the service: its record lives on
	// a node that was usable when minted, so it does not fail for its
	// record's node being down.
	minted := rng.IntN(2) == 0
	user := "u" + id
	var err error
	if minted {
		var res *connect.Response[v1.NewOrderIdResponse]
		if res, err = inv.NewOrderId(rctx, connect.NewRequest(&v1.NewOrderIdRequest{})); err == nil {
			id = res.Msg.OrderId
		}
	}
	if err == nil {
		_, err = inv.Reserve(rctx, connect.NewRequest(&v1.ReserveRequest{OrderId: id, Items: items, UserId: user, TtlSeconds: 2}))
	}
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		c.failed.Add(1)
		if minted {
			c.failedMinted.Add(1)
		}
		v, _ := codes.LoadOrStore(connect.CodeOf(err).String(), new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
		return
	}
	c.ok.Add(1)
	if minted {
		c.okMinted.Add(1)
	}
	switch rng.IntN(10) {
	case 0:
		c.left.Add(1) // let it expire: the reconciler must return it
	case 1, 2, 3, 4:
		if _, err := inv.Cancel(rctx, connect.NewRequest(&v1.CancelRequest{OrderId: id})); err == nil {
			c.cancelled.Add(1)
		} else {
			c.unsettled.Add(1)
		}
	default:
		if _, err := inv.Confirm(rctx, connect.NewRequest(&v1.ConfirmRequest{OrderId: id})); err == nil {
			c.confirmed.Add(1)
		} else {
			c.unsettled.Add(1)
		}
	}
}

func waitState(ctx context.Context, admin shardisv1connect.AdminServiceClient, name string, want v1.NodeState, limit time.Duration) (time.Duration, error) {
	start := time.Now()
	for time.Since(start) < limit {
		res, err := admin.ListNodes(ctx, connect.NewRequest(&v1.ListNodesRequest{}))
		if err == nil {
			for _, n := range res.Msg.Nodes {
				if n.Name == name && n.State == want {
					return time.Since(start), nil
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return 0, fmt.Errorf("node %s did not become %v within %v", name, want, limit)
}

func waitNoPending(servers map[string]*redisproc.Server, limit time.Duration) int64 {
	deadline := time.Now().Add(limit)
	for {
		var total int64
		for _, s := range servers {
			c := redis.NewClient(&redis.Options{Addr: s.Addr(), Protocol: 2})
			n, err := c.ZCard(context.Background(), inventory.PendingKey).Result()
			c.Close()
			if err != nil {
				n = 1 << 30
			}
			total += n
		}
		if total == 0 || time.Now().After(deadline) {
			return total
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// dumpPending prints every part still pending and its order's record.
func dumpPending(servers map[string]*redisproc.Server) {
	ctx := context.Background()
	for name, s := range servers {
		c := redis.NewClient(&redis.Options{Addr: s.Addr(), Protocol: 2})
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
			for oname, os := range servers {
				oc := redis.NewClient(&redis.Options{Addr: os.Addr(), Protocol: 2})
				if rec, _ := inventory.ReadOrder(ctx, oc, order).Fields(); len(rec) > 0 {
					fmt.Printf("    order record on %s: %v\n", oname, rec)
				}
				oc.Close()
			}
		}
		c.Close()
	}
}
