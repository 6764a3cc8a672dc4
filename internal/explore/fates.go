package explore

import (
	"context"
	"errors"
	"fmt"

	"github.com/shardis/shardis/inventory"
)

// The fault chances of a schedule (its profile) and the fates drawn from
// them: per call (drawFate), and per crash point an actor passes (Crash,
// the actor's crash-point fate).

// Fate is what the scheduler does to one script call.
type Fate int

// The fates of a call.
const (
	// Deliver sends the call and returns its reply.
	Deliver Fate = iota
	// Delay sleeps (real time: leases and deadlines run on) before
	// sending; the other actors stay blocked.
	Delay
	// DropReply sends the call, then reports a lost reply: the caller
	// cannot know whether it ran.
	DropReply
	// CrashAfter sends the call, then the actor dies: it gets an error
	// wrapping inventory.ErrCrashed and none of its later calls is sent.
	CrashAfter
	// CrashBefore kills the actor before the call is sent.
	CrashBefore
	// Hold keeps the call waiting, unsent, for the next few picks (3 to
	// 40), or until nothing else waits: it is reordered behind other
	// actors' calls, as a message stuck in the network. A call is held
	// once at most; when released it draws its fate again.
	Hold
	// Park keeps the call unsent past the first phase: through the wait
	// for the parts' deadlines, into the reconcilers' phase, where it is
	// released after a few picks (a message stuck in the network for
	// longer than a lease and a deadline). First phase only.
	Park
	// Abandon answers the caller at once that the call's outcome is
	// unknown, as a caller whose deadline ran out while its call's group
	// was under way is answered (inventory/group.go, awaitGroup), and
	// keeps the call, unsent, for 1 to 20 more picks: its caller goes on
	// and its own later calls may overtake it. Only a script that may
	// write is abandoned (a late read changes nothing), once at most; when
	// picked again it draws its fate again (never held or parked). Drawn
	// only with Options.Abandon above 0.
	Abandon
)

// String is the fate's name as traces print it.
func (f Fate) String() string {
	return [...]string{"deliver", "delay", "drop-reply", "crash-after", "crash-before", "hold", "park", "abandon"}[f]
}

// errReplyLost is returned for a call whose reply was dropped.
var errReplyLost = errors.New("explore: reply lost (fault injected): outcome unknown")

// errAbandoned is returned for a call its caller stopped waiting for
// (Abandon): it is sent later, or never.
var errAbandoned = errors.New("explore: the caller stopped waiting (fault injected): outcome unknown, the call still on its way")

// Probs are the chances of each fault per call (the rest is Deliver) and
// of a crash at each crash point an actor passes.
type Probs struct {
	Delay       float64 // chance per call of the Delay fate
	DropReply   float64 // chance per call of the DropReply fate
	CrashAfter  float64 // chance per call of the CrashAfter fate
	CrashBefore float64 // chance per call of the CrashBefore fate
	Hold        float64 // chance per call of the Hold fate
	Park        float64 // chance per call of the Park fate
	// CrashPoint is the chance that an actor dies at each crash point it
	// passes (Faults.Crash), besides its CrashAt fate.
	CrashPoint float64
	// CrashAt is the chance that an actor is fated, when it starts, to
	// die at the k-th crash point it passes, k drawn uniformly from 1 to
	// crashAtMax: every crash point of a protocol (staged:stage-only, the
	// third of a one-round attempt's) is as likely as the first.
	CrashAt float64
	// Abandon is the chance per call of the Abandon fate (Options.Abandon;
	// 0 in every profile).
	Abandon float64
}

// crashAtMax is the latest crash point a CrashAt fate names.
const crashAtMax = 4

// DefaultProbs is what an exploration uses unless told otherwise.
var DefaultProbs = Probs{Delay: 0.06, DropReply: 0.06, CrashAfter: 0.03, CrashBefore: 0.02, Hold: 0.12, Park: 0.03, CrashPoint: 0.04}

// StallProbs parks many calls past the deadlines and loses more
// replies: messages stuck in the network while leases and deadlines run
// out, and the reconcilers act on what they left (make explore
// PROFILE=stall).
var StallProbs = Probs{Delay: 0.04, DropReply: 0.12, CrashAfter: 0.03, CrashBefore: 0.02, Hold: 0.1, Park: 0.3, CrashPoint: 0.02}

// CalmProbs only reorders and delays calls: no reply lost, no actor
// crashed (make explore PROFILE=calm), so long protocols (a topology
// apply's waits) run to their end.
var CalmProbs = Probs{Delay: 0.05, Hold: 0.15}

// LossyProbs loses many replies and parks many calls past the
// deadlines, crashing no one (make explore PROFILE=lossy): attempts whose
// outcome was unknown leave failed records behind and are retried, and
// the retries' calls arrive after the reconcilers acted.
var LossyProbs = Probs{Delay: 0.04, DropReply: 0.2, Hold: 0.1, Park: 0.25}

// CrashProbs is CalmProbs plus, for half of the actors, a death at one of
// the first crash points they pass (make explore PROFILE=crash): an
// attempt dead at each step of its protocol, with the other actors' long
// protocols (a topology apply) left to run to their end around it.
var CrashProbs = Probs{Delay: 0.05, Hold: 0.15, CrashAt: 0.5}

// fanOut are the crash points at which an attempt dies while sending
// (staged_reserve.go): the calls the point names (only the stage, only
// the takes, some takes) are still sent, so the actor is dead only once
// its call returned ErrCrashed (Died); the other points of the group are
// then not taken.
var fanOut = map[string]bool{"staged:takes-only": true, "staged:stage-only": true, "staged:some-takes": true}

// Crash implements inventory.Faults: the actor dies at a crash point with
// probability Probs.CrashPoint, or at the one its CrashAt fate names.
func (s *Scheduler) Crash(ctx context.Context, point string) bool {
	a, _ := ctx.Value(actorKey{}).(*actor)
	if a == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if a.crashed {
		return true
	}
	if a.dying {
		return false
	}
	a.points++
	if a.points != a.crashAt && a.rng.Float64() >= s.probs.CrashPoint {
		return false
	}
	if fanOut[point] {
		a.dying = true
	} else {
		a.crashed = true
	}
	s.trace = append(s.trace, fmt.Sprintf("%s: crash at %s", a.name, point))
	return true
}

// Died marks the actor in ctx dead if err wraps inventory.ErrCrashed (an
// attempt that stopped at a fan-out crash point returns so once its
// calls went out): none of its later calls is sent.
func (s *Scheduler) Died(ctx context.Context, err error) {
	a, _ := ctx.Value(actorKey{}).(*actor)
	if a == nil || !errors.Is(err, inventory.ErrCrashed) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a.crashed = true
}

func (s *Scheduler) drawFate() Fate {
	x := s.rng.Float64()
	p := s.probs
	for _, f := range []struct {
		p    float64
		fate Fate
	}{{p.Delay, Delay}, {p.DropReply, DropReply}, {p.CrashAfter, CrashAfter}, {p.CrashBefore, CrashBefore}, {p.Hold, Hold}, {p.Park, Park}, {p.Abandon, Abandon}} {
		if x < f.p {
			return f.fate
		}
		x -= f.p
	}
	return Deliver
}
