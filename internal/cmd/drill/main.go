// Command drill is `make drill`: the node-failure drill of docker/drill.sh
// with local processes. It starts three redis-server nodes (AOF on) and
// the shardis service, runs a steady order load over HTTP (internal/drill:
// half the ids minted by NewOrderId, every order with a user), kills one
// node with SIGKILL, restarts it, and reports how long the service took to
// mark it DOWN and UP, the orders by phase and code, how the acknowledged
// ones ended and what was rolled back. After healing it checks the
// invariants of internal/drill's Heal (nothing pending, no acknowledged
// outcome lost, no oversell, every SKU and node adds up) and exits 0 only
// if they hold and orders were acknowledged again after recovery.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/drill"
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
	outage := flag.Duration("outage", 3*time.Second, "how long the killed node stays down")
	victim := flag.String("kill", "n1", "node to kill")
	flag.Parse()
	ok, err := run(*workers, *outage, *victim)
	if err != nil {
		fmt.Fprintln(os.Stderr, "drill:", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}

// run is the drill: it reports and returns whether every invariant held,
// or an error when the drill could not be run.
func run(workers int, outage time.Duration, victim string) (bool, error) {
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

	skus, err := drill.LoadStock(ctx, inv)
	if err != nil {
		return false, err
	}
	fmt.Printf("drill: 3 nodes (AOF), %d order clients, kill -9 %s for %v\n", workers, victim, outage)

	load, stopLoad := drill.Start(inv, drill.Load{Workers: workers, Seed: 7, TTL: 2 * time.Second, Minted: true, Users: true})
	defer stopLoad()

	time.Sleep(2 * time.Second)
	load.SetPhase(drill.Outage)
	killed := time.Now()
	if err := servers[victim].Kill(); err != nil {
		return false, err
	}
	downAfter, _, err := drill.WaitState(ctx, admin, victim, v1.NodeState_NODE_STATE_DOWN, 10*time.Second)
	if err != nil {
		return false, err
	}
	fmt.Printf("\n%-40s %v\n", "time to mark "+victim+" DOWN", downAfter.Round(time.Millisecond))
	time.Sleep(outage - time.Since(killed))
	if err := servers[victim].Restart(); err != nil {
		return false, err
	}
	upAfter, _, err := drill.WaitState(ctx, admin, victim, v1.NodeState_NODE_STATE_UP, 30*time.Second)
	if err != nil {
		return false, err
	}
	load.SetPhase(drill.After)
	fmt.Printf("%-40s %v (after restart)\n", "time to mark "+victim+" UP", upAfter.Round(time.Millisecond))
	time.Sleep(2 * time.Second)
	stopLoad()

	problems := load.Report()
	st := srv.Inv.Stats()
	rs := srv.Rec.Stats()
	fmt.Printf("%-40s %d by failed reserves, %d by the reconciler, %d deferred\n", "parts rolled back", st.PartsRolledBack, rs.Cancelled, st.PartsDeferred)
	// Heal: one TTL plus the attempt lease and reconcile passes for every
	// pending part.
	problems = append(problems, drill.Heal(ctx, &cfg, load, skus, inv, cfg.Inventory.ReservationTTL+15*time.Second)...)
	for _, p := range problems {
		fmt.Println("VIOLATION:", p)
	}
	fmt.Printf("\ndrill %s\n", drill.Verdict(len(problems) == 0))
	return len(problems) == 0, nil
}
