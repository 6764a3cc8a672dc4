package chaos

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Fault kinds.
const (
	FaultKill    = "kill -9+restart"
	FaultPause   = "sigstop/sigcont"
	FaultDrain   = "route drain"
	FaultRestart = "service restart"
	// FaultLongPause freezes a node for longer than the attempt lease, in
	// the background: other faults overlap it. Only in runs of 30s or more.
	FaultLongPause = "sigstop>lease"
)

var faultKinds = []string{FaultKill, FaultPause, FaultDrain, FaultRestart, FaultTopology, FaultRollback}

// Fault is one fault the nemesis injected.
type Fault struct {
	At     time.Duration // since the start of the run
	Kind   string        // what was injected: one of the Fault… constants
	Target string        // node, route@node or "service"
	Hold   time.Duration // how long the fault lasted (planned for drains)
	Err    string        // injection or healing error, if any
}

// String is the fault as the run's log prints it: when, what, where,
// for how long, and its error if any.
func (f Fault) String() string {
	s := fmt.Sprintf("+%6.2fs %-16s %-8s for %v", f.At.Seconds(), f.Kind, f.Target, f.Hold.Round(10*time.Millisecond))
	if f.Err != "" {
		s += "  ERROR: " + f.Err
	}
	return s
}

// nemesis injects one fault at a time, with healthy gaps in between;
// drains run in the background and may overlap the next faults.
type nemesis struct {
	c    *cluster
	opts Options
	rep  *Report
	out  io.Writer
	rng  *rand.Rand

	mu      sync.Mutex
	drained map[string]drain // route → its current drain
	gen     int
	frozen  string       // node under a long pause, if any
	lost    []lossWindow // nodes rolled back to an older snapshot and accepted
	wg      sync.WaitGroup
}

type drain struct {
	node string
	gen  int
}

func newNemesis(c *cluster, opts Options, rep *Report, out io.Writer) *nemesis {
	return &nemesis{c: c, opts: opts, rep: rep, out: out, rng: rngFor(opts.Seed, 0x6e656d65), drained: map[string]drain{}}
}

func uniform(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

// sleepCtx sleeps d or until ctx is done; it reports whether it slept in
// full.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (n *nemesis) run(ctx context.Context) {
	defer n.wg.Wait()
	// Every kind once first, in a seeded order, so short runs see them
	// all; then weighted choices.
	first := append([]string(nil), faultKinds...)
	n.rng.Shuffle(len(first), func(i, j int) { first[i], first[j] = first[j], first[i] })
	// With Sentinel groups the same draws kill and pause masters.
	for i := 0; ; i++ {
		gap := uniform(n.rng, n.opts.FaultGapMin, n.opts.FaultGapMax)
		kind := ""
		if i < len(first) {
			kind = first[i]
		} else {
			switch w := n.rng.IntN(13); {
			case w < 3:
				kind = FaultKill
			case w < 6:
				kind = FaultPause
			case w < 8:
				kind = FaultDrain
			case w < 10:
				kind = FaultRestart
			case w < 11:
				kind = FaultTopology
			case w < 12:
				kind = FaultRollback
			default:
				kind = FaultLongPause
				if n.opts.Duration < 30*time.Second {
					kind = FaultPause
				}
			}
		}
		// Draw every choice of the fault now, so the sequence of choices
		// does not depend on timing.
		node := n.c.names[n.rng.IntN(len(n.c.names))]
		routes := []string{"a", "b", "c"}
		route := routes[n.rng.IntN(len(routes))]
		members := n.c.layoutNow()[route]
		drainNode := members[n.rng.IntN(len(members))]
		overlap := n.rng.IntN(2) == 0
		var hold time.Duration
		switch kind {
		case FaultKill:
			hold = uniform(n.rng, 800*time.Millisecond, 2500*time.Millisecond)
		case FaultPause:
			hold = uniform(n.rng, n.opts.ClientTimeout*3/2, n.opts.ClientTimeout*3)
		case FaultDrain:
			hold = uniform(n.rng, 2*time.Second, 6*time.Second)
		case FaultRestart:
			hold = uniform(n.rng, 200*time.Millisecond, time.Second)
		case FaultLongPause:
			hold = uniform(n.rng, attemptLease+time.Second, attemptLease+3*time.Second)
		case FaultRollback:
			hold = uniform(n.rng, time.Second, 3*time.Second)
		}
		if !sleepCtx(ctx, gap) {
			return
		}
		// A node under a long pause is left alone: take the next one.
		n.mu.Lock()
		frozen := n.frozen
		n.mu.Unlock()
		if node == frozen {
			node = n.c.names[(slices.Index(n.c.names, node)+1)%len(n.c.names)]
		}
		if kind == FaultLongPause && frozen != "" {
			kind, hold = FaultPause, min(hold, n.opts.ClientTimeout*3)
		}
		if (kind == FaultTopology || kind == FaultRollback) && n.opts.Sentinel {
			// Standalone nodes only: the spare and AOF copies are theirs.
			kind, hold = FaultPause, n.opts.ClientTimeout*3/2
		}
		if kind == FaultTopology && (frozen != "" || n.routeDrained("a")) {
			// A change needs every node, and route a's drain flags whole.
			kind, hold = FaultPause, n.opts.ClientTimeout*3/2
		}
		switch kind {
		case FaultKill:
			if n.opts.Sentinel {
				n.killMaster(ctx, node, hold)
			} else {
				n.kill(ctx, node, hold)
			}
		case FaultPause:
			if n.opts.Sentinel {
				n.pauseMaster(ctx, FaultPause, node, hold)
			} else {
				n.pause(ctx, node, hold)
			}
		case FaultLongPause:
			if n.opts.Sentinel {
				n.longPauseMaster(ctx, node, hold)
			} else {
				n.longPause(ctx, node, hold)
			}
		case FaultDrain:
			n.drain(ctx, route, drainNode, hold)
		case FaultTopology:
			n.topologyChange(ctx)
		case FaultRollback:
			n.rollback(ctx, node, hold)
		case FaultRestart:
			if overlap {
				n.rollService(hold)
			} else {
				n.restartService(hold)
			}
		}
	}
}

