// Command bench is `make bench` and `make bench-quick`: it starts three
// redis-server nodes and a twemproxy, measures shardis against hand-routed
// go-redis, go-redis Ring, twemproxy and the seed's one-EVAL-per-item
// reservations (see package internal/bench), prints the tables and, as
// its last line, a one-line JSON summary. With -out it also rewrites the
// benchmark report (BENCHMARKS.md).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardis/shardis/internal/bench"
	"github.com/shardis/shardis/node"
)

func main() {
	bench.ServeChild() // the RPC section's service child: serves, then exits
	bench.SyncChild()  // the sync section's `shardis sync` child: lands, then exits
	testing.Init()     // testing.Benchmark (routing cost, allocations) needs the test flags registered
	quick := flag.Bool("quick", false, "shortened run (about two minutes)")
	out := flag.String("out", "", "write the Markdown report to this file (e.g. BENCHMARKS.md)")
	sections := flag.String("sections", "", "comma-separated sections to run (lookup,router,latency,inventory,memory,rpc,sync,failover,outage,durability,cache); default all")
	rounds := flag.Int("rounds", 0, "override the plan's rounds per comparison")
	round := flag.Duration("round", 0, "override the plan's duration of one variant's run")
	save := flag.String("save", "bin/bench/results-PLAN.json", "write the measured results as JSON here (PLAN: full or quick; \"\" = don't)")
	render := flag.String("render", "", "measure nothing: render the report of results saved by --save (with --out)")
	rpcProfile := flag.String("rpc-profile", "", "write a CPU profile of the RPC section's service process to this file")
	syncProfile := flag.String("sync-profile", "", "write a CPU profile of the sync section's last sync process (the backlog's) to this file")
	cpuProfile := flag.String("cpu-profile", "", "write a CPU profile of this process (the clients) over the whole run to this file")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(2)
		}
		defer pprof.StopCPUProfile()
	}
	if *render != "" {
		res, err := bench.LoadResults(*render)
		if err == nil && res.Profile != nil {
			res.Profile.Reread()
		}
		if err == nil && filepath.Base(*out) == "BENCHMARKS.md" && (res.Plan.Name != "full" || len(res.Plan.Sections) > 0) {
			err = fmt.Errorf("%s holds a %s run: BENCHMARKS.md is the report of the full plan", *render, res.Plan.Name)
		}
		if err == nil && *out != "" {
			err = os.WriteFile(*out, []byte(bench.Markdown(res)), 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		fmt.Println(bench.Tables(res))
		line, _ := json.Marshal(bench.Summarize(res))
		fmt.Println(string(line))
		return
	}

	log := slog.New(slog.DiscardHandler)
	node.RouteRedisLogs(log) // go-redis's dial errors during the failover cycles

	plan := bench.FullPlan()
	if *quick {
		plan = bench.QuickPlan()
	}
	if *sections != "" {
		plan.Sections = strings.Split(*sections, ",")
	}
	plan.RPCProfile = *rpcProfile
	plan.SyncProfile = *syncProfile
	if *rounds > 0 {
		plan.Rounds = *rounds
	}
	if *round > 0 {
		plan.Round = *round
	}
	if filepath.Base(*out) == "BENCHMARKS.md" && (*quick || *sections != "" || *rounds > 0 || *round > 0) {
		fmt.Fprintln(os.Stderr, "bench: BENCHMARKS.md is the report of the full plan: write a shortened run elsewhere")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		// Children die with us (Pdeathsig); give deferred cleanups a moment.
		time.Sleep(3 * time.Second)
		os.Exit(130)
	}()

	start := time.Now()
	progress := func(s string) {
		fmt.Fprintf(os.Stderr, "[%5.1fs] %s\n", time.Since(start).Seconds(), s)
	}
	progress(fmt.Sprintf("plan %s: %d goroutines, %d rounds of %v", plan.Name, plan.Conc, plan.Rounds, plan.Round))
	res, err := bench.Run(ctx, plan, log, progress)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		if res != nil {
			fmt.Println(bench.Tables(res))
		}
		os.Exit(1)
	}
	fmt.Println(bench.Tables(res))
	if *save != "" {
		if err := bench.SaveResults(res, strings.ReplaceAll(*save, "PLAN", plan.Name)); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
	}
	if *out != "" {
		if err := os.WriteFile(*out, []byte(bench.Markdown(res)), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		progress("wrote " + *out)
	}
	line, err := json.Marshal(bench.Summarize(res))
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	fmt.Println(string(line))
}
