// Command explore runs the inventory's schedule explorer (package
// internal/explore) against real redis-server nodes it starts itself.
//
//	go run ./internal/cmd/explore -seed 1 -n 1000 [-budget 10m] [-worlds 2] [-mutations stage-takeover] [-v]
//
// It prints every failing seed with its violations and a one-line replay
// command, and exits 1 when any schedule failed.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/internal/explore"
)

func main() {
	seed := flag.Int64("seed", 0, "first seed (0: time-based); schedule i runs seed+i")
	n := flag.Int("n", 1000, "schedules to run")
	budget := flag.Duration("budget", 0, "stop starting schedules after this long (0: no limit)")
	worlds := flag.Int("worlds", 2, "worlds (four redis-server nodes each) running schedules side by side")
	mutations := flag.String("mutations", "", "comma-separated mutations to re-introduce (stage-takeover, apply-leaves-staging, xfer-negative-zero, limit-withdraw, fence-skip, inline-unwritten, install-inline, retire-skip, reinstall-skip, limit-unfenced, stock-left-only, xfer-no-source, stuck-lost-unfenced, stuck-gone-cancel)")
	topo := flag.Float64("topology", 0, "chance of the topology actor per schedule (0: the default 0.2, negative: never)")
	restart := flag.Float64("restart", 0, "chance of the node-restart actor per schedule (0: the default 0.15, negative: never)")
	limit := flag.Float64("limit", 0, "chance of the limit order o6 and its retry per schedule (0: the default 0.4, negative: never)")
	inline := flag.Float64("inline", 0, "chance of the inline-part order and its retry, Confirm or Cancel per schedule (0: the default 0.5, negative: never)")
	loss := flag.Float64("loss", 0, "chance of the data-loss actor per schedule (a node goes back to an older copy of its data and is accepted; 0: the default 0.15, negative: never)")
	moved := flag.Float64("moved", 0, "chance, with the topology actor, of its moved order: reserved at T0, its record moved to n4, confirmed or cancelled at T1, moved back (0: the default 0.5, negative: never)")
	twin := flag.Float64("twin", 0, "chance, with the topology or data-loss actor, of a second operator who reruns topology apply while the nodes are not all stable (0 or negative: never)")
	relimit := flag.Float64("relimit", 0, "chance, with the limit order, of an operator setting its SKU's per-user limit below what it wants mid-schedule (0 or negative: never)")
	shrink := flag.Float64("shrink", 0, "chance, with the topology actor, that its second apply moves route c off n3 (which stays for route d) and n4 in one apply rather than removing n4 (0 or negative: never)")
	rejoin := flag.Float64("rejoin", 0, "chance, with the topology actor, that once its second apply returned it applies T1 again (n4 rejoins route c; with -shrink n3 rejoins c and n4 the server) and reserves one more order of route c (0 or negative: never)")
	loss2 := flag.Float64("loss2", 0, "chance, with the data-loss actor, of a second one: another node goes back too, or the same node again once the first is accepted (0 or negative: never)")
	abandon := flag.Float64("abandon", 0, "chance per call that its caller stops waiting for it (its outcome unknown) and goes on while it is still on its way, sent 1 to 20 picks later (0 or negative: never)")
	clock := flag.Float64("clock", 0, "chance of the clock actor per schedule: one node's wall clock steps by up to -clockstep either way, once or twice, and is set right before the heal (needs gcc; 0 or negative: never)")
	oom := flag.Float64("oom", 0, "chance of the memory actor per schedule: one node runs out of memory while 1 to 6 calls are sent to it, refusing every script that may take memory (0 or negative: never)")
	operator := flag.Float64("operator", 0, "chance of the operator actor per schedule: in each phase it lists the parts set aside and settles or retries each as README's stuck-parts section says (parts settle with the system of record's values for a part whose record is gone), its calls scheduled and faulted like any actor's (0 or negative: never)")
	aside := flag.Float64("aside", 0, "chance, with the operator actor, of the set-aside actor: it hides a stock hash in phase 1 so its parts are set aside with their records, expires the decided records of orders whose parts wait set aside, then repairs the hash and retries them (0 or negative: never)")
	clockStep := flag.Duration("clockstep", 0, "bound of one step of the clock actor (0: the default 300ms)")
	profile := flag.String("profile", "", `fault chances: "" (default), "stall" (many calls parked past the deadlines), "calm" (reorderings and delays only) or "crash" (calm, and half the actors die at one of their first crash points)`)
	verbose := flag.Bool("v", false, "print each failing schedule's trace and what its actors were told")
	flag.Parse()
	redis.SetLogger(quiet{})
	if *seed == 0 {
		*seed = time.Now().UnixNano() % 1_000_000_000
	}
	muts, err := explore.ParseMutations(*mutations)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	opts := explore.Options{Mutations: muts, Topology: *topo, Restart: *restart, Limit: *limit, Inline: *inline, Loss: *loss, Moved: *moved, Twin: *twin, Loss2: *loss2, Relimit: *relimit, Shrink: *shrink, Rejoin: *rejoin, Abandon: *abandon, Clock: *clock, ClockStep: *clockStep, OOM: *oom, Operator: *operator, Aside: *aside, Profile: *profile}
	fmt.Printf("explore: seeds %d..%d, %d world(s)\n", *seed, *seed+int64(*n)-1, *worlds)
	sum, err := explore.Explore(ctx, explore.Config{Seed: *seed, N: *n, Budget: *budget, Worlds: *worlds,
		Options: opts, Progress: os.Stdout})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	for _, r := range sum.Failed {
		explore.WriteResult(os.Stdout, r, opts, *verbose || *n == 1)
	}
	if *n == 1 && len(sum.Failed) == 0 && sum.Ran == 1 {
		explore.WriteResult(os.Stdout, sum.Last, opts, true) // a replay: show the schedule
	}
	explore.WriteSummary(os.Stdout, sum)
	if len(sum.Failed) > 0 || len(sum.WorldErr) > 0 {
		os.Exit(1)
	}
	if sum.Interrupted > 0 {
		os.Exit(130) // as a shell reports a run stopped by Ctrl-C
	}
}

// quiet drops go-redis's own log lines (dial failures while a node
// restarts are expected).
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
