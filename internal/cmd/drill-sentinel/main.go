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
	outage := flag.Duration("outage", 4*time.Second, "how long after the kill the old master comes back as a replica")
	victim := flag.String("kill", "n1", "shard (node) whose master is killed")
	durability := flag.String("durability", config.DurabilityReplica, "inventory.durability: none or replica")
	flag.Parse()
	ok, err := run(*workers, *outage, *victim, *durability)
	if err != nil {
		fmt.Fprintln(os.Stderr, "drill-sentinel:", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}

// run is the drill: it reports and returns whether every invariant held,
// or an error when the drill could not be run.
func run(workers int, outage time.Duration, victim, durability string) (bool, error) {
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

	skus, err := drill.LoadStock(ctx, inv)
	if err != nil {
		return false, err
	}
	fmt.Printf("drill-sentinel: 2 shards (master + replica + 3 sentinels each, no persistence), durability %s, %d order clients, kill -9 the master of %s\n",
		durability, workers, victim)

	load, stopLoad := drill.Start(inv, drill.Load{Workers: workers, Seed: 11, TTL: cfg.Inventory.ReservationTTL})
	defer stopLoad()

	time.Sleep(2 * time.Second)
	old, err := g.Master(ctx)
	if err != nil {
		return false, err
	}
	load.SetPhase(drill.Outage)
	killed := time.Now()
	if err := g.ByAddr(old).Kill(); err != nil {
		return false, err
	}
	downAfter, _, err := drill.WaitState(ctx, admin, victim, v1.NodeState_NODE_STATE_DOWN, 10*time.Second)
	if err != nil {
		return false, err
	}
	promoted, err := g.WaitPromoted(ctx, old, 30*time.Second)
	if err != nil {
		return false, err
	}
	promotedAfter := time.Since(killed)
	_, addr, err := drill.WaitState(ctx, admin, victim, v1.NodeState_NODE_STATE_UP, 30*time.Second)
	if err != nil {
		// With durability none the promoted replica may lack writes that
		// were acknowledged: the node is then refused as rolled back.
		fmt.Printf("VIOLATION: %v: %s\n", err, drill.DownReason(ctx, admin, victim))
		return false, nil
	}
	upAfter := time.Since(killed)
	load.SetPhase(drill.After)
	time.Sleep(time.Until(killed.Add(outage)))
	if err := g.Rejoin(ctx, old); err != nil {
		return false, err
	}
	if err := g.WaitSettled(ctx, 30*time.Second); err != nil {
		return false, err
	}
	rejoined := time.Since(killed)
	load.SetPhase(drill.Rejoined)
	time.Sleep(2 * time.Second)
	stopLoad()

	holds := true
	fmt.Printf("\n%-40s %v\n", "time to mark "+victim+" DOWN", downAfter.Round(time.Millisecond))
	fmt.Printf("%-40s %v (%s -> %s)\n", "sentinels promoted the replica after", promotedAfter.Round(time.Millisecond), old, promoted)
	fmt.Printf("%-40s %v after the kill, on %s\n", "time to mark "+victim+" UP", upAfter.Round(time.Millisecond), addr)
	if !drill.OnPromoted(ctx, addr, promoted) {
		fmt.Printf("VIOLATION: %s is UP on %q, not on the promoted replica %s\n", victim, addr, promoted)
		holds = false
	}
	fmt.Printf("%-40s %v after the kill\n", "old master back as a replica", rejoined.Round(time.Millisecond))
	problems := load.Report()
	st := srv.Inv.Stats()
	rs := srv.Rec.Stats()
	fmt.Printf("%-40s %d by failed reserves, %d by the reconciler, %d deferred\n", "parts rolled back", st.PartsRolledBack, rs.Cancelled, st.PartsDeferred)

	// Heal: every reservation expires (TTL) and the reconciler returns it.
	problems = append(problems, drill.Heal(ctx, &cfg, load, skus, inv, cfg.Inventory.ReservationTTL+20*time.Second)...)
	for _, p := range problems {
		fmt.Println("VIOLATION:", p)
	}
	holds = holds && len(problems) == 0
	fmt.Printf("\ndrill-sentinel %s\n", drill.Verdict(holds))
	return holds, nil
}
