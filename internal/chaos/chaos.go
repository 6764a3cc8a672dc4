// Package chaos is `make chaos`: a bounded, seeded, randomized fault
// injection run against real redis-server nodes (AOF, appendfsync always)
// and the real shardis service, run in-process and driven over HTTP with
// the Connect clients.
//
// Many clients reserve, confirm and cancel orders (random order ids,
// retries and concurrent duplicates of the same order id, cancels before
// reserves, shared user ids against per-user limits) while a nemesis kills
// nodes with SIGKILL and restarts them, freezes them with SIGSTOP for
// longer than the client timeout, drains routes on nodes and restarts the
// service itself. At the end everything is healed, the reconciler is given
// one reservation TTL plus the attempt lease to settle what is left, and
// the nodes are read directly to check, per SKU and per order, that stock
// was neither created nor lost, that every order the clients saw confirmed
// is confirmed in full, that every order they saw refused or cancelled
// holds nothing, that per-user limits held and that redo-log offsets are
// gap-free.
//
// Every random choice (client operations, fault kinds, targets and
// durations) comes from the seed, so a failing seed can be replayed;
// timings still vary between runs.
package chaos

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/shardis/shardis/config"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

// attemptLease is inventory.Options.AttemptLease as the service uses it
// (the default): how long an abandoned Reserve attempt holds its order.
const attemptLease = 10 * time.Second

// Options configures [Run]. Zero values mean the defaults.
type Options struct {
	// Seed drives every random choice. Runs with the same seed and options
	// make the same choices (timings vary).
	Seed int64
	// Duration is how long the clients run and the nemesis injects faults;
	// healing and checking come on top (typically 5-20s).
	// default: 60s
	Duration time.Duration
	// Clients is the number of concurrent order clients.
	// default: 8
	Clients int
	// Nodes is the number of redis-server nodes (3..8), plus one spare
	// that the topology nemesis adds to route a and removes again.
	// default: 3
	Nodes int
	// Out receives the header, the fault timeline as it happens and
	// progress lines. nil discards them. The report is not printed: call
	// Report.Print.
	Out io.Writer
	// ServiceLog receives the service's own logs (text, level info). nil
	// discards them.
	ServiceLog io.Writer
	// ReservationTTL is inventory.reservation_ttl.
	// default: 3s
	ReservationTTL time.Duration
	// ReconcileInterval is inventory.reconcile_interval.
	// default: 300ms
	ReconcileInterval time.Duration
	// ClientTimeout bounds every RPC of the clients. Pauses last longer.
	// default: 1s
	ClientTimeout time.Duration
	// FaultGapMin and FaultGapMax bound the healthy time between two
	// faults.
	// default: 1s and 3s
	FaultGapMin, FaultGapMax time.Duration
	// Think is the longest pause of a client between two orders.
	// default: 3ms
	Think time.Duration
	// Dir, when set, keeps the nodes' data (AOF files, logs) in Dir/n1,
	// Dir/n2 …; otherwise temporary directories are removed at the end.
	Dir string
	// HealTimeout bounds the wait for every pending part to be settled
	// after healing.
	// default: ReservationTTL + attempt lease (10s) + 20s
	HealTimeout time.Duration
	// Sentinel runs every node as a Sentinel master group (a master, a
	// replica, three sentinels; sentinel.go), and the nemesis kills and
	// pauses masters instead of standalone nodes.
	// default: false (standalone nodes)
	Sentinel bool
	// Durability is inventory.durability: "none" or "replica".
	// default: replica with Sentinel, none without
	Durability string
	// Sync runs PostgreSQL and a `shardis sync` instance beside the run and
	// holds the database against the nodes after healing (sync.go).
	// default: false
	Sync bool
}

