package explore

import (
	"context"
	"fmt"
	"time"
)

// The memory actor (Options.OOM): one node runs out of memory while the
// other actors send it 1 to 6 calls, then has room again, as a node that
// filled up until an operator raised its limit or orders were settled.
//
// While it is full (maxmemory 1 byte, noeviction: the world's policy)
// Redis refuses, whole and before any of it runs, every script that may
// take memory (inventory/oom.go: memGrow: a reserve, a stage, a local
// reserve, a begin, a refusal's fence) and runs those that only read or
// only decide and settle what the node holds (memRead, memRelease). A
// refusal is an answer, not a lost reply: the call changed nothing. So
// an attempt meets it at any step of its protocol (its stage refused
// while its takes landed elsewhere, one take refused of several, a
// retry's begin refused), and every check must hold as without it. In
// three schedules of ten the node stays full through the second phase,
// where the reconcilers expire and settle on it what the first left. The
// node's limit is lifted again at the actor's end (or, for those, only
// before the heal), and by Reset.

// oomPlan is the memory actor's draw: the node that fills, the picks of
// other actors' calls before it does, and how many calls to the node are
// sent while it is full, or that it stays full until the heal.
type oomPlan struct {
	node         string
	before, held int
	untilHeal    bool
}

// oomWaitMax bounds the memory actor's wait for the calls it stays full
// for, in picks of its own: the other actors may all wait for the next
// phase, or be done.
const oomWaitMax = 200

// drawOOM draws the memory actor's plan from the scheduler's generator.
func drawOOM(s *Scheduler) oomPlan {
	return oomPlan{node: nodesT0[s.Intn(len(nodesT0))], before: s.Intn(12), held: 1 + s.Intn(6), untilHeal: s.Chance(0.3)}
}

// oomActor fills plan.node after plan.before picks, and lifts its limit
// once plan.held calls were sent to it (or after oomWaitMax picks of its
// own, each a ms of real time).
func (w *World) oomActor(o *observed, s *Scheduler, who string, plan oomPlan) func(ctx context.Context) {
	return func(ctx context.Context) {
		s.Pass(ctx, who, plan.before)
		what := "node " + plan.node + " out of memory"
		err := s.Step(ctx, what, func() error { return w.setMaxmemory(ctx, plan.node, "1") })
		o.note(who, what, err)
		if plan.untilHeal {
			return // lifted before the heal (RunSchedule)
		}
		until := s.callsTo(plan.node) + plan.held
		for i := 0; i < oomWaitMax && s.callsTo(plan.node) < until && ctx.Err() == nil; i++ {
			s.Idle(ctx, who+" waits", time.Millisecond)
		}
		what = "node " + plan.node + " has room again"
		err = s.Step(ctx, what, func() error { return w.setMaxmemory(ctx, plan.node, "0") })
		o.note(who, what, err)
	}
}

// setMaxmemory sets node name's maxmemory ("0": no limit).
func (w *World) setMaxmemory(ctx context.Context, name, limit string) error {
	if err := w.direct[name].ConfigSet(ctx, "maxmemory", limit).Err(); err != nil {
		return fmt.Errorf("explore: setting %s's maxmemory to %s: %w", name, limit, err)
	}
	return nil
}

// liftMemoryLimits gives every node its memory back (no maxmemory).
func (w *World) liftMemoryLimits(ctx context.Context) error {
	for _, name := range allNodes {
		if err := w.setMaxmemory(ctx, name, "0"); err != nil {
			return err
		}
	}
	return nil
}
