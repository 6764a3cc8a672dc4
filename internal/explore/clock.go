package explore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/shardis/shardis/internal/redisproc"
)

// The clock actor (Options.Clock): one node's wall clock steps, once or
// twice, while the other actors run, as an NTP step or a VM resumed late
// moves it; every clock is set right again before the heal, another step.
//
// SECURITY.md ("Clock skew") promises that skew between the nodes changes
// only when expired stock comes back, never whether it is sold: every
// check holds under it but the two that compare times read on different
// clocks, which allow the skew the schedule had (clockSlack): a part
// cancelled that much before its order's deadline by the home's clock
// (acked-gone: a home clock jumping forward expires reservations early,
// as SECURITY.md says), or taken that much before a refusal began by the
// caller's clock (refused-held). The heal sets every clock right first
// and then runs the reconciler until nothing is pending, so the checks
// of what is left pending past its deadline do not depend on the skew.
//
// A world made for it (newWorld with skew) runs its nodes with the clock
// skew library (internal/redisproc, skew.go), each reading its skew from
// a file of its own; a world's nodes otherwise read the machine's clock.

// defaultClockStep is Options.ClockStep's default, the bound of one step
// of the clock actor (either way): above the schedule's attempt lease and
// order TTL (world.go), so a step can jump a lease or a deadline, and
// below partGrace (inventory, 1 s), the skew between nodes within which
// an expired part waits for its order's deadline by every clock.
const defaultClockStep = 300 * time.Millisecond

// worldClock is a world's clock skew files and the skew each node was
// last set to.
type worldClock struct {
	dir   string            // holds the library and the files ("" without skew)
	files map[string]string // node → its skew file
	mu    sync.Mutex
	ms    map[string]int64 // node → its skew (ms), as last set
}

// skewEnv builds the clock skew library and returns each node's
// environment (redisproc.Options.Env).
func (w *World) skewEnv() (func(name string) []string, error) {
	dir, err := os.MkdirTemp("", "shardis-explore-clock-")
	if err != nil {
		return nil, fmt.Errorf("explore: the clock actor: %w", err)
	}
	w.clock.dir = dir
	lib, err := redisproc.BuildSkewClock(dir)
	if err != nil {
		return nil, fmt.Errorf("explore: the clock actor needs the clock skew library: %w", err)
	}
	w.clock.files, w.clock.ms = map[string]string{}, map[string]int64{}
	return func(name string) []string {
		f := filepath.Join(dir, name+".skew")
		w.clock.files[name] = f
		return redisproc.SkewEnv(lib, f)
	}, nil
}

// setClock moves node name's wall clock to ms off the machine's.
func (w *World) setClock(name string, ms int64) error {
	w.clock.mu.Lock()
	defer w.clock.mu.Unlock()
	f, ok := w.clock.files[name]
	if !ok {
		return fmt.Errorf("explore: node %s has no clock skew file: the world was made without skew (Options.Clock)", name)
	}
	if err := redisproc.SetSkew(f, ms); err != nil {
		return err
	}
	w.clock.ms[name] = ms
	return nil
}

// resetClocks sets every skewed node's clock right.
func (w *World) resetClocks() error {
	w.clock.mu.Lock()
	var names []string
	for name, ms := range w.clock.ms {
		if ms != 0 {
			names = append(names, name)
		}
	}
	w.clock.mu.Unlock()
	for _, name := range names {
		if err := w.setClock(name, 0); err != nil {
			return err
		}
	}
	return nil
}

// clockPlan is the clock actor's draw: the node whose clock steps, and
// each step's size (ms, either way) after its waits (other actors' picks).
type clockPlan struct {
	node  string
	steps []int64
	waits []int
}

// drawClock draws the clock actor's plan from the scheduler's generator:
// steps of up to bound (at least 1 ms) either way.
func drawClock(s *Scheduler, bound time.Duration) clockPlan {
	p := clockPlan{node: nodesT0[s.Intn(len(nodesT0))]}
	for range 1 + s.Intn(2) {
		ms := 1 + int64(s.Intn(max(1, int(bound.Milliseconds()))))
		if s.Chance(0.5) {
			ms = -ms
		}
		p.steps, p.waits = append(p.steps, ms), append(p.waits, s.Intn(12))
	}
	return p
}

// clockActor steps plan.node's clock by each of plan.steps, the skew
// adding up, after plan.waits picks of other actors' calls each; the
// schedule's slack (clockSlack) grows to what the skew reached.
func (w *World) clockActor(o *observed, s *Scheduler, who string, plan clockPlan) func(ctx context.Context) {
	return func(ctx context.Context) {
		var skew int64
		for i, step := range plan.steps {
			s.Pass(ctx, who, plan.waits[i])
			skew += step
			what := fmt.Sprintf("clock of %s %+dms (now %+dms)", plan.node, step, skew)
			err := s.Step(ctx, what, func() error { return w.setClock(plan.node, skew) })
			o.note(who, what, err)
			if err != nil {
				return
			}
			o.skewed(skew)
		}
	}
}

// skewed records that a node's clock was ms off: the checks that compare
// times read on two clocks allow twice the largest such skew.
func (o *observed) skewed(ms int64) {
	d := 2 * time.Duration(max(ms, -ms)) * time.Millisecond
	o.mu.Lock()
	defer o.mu.Unlock()
	o.clockSlack = max(o.clockSlack, d)
}