func (o *Options) defaults() error {
	if o.Duration <= 0 {
		o.Duration = 60 * time.Second
	}
	if o.Clients <= 0 {
		o.Clients = 8
	}
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	if o.Nodes < 3 || o.Nodes > 8 {
		return fmt.Errorf("chaos: Nodes is %d, want 3..8 (a spare node is added)", o.Nodes)
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.ReservationTTL <= 0 {
		o.ReservationTTL = 3 * time.Second
	}
	if o.ReservationTTL < time.Second || o.ReservationTTL%time.Second != 0 {
		return fmt.Errorf("chaos: ReservationTTL is %v, want whole seconds ≥ 1s", o.ReservationTTL)
	}
	if o.ReconcileInterval <= 0 {
		o.ReconcileInterval = 300 * time.Millisecond
	}
	if o.ClientTimeout <= 0 {
		o.ClientTimeout = time.Second
	}
	if o.FaultGapMin <= 0 {
		o.FaultGapMin = time.Second
	}
	if o.FaultGapMax < o.FaultGapMin {
		o.FaultGapMax = max(3*time.Second, o.FaultGapMin)
	}
	if o.Think < 0 {
		o.Think = 0
	} else if o.Think == 0 {
		o.Think = 3 * time.Millisecond
	}
	if o.HealTimeout <= 0 {
		o.HealTimeout = o.ReservationTTL + attemptLease + 20*time.Second
	}
	if o.Durability == "" {
		o.Durability = o.defaultDurability()
	}
	if o.Durability != config.DurabilityNone && o.Durability != config.DurabilityReplica {
		return fmt.Errorf("chaos: Durability is %q, want none or replica", o.Durability)
	}
	return nil
}

func (o Options) defaultDurability() string {
	if o.Sentinel {
		return config.DurabilityReplica
	}
	return config.DurabilityNone
}

// topology describes the nodes of a run for its header.
func (o Options) topology() string {
	if o.Sentinel {
		return fmt.Sprintf("%d Sentinel groups (master+replica+3 sentinels), durability %s", o.Nodes, o.Durability)
	}
	return fmt.Sprintf("%d nodes, durability %s", o.Nodes, o.Durability)
}

// ReplayCommand returns the command line that replays a run with these
// options (after defaults are applied, as Run prints it).
func (o Options) ReplayCommand() string {
	cmd := fmt.Sprintf("go run ./internal/cmd/chaos --seed %d --duration %v --clients %d", o.Seed, o.Duration, o.Clients)
	if o.Nodes != 3 {
		cmd += fmt.Sprintf(" --nodes %d", o.Nodes)
	}
	if o.ReservationTTL != 3*time.Second {
		cmd += fmt.Sprintf(" --ttl %v", o.ReservationTTL)
	}
	if o.ClientTimeout != time.Second {
		cmd += fmt.Sprintf(" --client-timeout %v", o.ClientTimeout)
	}
	if o.FaultGapMin != time.Second || o.FaultGapMax != 3*time.Second {
		cmd += fmt.Sprintf(" --gap-min %v --gap-max %v", o.FaultGapMin, o.FaultGapMax)
	}
	if o.Sentinel {
		cmd += " --sentinel"
	}
	if o.Durability != "" && o.Durability != o.defaultDurability() {
		cmd += " --durability " + o.Durability
	}
	if o.Sync {
		cmd += " --sync"
	}
	return cmd
}

// rngFor returns the generator of one stream of choices of a run.
func rngFor(seed int64, stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(seed), stream))
}

