// Command chaos is `make chaos`: one bounded, seeded, randomized run of
// clients and a nemesis (kill -9, SIGSTOP, route drains, service restarts)
// against real redis-server nodes and the real service, then a check of
// every stock, order, per-user limit and redo-log invariant. It prints the
// seed first (replay a failing run with --seed), the fault timeline, and a
// report; it exits 1 on any violation or if the run could not be carried
// out. See package internal/chaos.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/shardis/shardis/internal/chaos"
	"github.com/shardis/shardis/node"
)

func main() {
	// go-redis's own lines (a dial failure while a node is down or not
	// yet started) go through slog at debug level, dropped here.
	node.RouteRedisLogs(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	seed := flag.Int64("seed", 0, "random seed (default: time-based; printed first so the run can be replayed)")
	duration := flag.Duration("duration", 60*time.Second, "load and fault-injection time; healing and checks add ~5-25s")
	clients := flag.Int("clients", 8, "concurrent order clients")
	nodes := flag.Int("nodes", 3, "redis-server nodes (3..8; a spare node is added for topology changes)")
	ttl := flag.Duration("ttl", 3*time.Second, "inventory.reservation_ttl (whole seconds)")
	clientTimeout := flag.Duration("client-timeout", time.Second, "timeout of every client RPC (pauses last 1.5-3 times longer)")
	gapMin := flag.Duration("gap-min", time.Second, "shortest healthy gap between two faults")
	gapMax := flag.Duration("gap-max", 3*time.Second, "longest healthy gap between two faults")
	dir := flag.String("dir", "", "keep the nodes' data and logs in DIR/n1, DIR/n2 … (default: temporary, removed)")
	svcLog := flag.String("service-log", "", "write the service's logs to this file")
	sentinel := flag.Bool("sentinel", false, "every node a Sentinel group (master, replica, 3 sentinels); the nemesis kills and pauses masters")
	durability := flag.String("durability", "", "inventory.durability: none or replica (default: replica with --sentinel, none without)")
	syncDB := flag.Bool("sync", false, "run PostgreSQL and shardis sync beside the run and check the database against the nodes after healing")
	verbose := flag.Bool("v", false, "list examples of the excused violations under their counts")
	flag.Parse()
	if *seed == 0 {
		*seed = time.Now().UnixNano() % 1_000_000_000
	}
	fmt.Printf("chaos seed %d\n", *seed)
	opts := chaos.Options{
		Seed: *seed, Duration: *duration, Clients: *clients, Nodes: *nodes,
		ReservationTTL: *ttl, ClientTimeout: *clientTimeout, FaultGapMin: *gapMin, FaultGapMax: *gapMax,
		Dir: *dir, Out: os.Stdout, Sentinel: *sentinel, Durability: *durability, Sync: *syncDB,
	}
	if *svcLog != "" {
		f, err := os.Create(*svcLog)
		if err != nil {
			fmt.Fprintln(os.Stderr, "chaos:", err)
			os.Exit(1)
		}
		defer f.Close()
		opts.ServiceLog = f
	}
	// Ctrl-C ends the load early; healing and the checks still run.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := chaos.Run(ctx, opts)
	if rep != nil {
		rep.Verbose = *verbose
		rep.Print(os.Stdout)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: seed %d: %v\n", *seed, err)
		os.Exit(1)
	}
	if !rep.OK() {
		os.Exit(1)
	}
}
