// Package explore is a seeded schedule explorer for the inventory against
// real redis-server nodes (after FoundationDB's simulation, TigerBeetle's
// VOPR and Jepsen's nemeses).
//
// A schedule is one seed. Its actors (a Reserve attempt, a concurrent
// retry of the same order on a second instance, Confirm, Cancel, a second
// order, topology apply adding and removing a node (or, with
// Options.Shrink, removing it while route c moves off a node that stays
// in the server; with Options.Rejoin, adding it back to the route it
// left: rejoin.go), a node restart from
// its AOF, a node going back to an older copy of its data and accepted
// (loss.go), with Options.Operator an operator settling or retrying the
// parts set aside and a record-loss actor deleting pending part records
// (operator.go, evict.go), with Options.Aside a set-aside actor hiding a
// stock hash so parts are set aside with their records, expiring the
// decided records of orders whose parts wait set aside, then repairing
// it (aside.go), and, once the deadlines passed, the reconciler
// on both instances) run against one World (world.go). Every script call of every
// actor passes through the schedule's Scheduler (sched.go, the
// inventory.Faults of both instances and of the topology apply), which
// picks, from the seed, which waiting call runs next and whether it is
// delivered, delayed, its reply dropped, or its actor crashed after or
// before sending it. After a fault-free heal (heal.go) the checks
// (check.go, check_orders.go, check_redo.go) read the nodes directly
// (nodes.go). A failing seed is replayed with `make explore SEED=<seed>
// N=1` (report.go).
package explore

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"
)

// Config configures Explore.
type Config struct {
	// Seed is the first schedule's seed; schedule i runs seed Seed+i.
	Seed int64
	// Seeds, when not empty, are the schedules' seeds instead, in this
	// order: schedule i runs Seeds[i] (Seed is ignored; an N of 0 or more
	// than len(Seeds) runs them all).
	Seeds []int64
	// N is the most schedules to run.
	N int
	// Budget stops starting new schedules once it has passed (0: none),
	// but not before MinRun were started.
	Budget time.Duration
	// MinRun is how many schedules are started whatever the Budget (at
	// most N; StopAtFirst and ctx still stop the look).
	MinRun int
	// Worlds is how many worlds (four redis-server nodes each) run
	// schedules side by side; a schedule's outcome depends only on its
	// seed, not on its world. default: 2
	Worlds int
	// StopAtFirst stops starting schedules after the first failing one
	// and abandons those still running: their outcomes are not counted
	// or reported (a broken world can keep a schedule waiting for its
	// deadlines long after the failure that answers the question).
	StopAtFirst bool
	// Options configures every schedule.
	Options Options
	// Progress, if set, receives a line per failing schedule, a line per
	// schedule with excused violations (Result.Excused), stale records
	// retired or put back (Result.Retired, Result.Reinstalled) or copies
	// left without a TTL (Result.Frozen), applies refused for stale
	// counters (Result.Stale) or a rejoin refused otherwise
	// (Result.RejoinInvalid), and a summary line every 100
	// schedules.
	Progress io.Writer
}