// Run performs one chaos run: it starts the nodes and the service, loads
// stock, runs the clients and the nemesis for opts.Duration, heals
// everything, waits for the reconciler, checks every invariant and stops
// every process it started. It returns the report; an error means the run
// could not be carried out (redis-server missing, a node that does not
// come back), not that an invariant was violated: see Report.Violations.
// Cancelling ctx ends the load phase early; healing and checks still run.
func Run(ctx context.Context, opts Options) (rep *Report, err error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	start := time.Now()
	rep = newReport(opts)
	out := &syncWriter{w: opts.Out}
	fmt.Fprintf(out, "chaos: seed %d, duration %v, %d clients, %s, ttl %v, client timeout %v, fault gaps %v-%v\n  replay: %s\n",
		opts.Seed, opts.Duration, opts.Clients, opts.topology(), opts.ReservationTTL, opts.ClientTimeout,
		opts.FaultGapMin, opts.FaultGapMax, opts.ReplayCommand())

	var svcLog *slog.Logger
	if opts.ServiceLog != nil {
		svcLog = slog.New(slog.NewTextHandler(&syncWriter{w: opts.ServiceLog}, nil))
	} else {
		svcLog = slog.New(slog.DiscardHandler)
	}
	c, err := startCluster(opts, svcLog, out)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := c.close(); cerr != nil && err == nil {
			err = cerr
		}
		if rep == nil {
			return // an early return's error is the answer; it has no report
		}
		c.mu.Lock()
		rep.Paths = c.paths
		c.mu.Unlock()
	}()
	c.t0 = start
	var rs *recordSync
	if opts.Sync {
		if rs, err = startSync(c, svcLog, out); err != nil {
			return nil, err
		}
		c.sync = rs
		defer func() {
			if cerr := rs.close(); cerr != nil && err == nil {
				err = cerr
			}
		}()
	}
	skus, err := c.loadStock(opts)
	if err != nil {
		return nil, err
	}
	rep.SKUs = skus
	incarnations, err := c.incarnations()
	if err != nil {
		return nil, err
	}

	// Load phase: clients and nemesis.
	loadCtx, stopLoad := context.WithTimeout(ctx, opts.Duration)
	defer stopLoad()
	w := newWorkload(c, opts, skus)
	n := newNemesis(c, opts, rep, out)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); w.run(loadCtx) }()
	go func() { defer wg.Done(); n.run(loadCtx) }()
	progress := time.NewTicker(10 * time.Second)
	func() {
		defer progress.Stop()
		for {
			select {
			case <-loadCtx.Done():
				return
			case <-progress.C:
				fmt.Fprintf(out, "%s progress: %d orders, %d ops\n", c.since(), w.orderCount(), w.opCount())
			}
		}
	}()
	wg.Wait()
	loadEnd := time.Now()
	rep.LoadTook = loadEnd.Sub(start)
	w.merge(rep)
	fmt.Fprintf(out, "%s load over: %d orders, %d ops; healing\n", c.since(), len(w.orders), rep.totalOps())

	// Heal everything, then give the reconciler one TTL, the attempt lease
	// if needed, and a few passes.
	if err := c.healAll(); err != nil {
		return rep.unchecked(err)
	}
	time.Sleep(opts.ReservationTTL + 2*opts.ReconcileInterval)
	left, err := c.waitNoPending(opts.HealTimeout)
	if err != nil {
		return rep.unchecked(err)
	}
	rep.HealTook = time.Since(loadEnd)
	fmt.Fprintf(out, "%s healed in %v, %d parts pending\n", c.since(), rep.HealTook.Round(100*time.Millisecond), left)
	if rs != nil {
		rs.quiesce() // no acknowledgement from here on: the trims stop soon
	}
	svcRedo := readRedoToCompare(rep, c.redoViaService, redoReadTries, redoReadWait)
	if err := c.stopService(); err != nil {
		rep.violate("service", "shutdown after healing: %v", err)
	}

	// Check from the nodes themselves.
	st, err := c.readState()
	if err != nil {
		return rep.unchecked(err)
	}
	st.svcRedo = svcRedo
	c.mu.Lock()
	homes, seen := c.homes, c.seen
	c.mu.Unlock()
	n.mu.Lock()
	lost := n.lost
	n.mu.Unlock()
	rep.mu.Lock()
	rep.excuse = exposed(lost, outages(c.t0, rep.Timeline), w.orders, st, seen, decideWindowOf(opts, c.cfg.Health))
	rep.mu.Unlock()
	check(rep, st, w.orders, skus, homes)
	if rs != nil {
		if err := rs.check(rep, st, w.orders); err != nil {
			return rep.unchecked(err)
		}
	}
	for name, inc := range incarnations {
		if now := st.nodes[name].incarnation; now != inc {
			rep.violate("data-loss", "node %s: stamp incarnation %q at start, %q at the end: the node lost its data (AOF)", name, inc, now)
		}
	}
	rep.Elapsed = time.Since(start)
	return rep, nil
}

// A ReadRedoLog comparison the service could not answer is read again up
// to redoReadTries times in all, redoReadWait apart (each read retries
// every call for ~10 s itself: cluster.redoViaService).
const (
	redoReadTries = 4
	redoReadWait  = 5 * time.Second
)

// readRedoToCompare reads every redo log through the service (read) after
// healing, for checkRedoRead. A read the service could not answer
// (Unavailable, DeadlineExceeded: a node flapping on an overloaded
// machine, not a wrong answer) is tried again, up to tries reads wait
// apart, the faults being over. One that still fails, or that fails
// otherwise, is a redo-read violation: the comparison did not run, and
// the run must not pass as if it had. It returns what was read, nil then.
func readRedoToCompare(rep *Report, read func() (map[string]map[string][]*v1.RedoEntry, error), tries int, wait time.Duration) map[string]map[string][]*v1.RedoEntry {
	var err error
	for try := 1; ; try++ {
		var got map[string]map[string][]*v1.RedoEntry
		if got, err = read(); err == nil {
			return got
		}
		code := connect.CodeOf(err)
		if try >= tries || (code != connect.CodeUnavailable && code != connect.CodeDeadlineExceeded) {
			break
		}
		time.Sleep(wait)
	}
	rep.violate("redo-read", "reading the redo log through the AdminService after healing (%d reads): %v; ReadRedoLog not compared with the nodes", tries, err)
	return nil
}

// syncWriter serializes writes of concurrent goroutines.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