func (n *nemesis) record(f Fault) {
	n.rep.addFault(f)
	fmt.Fprintln(n.out, f.String())
}

func (n *nemesis) at() time.Duration { return time.Since(n.c.t0) }

func (n *nemesis) kill(ctx context.Context, node string, hold time.Duration) {
	p := n.c.procs[node]
	repairs := len(p.AOFRepairs())
	n.outage(ctx, FaultKill, node, hold, p.Kill, p.Restart, "restart: ")
	n.noteRepairs(node, p.AOFRepairs()[repairs:])
}

// noteRepairs reports each repair a restart of node made of an AOF the
// kill or the older copy cut inside a write (redisproc.RepairAOF: the
// operator's redis-check-aof --fix, which the nodes' aof-load-truncated no
// calls for).
func (n *nemesis) noteRepairs(node string, reports []string) {
	for _, r := range reports {
		msg := fmt.Sprintf("%s: its AOF ended inside a write and was repaired before the restart (redis-check-aof --fix): %s", node, repairLine(r))
		n.rep.note("%s", msg)
		fmt.Fprintf(n.out, "  %s %s\n", n.c.since(), msg)
	}
}

// repairLine is the line of redis-check-aof's report that says what the
// repair cut ("This will shrink the AOF … from N bytes, with D bytes, to
// M bytes"), or its last line when it has none.
func repairLine(report string) string {
	lines := strings.Split(strings.TrimSpace(report), "\n")
	for _, l := range lines {
		if strings.HasPrefix(l, "This will shrink") {
			return strings.TrimSpace(l)
		}
	}
	return lines[len(lines)-1]
}

func (n *nemesis) pause(ctx context.Context, node string, hold time.Duration) {
	p := n.c.procs[node]
	n.outage(ctx, FaultPause, node, hold, p.Pause, p.Resume, "resume: ")
}

// outage breaks node with begin, holds it for hold, heals it with end and
// records the fault.
func (n *nemesis) outage(ctx context.Context, kind, node string, hold time.Duration, begin, end func() error, endWhat string) {
	f := Fault{At: n.at(), Kind: kind, Target: node}
	start := time.Now()
	if err := begin(); err != nil {
		f.Err = err.Error()
	}
	sleepCtx(ctx, hold)
	if err := end(); err != nil {
		f.Err = endWhat + err.Error()
	}
	f.Hold = time.Since(start)
	n.record(f)
}