// Summary is what Explore found.
type Summary struct {
	Ran     int           // schedules run
	Failed  []Result      // in seed order
	Took    time.Duration // wall time of the whole exploration
	Busy    time.Duration // schedules' time summed over worlds
	Waited  time.Duration // of Busy, waiting for deadlines
	Slowest time.Duration // the longest one schedule took (Result.Took)
	// Losses counts the schedules in which a node lost acknowledged
	// writes and was accepted (Result.Lost); Excused sums their excused
	// violations (Result.Excused).
	Losses, Excused int
	// Applies, Retired, Reinstalled and TakenBack sum the schedules'
	// topology applies, the stale order records they retired, the records
	// they put back and the counters they took back (Result.Applies,
	// Result.Retired, Result.Reinstalled, Result.TakenBack).
	Applies, Retired, Reinstalled, TakenBack int
	// Rejoins, RejoinStable, RejoinRefused, RejoinInvalid, Stale,
	// StaleFound and StaleCleared sum the schedules' (Result.Rejoins and
	// the rest).
	Rejoins, RejoinStable, RejoinRefused, RejoinInvalid int
	Stale, StaleFound, StaleCleared                     int
	// Frozen sums Result.Frozen.
	Frozen int
	// Operators, StuckListed, Operated, HealListed and Evicted sum the
	// schedules' (Result's).
	Operators, StuckListed, Operated, HealListed, Evicted int
	// Expired, ExpiredPaid and Verdicts sum the schedules' (Result.Expired,
	// Result.Verdicts).
	Expired, ExpiredPaid int
	Verdicts             map[string]int
	// WorldErr are the errors that stopped a world (its schedules not run).
	WorldErr []error
	// Interrupted counts the schedules that Explore's context cut short
	// (the caller's interrupt or deadline): they ended with an error after
	// the context ended, and count neither as run nor as a world error.
	Interrupted int
	// Last is the last schedule that finished (for a replay of one seed).
	Last Result
}

