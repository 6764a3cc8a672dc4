package explore

import (
	"fmt"
	"runtime/metrics"
	"sort"
	"strings"
	"time"
)

// The scheduler's choices: which waiting call runs next and with what
// fate (pick), the phases, and when the actors are quiescent.

// pick picks and releases one call when the actors are quiescent. It
// returns how long to wait before looking again, and whether every actor
// finished.
func (s *Scheduler) pick() (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inflight != nil {
		return maxStall, false
	}
	now := time.Now()
	live := false
	var wait time.Duration
	for _, a := range s.actors {
		if a.done || a.asleep || (a.waiting > 0 && a.waiting == a.parked && (!a.busy || now.Sub(a.retAt) >= grace)) {
			continue // finished, or blocked on parked calls only
		}
		switch {
		case !a.busy:
		case a.waiting > 0 && now.Sub(a.retAt) >= grace:
		case a.waiting > 0:
			wait = max(wait, grace-now.Sub(a.retAt))
		default:
			if now.Sub(a.retAt) < maxStall {
				wait = max(wait, maxStall-now.Sub(a.retAt))
			} else {
				continue // stuck outside a call: do not wait for it
			}
		}
		live = true
	}
	unparked := 0
	for _, c := range s.waiting {
		if !c.parked {
			unparked++
		}
	}
	if !live && unparked == 0 {
		// Background work an actor started (a staged commit) may still
		// be on its way to its first call: a last quiet period.
		if q := now.Sub(s.lastRet()); q < 4*grace {
			return 4*grace - q, false
		}
		s.closed = true
		return 0, true
	}
	if unparked == 0 {
		return maxStall, false
	}
	if q := now.Sub(s.arrived); q < grace {
		wait = max(wait, grace-q)
	}
	if wait > 0 {
		// A busy actor with nothing waiting may still be about to call:
		// give it until maxStall, but wake at every arrival.
		return wait, false
	}
	if busyGoroutines() > 1 && now.Sub(s.lastEvent()) < maxSettle {
		// Some goroutine (an actor's, about to call) has not run yet.
		return grace / 4, false
	}
	sort.SliceStable(s.waiting, func(i, j int) bool {
		if s.waiting[i].a.id != s.waiting[j].a.id {
			return s.waiting[i].a.id < s.waiting[j].a.id
		}
		return s.waiting[i].desc < s.waiting[j].desc
	})
	var eligible []int
	for i, c := range s.waiting {
		if !c.parked && c.until <= s.steps {
			eligible = append(eligible, i)
		}
	}
	if len(eligible) == 0 { // only held calls wait: release them
		for i, c := range s.waiting {
			if !c.parked {
				eligible = append(eligible, i)
			}
		}
	}
	i := eligible[s.rng.Intn(len(eligible))]
	c := s.waiting[i]
	fate := Deliver
	if !c.step && s.steps-s.idle < s.maxSteps {
		fate = s.drawFate()
	}
	s.steps++
	if c.idle {
		s.idle++
	}
	if (fate == Hold && (c.held || unparked == 1)) || (fate == Park && (c.held || s.phase > 0)) {
		fate = Deliver
	}
	if fate == Park {
		c.held, c.parked = true, true
		c.a.parked++
		s.trace = append(s.trace, fmt.Sprintf("%d %s: %s [park until the next phase]", s.steps, c.a.name, c.desc))
		return 0, false
	}
	if fate == Abandon && (!c.write || c.abandoned) {
		fate = Deliver
	}
	if fate == Abandon {
		s.abandon(c)
		return 0, false
	}
	if fate == Hold {
		c.held, c.until = true, s.steps+3+s.rng.Intn(38)
		s.trace = append(s.trace, fmt.Sprintf("%d %s: %s [hold until pick %d]", s.steps, c.a.name, c.desc, c.until))
		return 0, false
	}
	s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
	if fate == CrashBefore || fate == CrashAfter {
		c.a.crashed = true
	}
	s.inflight = c
	if !c.step && fate != CrashBefore {
		if s.sentTo == nil {
			s.sentTo = map[string]int{}
		}
		s.sentTo[strings.Fields(c.desc)[0]]++
	}
	s.trace = append(s.trace, fmt.Sprintf("%d %s: %s [%s]", s.steps, c.a.name, c.desc, fate))
	c.ready <- fate
	return 0, false
}

// callsTo is how many script calls to node were picked to be sent so
// far (a call's description starts with its node: describe).
func (s *Scheduler) callsTo(node string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sentTo[node]
}

// abandon answers c's caller (s.mu held): c stays waiting, unsent, for 1
// to 20 picks, owned by an actor of its own, on a channel of its own
// (sendLate), and is never held or parked after. The caller is busy from
// here, as after a call that returned, so no pick is made before it is
// back at a call (or grace passed).
func (s *Scheduler) abandon(c *call) {
	owner := c.a
	owner.returned()
	g := s.newActor(owner.name + "'s abandoned call")
	g.busy, g.waiting = false, 1
	answer := c.ready
	c.a, c.ready, c.abandoned, c.held = g, make(chan Fate, 1), true, true
	c.until = s.steps + 1 + s.rng.Intn(20)
	s.trace = append(s.trace, fmt.Sprintf("%d %s: %s [abandon: the caller goes on; sent after pick %d]", s.steps, owner.name, c.desc, c.until))
	answer <- Abandon
}

// NextPhase ends the first phase: parked calls become eligible again,
// each after 1 to 20 picks of the next phase.
func (s *Scheduler) NextPhase() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.phase++
	for _, c := range s.waiting {
		if c.parked {
			c.parked, c.until = false, s.steps+1+s.rng.Intn(20)
			c.a.parked--
		}
	}
}

// Parked reports whether calls wait parked for the next phase.
func (s *Scheduler) Parked() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.waiting {
		if c.parked {
			return true
		}
	}
	return false
}

// lastEvent is when the last call arrived or returned.
func (s *Scheduler) lastEvent() time.Time {
	t := s.lastRet()
	if s.arrived.After(t) {
		return s.arrived
	}
	return t
}

// busyGoroutines returns how many goroutines of the process are running
// or runnable; the scheduler's own is one of them. At quiescence every
// actor's goroutine is blocked (waiting for its pick, or for a call of
// another goroutine of the actor), so more than one means some goroutine
// may be about to call: the pick waits for it (up to maxSettle, as other
// worlds of the process may keep goroutines busy).
func busyGoroutines() uint64 {
	samples := []metrics.Sample{{Name: "/sched/goroutines/runnable:goroutines"}, {Name: "/sched/goroutines/running:goroutines"}}
	metrics.Read(samples)
	var n uint64
	for _, s := range samples {
		if s.Value.Kind() == metrics.KindUint64 {
			n += s.Value.Uint64()
		}
	}
	return n
}

// lastRet is when the last call of any actor returned.
func (s *Scheduler) lastRet() time.Time {
	var t time.Time
	for _, a := range s.actors {
		if a.retAt.After(t) {
			t = a.retAt
		}
	}
	return t
}