// longPause freezes node for hold in the background.
func (n *nemesis) longPause(ctx context.Context, node string, hold time.Duration) {
	n.mu.Lock()
	n.frozen = node
	n.mu.Unlock()
	at := n.at()
	fmt.Fprintf(n.out, "+%6.2fs %-16s %-8s begins, for %v\n", at.Seconds(), FaultLongPause, node, hold.Round(10*time.Millisecond))
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		f := Fault{At: at, Kind: FaultLongPause, Target: node}
		p := n.c.procs[node]
		start := time.Now()
		if err := p.Pause(); err != nil {
			f.Err = err.Error()
		}
		sleepCtx(ctx, hold)
		if err := p.Resume(); err != nil {
			f.Err = "resume: " + err.Error()
		}
		f.Hold = time.Since(start)
		n.mu.Lock()
		n.frozen = ""
		n.mu.Unlock()
		n.record(f)
	}()
}

// drain drains route on node for hold, in the background. A route has at
// most one drained node at a time: a new drain of a route moves it.
func (n *nemesis) drain(ctx context.Context, route, node string, hold time.Duration) {
	f := Fault{At: n.at(), Kind: FaultDrain, Target: route + "@" + node, Hold: hold}
	n.mu.Lock()
	old, busy := n.drained[route]
	n.gen++
	d := drain{node: node, gen: n.gen}
	n.drained[route] = d
	n.mu.Unlock()
	if busy && old.node != node {
		if err := n.c.setRoute(old.node, route, true, 5); err != nil {
			f.Err = fmt.Sprintf("undrain %s@%s: %v", route, old.node, err)
		}
	}
	if err := n.c.setRoute(node, route, false, 5); err != nil {
		f.Err = err.Error()
	}
	n.record(f)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		sleepCtx(ctx, hold)
		n.mu.Lock()
		cur, ok := n.drained[route]
		mine := ok && cur.gen == d.gen
		if mine {
			delete(n.drained, route)
		}
		n.mu.Unlock()
		if mine {
			if err := n.c.setRoute(node, route, true, 10); err != nil {
				n.rep.note("undrain %s@%s failed: %v", route, node, err)
				fmt.Fprintf(n.out, "%s undrain %s@%s failed: %v\n", n.c.since(), route, node, err)
			}
		}
	}()
}

// restartService shuts the service down gracefully, keeps it down for
// down, and starts it again on a new port. Drains are lost with it, as
// they would be with a real process.
func (n *nemesis) restartService(down time.Duration) {
	f := Fault{At: n.at(), Kind: FaultRestart, Target: "service"}
	start := time.Now()
	if err := n.c.stopService(); err != nil {
		f.Err = "shutdown: " + err.Error()
	}
	n.mu.Lock()
	n.drained = map[string]drain{}
	n.mu.Unlock()
	time.Sleep(down)
	var err error
	for range 5 {
		if err = n.c.startService(); err == nil {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil {
		f.Err = "start: " + err.Error()
	}
	f.Hold = time.Since(start)
	n.record(f)
}

// rollService starts a new service instance, moves the clients to it,
// lets both run for overlap (two routers and two reconcilers over the
// same nodes; the old one finishes its calls) and shuts the old one down.
func (n *nemesis) rollService(overlap time.Duration) {
	f := Fault{At: n.at(), Kind: FaultRestart, Target: "rolling"}
	start := time.Now()
	old, err := n.c.swapService()
	if err != nil {
		f.Err = "start: " + err.Error()
	} else {
		n.mu.Lock()
		n.drained = map[string]drain{}
		n.mu.Unlock()
		time.Sleep(overlap)
		if err := n.c.shutdown(old); err != nil {
			f.Err = "shutdown: " + err.Error()
		}
	}
	f.Hold = time.Since(start)
	n.record(f)
}

// faultCounts returns the faults per kind, kinds sorted.
func faultCounts(faults []Fault) ([]string, map[string]int) {
	counts := map[string]int{}
	for _, f := range faults {
		counts[f.Kind]++
	}
	kinds := make([]string, 0, len(counts))
	for k := range counts {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	return kinds, counts
}

// routeDrained reports whether a background drain of route holds now.
func (n *nemesis) routeDrained(route string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, ok := n.drained[route]
	return ok
}