// Explore runs schedules until N ran, the budget passed, (with
// StopAtFirst) one failed, or ctx ended (the schedules it cut short are
// Summary.Interrupted). An error means no world could be started.
func Explore(ctx context.Context, cfg Config) (Summary, error) {
	if cfg.Worlds <= 0 {
		cfg.Worlds = 2
	}
	if len(cfg.Seeds) > 0 && (cfg.N <= 0 || cfg.N > len(cfg.Seeds)) {
		cfg.N = len(cfg.Seeds)
	}
	if cfg.N <= 0 {
		return Summary{}, fmt.Errorf("explore: N is %d, want at least 1", cfg.N)
	}
	cfg.Worlds = min(cfg.Worlds, cfg.N)
	start := time.Now()
	seeds := make(chan int64)
	runCtx, abandon := context.WithCancel(ctx) // abandon: StopAtFirst found one
	defer abandon()
	var (
		mu        sync.Mutex
		sum       Summary
		stop      bool
		abandoned bool // abandon was called: runs ending now are not counted
	)
	go func() {
		defer close(seeds)
		for i := 0; i < cfg.N; i++ {
			mu.Lock()
			over := cfg.Budget > 0 && time.Since(start) > cfg.Budget && i >= cfg.MinRun
			done := stop || over || ctx.Err() != nil
			mu.Unlock()
			if done {
				return
			}
			seeds <- cfg.seed(i)
		}
	}()
	var wg sync.WaitGroup
	started := 0
	for i := 0; i < cfg.Worlds; i++ {
		w, err := newWorld(cfg.Options.Clock > 0)
		if err != nil {
			if started == 0 && i == cfg.Worlds-1 {
				go func() {
					for range seeds { // drain
					}
				}()
				return sum, err
			}
			sum.WorldErr = append(sum.WorldErr, err)
			continue
		}
		started++
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer w.Close()
			for seed := range seeds {
				mu.Lock()
				skip := abandoned
				mu.Unlock()
				if skip || ctx.Err() != nil {
					continue // drain
				}
				res, err := w.RunSchedule(runCtx, seed, cfg.Options)
				mu.Lock()
				if abandoned {
					mu.Unlock()
					continue
				}
				if err != nil && ctx.Err() != nil {
					// the caller stopped the look while this one ran: its
					// error is the cut, not the world's (a schedule that
					// ended before the cut is counted as it ended)
					sum.Interrupted++ // the feeder stops on ctx too
					mu.Unlock()
					continue
				}
				if err != nil {
					sum.WorldErr = append(sum.WorldErr, fmt.Errorf("seed %d: %w", seed, err))
					stop = true
					mu.Unlock()
					continue
				}
				sum.Ran++
				sum.Busy += res.Took
				sum.Waited += res.Waited
				sum.Slowest = max(sum.Slowest, res.Took)
				sum.Excused += res.Excused
				sum.Applies += res.Applies
				sum.Retired += res.Retired
				sum.Reinstalled += res.Reinstalled
				sum.TakenBack += res.TakenBack
				sum.Frozen += res.Frozen
				sum.Operators += res.Operators
				sum.StuckListed += res.StuckListed
				sum.Operated += res.Operated
				sum.HealListed += res.HealListed
				sum.Evicted += res.Evicted
				sum.Expired += res.Expired
				sum.ExpiredPaid += res.ExpiredPaid
				for k, n := range res.Verdicts {
					if sum.Verdicts == nil {
						sum.Verdicts = map[string]int{}
					}
					sum.Verdicts[k] += n
				}
				if res.StuckListed+res.HealListed > 0 && cfg.Progress != nil {
					fmt.Fprintf(cfg.Progress, "seed %d: the operator listed %d stuck part(s) while the actors ran, %d at the heal, and %d of its settles answered or may have landed\n", seed, res.StuckListed, res.HealListed, res.Operated)
				}
				sum.Rejoins += res.Rejoins
				sum.RejoinStable += res.RejoinStable
				sum.RejoinRefused += res.RejoinRefused
				sum.RejoinInvalid += res.RejoinInvalid
				sum.Stale += res.Stale
				sum.StaleFound += res.StaleFound
				sum.StaleCleared += res.StaleCleared
				if res.Stale > 0 && cfg.Progress != nil {
					fmt.Fprintf(cfg.Progress, "seed %d: %d topology apply(s) refused for stale counters (%d named; %d of them the rejoin's), the heal deleted %d and applied again\n", seed, res.Stale, res.StaleFound, res.RejoinRefused, res.StaleCleared)
				}
				if res.RejoinInvalid > 0 && cfg.Progress != nil {
					fmt.Fprintf(cfg.Progress, "seed %d: its rejoin was refused, not for stale counters (topology.ErrInvalid)\n", seed)
				}
				if len(res.Lost) > 0 {
					sum.Losses++
				}
				if res.Retired+res.Reinstalled+res.TakenBack > 0 && cfg.Progress != nil {
					fmt.Fprintf(cfg.Progress, "seed %d: %d stale order record(s) retired, %d put back, %d counter(s) taken back by its topology applies\n", seed, res.Retired, res.Reinstalled, res.TakenBack)
				}
				if res.Frozen > 0 && cfg.Progress != nil {
					fmt.Fprintf(cfg.Progress, "seed %d: %d order record copies marked moved left without a TTL\n", seed, res.Frozen)
				}
				if res.Excused > 0 && cfg.Progress != nil {
					fmt.Fprintf(cfg.Progress, "seed %d: %d violation(s) excused, about the orders and counters exposed when %v lost acknowledged writes (and %d part record(s) deleted by the record-loss actor, %d order record(s) expired by the set-aside actor)\n", seed, res.Excused, res.Lost, res.Evicted, res.Expired)
				}
				sum.Last = res
				if len(res.Violations) > 0 {
					sum.Failed = append(sum.Failed, res)
					if cfg.StopAtFirst {
						stop, abandoned = true, true
						abandon()
					}
					if cfg.Progress != nil {
						fmt.Fprintf(cfg.Progress, "FAIL seed %d: %s\n  replay: %s\n", seed, res.Violations[0], ReplayCommand(seed, cfg.Options))
					}
				}
				if cfg.Progress != nil && sum.Ran%100 == 0 {
					fmt.Fprintf(cfg.Progress, "%d schedules, %d failing, %s\n", sum.Ran, len(sum.Failed), time.Since(start).Round(time.Second))
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	sum.Took = time.Since(start)
	sortResults(sum.Failed)
	return sum, nil
}

// seed is schedule i's seed: Seeds[i], or Seed+i without Seeds.
func (cfg *Config) seed(i int) int64 {
	if len(cfg.Seeds) > 0 {
		return cfg.Seeds[i]
	}
	return cfg.Seed + int64(i)
}
