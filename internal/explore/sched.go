package explore

import (
	"context"
	"fmt"
	"math/rand"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/shardis/shardis/inventory"
)

// The scheduler: one per schedule. Every script call of every actor
// (inventory.Faults.Call) and every extra step (a node restart) waits
// until the scheduler picks it; one call runs at a time. The scheduler
// picks only at quiescence: when every live actor is waiting at a call
// (or finished), so the set it picks from is the same on every run of a
// seed. It draws, from the seed's math/rand, which waiting call runs next
// (that reorders calls across actors) and what happens to it (its Fate):
// delivered, delayed in real time, held behind a few picks of other
// actors' calls, parked past the deadlines into the next phase, its reply
// dropped, or its actor crashed after or before sending it.
//
// Quiescence is judged from outside the actors' goroutines: an actor is
// busy from its start, and from the moment a call of it returns, until it
// is back at a call or finished. An actor whose code runs several calls
// at once (one per node) counts as settled once it has a call waiting and
// grace passed since its last call returned; and no pick is made while
// any goroutine of the process is running or runnable besides the
// scheduler's own (runtime/metrics), up to maxSettle. Replay of a seed is
// exact as long as every actor reaches its next call by then: on a loaded
// machine, or with several worlds in one process, a replay may pick from
// a different set (Digest tells two runs apart).

// Timing of the scheduler (see the file comment).
const (
	grace    = time.Millisecond      // quiet time before picking
	maxStall = 3 * time.Second       // a busy actor with no call: pick anyway after this
	maxDelay = 40 * time.Millisecond // longest Delay
	// maxSettle bounds the wait for the process's goroutines to block
	// before a pick (busyGoroutines).
	maxSettle = 5 * time.Millisecond
)

type actorKey struct{}

type actor struct {
	id      int
	name    string
	rng     *rand.Rand // crash points: drawn on the actor's own goroutine
	busy    bool
	done    bool
	asleep  bool // its sub-actor (Sub) runs: it makes no call meanwhile
	crashed bool
	crashAt int  // die at this crash point passed (0: none; Probs.CrashAt)
	dying   bool // stopped at a fan-out crash point: what it sends still goes
	points  int  // crash points passed
	waiting int
	parked  int // of waiting, calls parked until the next phase
	retAt   time.Time
}

// returned counts one of a's calls as returned (s.mu held): one fewer
// waiting, and a is busy from now until it is back at a call.
func (a *actor) returned() {
	a.waiting--
	a.busy, a.retAt = true, time.Now()
}

type call struct {
	a      *actor
	desc   string
	step   bool // an explorer step, not a script: always delivered
	write  bool // a script that may change its node (only such are abandoned)
	idle   bool // a step that only waits (Idle): outside the fault budget
	ready  chan Fate
	held   bool // held once already
	until  int  // held: not picked before this many picks
	parked bool // parked until the next phase
	// abandoned: its caller was answered (Abandon); a to-be-sent call of
	// a's, an actor of its own that ends when the call was sent
	abandoned bool
}

// Scheduler orders and faults the calls of one schedule's actors. It is
// the schedule's inventory.Faults (and inventory.Mutator).
type Scheduler struct {
	seed      int64
	probs     Probs
	mutations map[inventory.Mutation]bool
	maxSteps  int

	mu       sync.Mutex
	rng      *rand.Rand
	actors   []*actor
	waiting  []*call
	inflight *call
	arrived  time.Time
	closed   bool // Run returned: later calls are not scheduled
	phase    int  // 0 first phase, then 1 (NextPhase)
	steps    int
	idle     int // of steps, Idle's: maxSteps bounds the others
	trace    []string
	sentTo   map[string]int // script calls picked to be sent, by node (callsTo)
	wake     chan struct{}
	wg       sync.WaitGroup

	// carryWait is the schedule's inventory.Options.CarryWait (carryWait).
	carryWait time.Duration
}

// NewScheduler returns the scheduler of one schedule.
func NewScheduler(seed int64, probs Probs, mutations []inventory.Mutation) *Scheduler {
	s := &Scheduler{seed: seed, probs: probs, rng: rand.New(rand.NewSource(seed)), maxSteps: 300,
		mutations: map[inventory.Mutation]bool{}, wake: make(chan struct{}, 1)}
	for _, m := range mutations {
		s.mutations[m] = true
	}
	s.carryWait = carryWait(seed)
	return s
}

// carryWait is a schedule's inventory.Options.CarryWait, drawn from its
// seed apart from the schedule's own draws: half the schedules send every
// one-round commit by itself, the other half leave each to ride the next
// write call on its home node (inventory/carry.go), or to go at Close (a
// wait longer than any schedule). Either way whether a commit rides
// follows from the schedule's picks alone, never from a timer, so a replay
// of the seed decides alike.
func carryWait(seed int64) time.Duration {
	if rand.New(rand.NewSource(seed^0x5ca1ab1e)).Intn(2) == 0 {
		return -1
	}
	return time.Minute
}

// Mutated implements inventory.Mutator.
func (s *Scheduler) Mutated(m inventory.Mutation) bool { return s.mutations[m] }

// Intn draws from the schedule's generator (for the plan, before Run).
func (s *Scheduler) Intn(n int) int { return s.rng.Intn(n) }

// Chance is true with probability p (for the plan, before Run).
func (s *Scheduler) Chance(p float64) bool { return s.rng.Float64() < p }

func (s *Scheduler) notify() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// newActor adds an actor (s.mu held) and draws its crash-point fate.
func (s *Scheduler) newActor(name string) *actor {
	a := &actor{id: len(s.actors), name: name, busy: true, retAt: time.Now(),
		rng: rand.New(rand.NewSource(s.seed*7919 + int64(len(s.actors)) + 1))}
	if s.probs.CrashAt > 0 && a.rng.Float64() < s.probs.CrashAt {
		a.crashAt = 1 + a.rng.Intn(crashAtMax)
	}
	s.actors = append(s.actors, a)
	return a
}

// Go starts an actor: fn runs with a context naming it. Start every
// actor of a phase before Run.
func (s *Scheduler) Go(ctx context.Context, name string, fn func(ctx context.Context)) {
	s.mu.Lock()
	a := s.newActor(name)
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() {
			s.mu.Lock()
			a.done, a.busy, a.retAt = true, false, time.Now()
			s.mu.Unlock()
			s.notify()
		}()
		fn(context.WithValue(ctx, actorKey{}, a))
	}()
}

// Sub runs fn, on the caller's goroutine, as a sub-actor of the actor in
// ctx: a client the actor starts mid-schedule (an order placed once a
// topology change is applied). The sub-actor has its own name, fates and
// crash; the actor sleeps meanwhile (its quiescence is the sub-actor's)
// and goes on after fn returns, alive whether or not the sub-actor died.
// Outside an actor fn just runs.
func (s *Scheduler) Sub(ctx context.Context, name string, fn func(ctx context.Context)) {
	parent, _ := ctx.Value(actorKey{}).(*actor)
	if parent == nil {
		fn(ctx)
		return
	}
	s.mu.Lock()
	a := s.newActor(name)
	parent.asleep = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		a.done, a.busy, a.retAt = true, false, time.Now()
		parent.asleep, parent.busy, parent.retAt = false, true, time.Now()
		s.mu.Unlock()
		s.notify()
	}()
	fn(context.WithValue(ctx, actorKey{}, a))
}

// Crashed reports whether the named actor died.
func (s *Scheduler) Crashed(ctx context.Context) bool {
	a, _ := ctx.Value(actorKey{}).(*actor)
	if a == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return a.crashed
}

// Call implements inventory.Faults.
func (s *Scheduler) Call(ctx context.Context, c inventory.ScriptCall, send func() (any, error)) (any, error) {
	return s.submit(ctx, &call{desc: describe(c), write: c.Write}, send)
}

// Step runs fn as one scheduled step of the actor in ctx (never faulted).
func (s *Scheduler) Step(ctx context.Context, desc string, fn func() error) error {
	_, err := s.submit(ctx, &call{desc: desc, step: true}, func() (any, error) { return nil, fn() })
	return err
}

// Pass is n scheduled steps of the actor in ctx that do nothing, each
// traced as who's wait: it lets n picks of other actors' calls (or of
// these steps) go by.
func (s *Scheduler) Pass(ctx context.Context, who string, n int) {
	for range n {
		_ = s.Step(ctx, who+" waits", func() error { return nil })
	}
}

// Idle is one scheduled step of the actor in ctx that does nothing but
// let real time pass (d): a wait for another actor's progress
// (observed.waitEnded). Its picks advance held calls as any pick does but
// do not count toward maxSteps, so a long wait leaves the schedule its
// faults.
func (s *Scheduler) Idle(ctx context.Context, desc string, d time.Duration) {
	_, _ = s.submit(ctx, &call{desc: desc, step: true, idle: true}, func() (any, error) {
		time.Sleep(d)
		return nil, nil
	})
}

// describe names a call by node, script and keys, with the attempts'
// random tokens in part ids replaced by "T", so the order of an actor's
// waiting calls and the trace are the same on every run of a seed.
func describe(c inventory.ScriptCall) string {
	return tokenRE.ReplaceAllString(c.Node+" "+c.Script+" "+strings.Join(c.Keys, ","), "|T|")
}

// tokenRE matches the token of a part id (order|token|item).
var tokenRE = regexp.MustCompile(`\|[0-9A-Za-z_-]{8}\|`)

// submit waits until the scheduler picks c (its actor, its ready channel
// set here), then sends it as its fate says.
func (s *Scheduler) submit(ctx context.Context, c *call, send func() (any, error)) (any, error) {
	a, _ := ctx.Value(actorKey{}).(*actor)
	s.mu.Lock()
	if a == nil || s.closed {
		// Not an actor's (set-up, checks), or background work that
		// outlived the schedule's run: not scheduled.
		s.mu.Unlock()
		return send()
	}
	if a.crashed {
		s.mu.Unlock()
		return nil, fmt.Errorf("explore: actor %s: %w", a.name, inventory.ErrCrashed)
	}
	ready := make(chan Fate, 1)
	c.a, c.ready = a, ready
	s.waiting = append(s.waiting, c)
	a.waiting++
	a.busy = false
	s.arrived = time.Now()
	s.mu.Unlock()
	s.notify()

	var fate Fate
	select {
	case fate = <-ready:
	case <-ctx.Done():
		s.mu.Lock()
		for i, w := range s.waiting {
			if w == c && !c.abandoned {
				s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
				if c.parked {
					a.parked--
				}
				a.returned()
				s.mu.Unlock()
				s.notify()
				return nil, ctx.Err()
			}
		}
		s.mu.Unlock()
		fate = <-ready // picked already: honour the pick
	}
	if fate == Abandon { // its caller was counted back to work by abandon
		go s.sendLate(c, send)
		return nil, errAbandoned
	}
	if f, ok := ctx.Value(firstSendKey{}).(*firstSend); ok {
		f.mark()
	}
	v, err := s.run(a, fate, send)
	s.mu.Lock()
	a.returned()
	s.inflight = nil
	s.mu.Unlock()
	s.notify()
	return v, err
}

// sendLate sends c, which its caller abandoned (pick gave it an actor of
// its own and a channel of its own), when the scheduler picks it again,
// as its fate then says; the actor ends with it. Nobody reads its reply.
func (s *Scheduler) sendLate(c *call, send func() (any, error)) {
	s.mu.Lock()
	g, ready := c.a, c.ready
	s.mu.Unlock()
	fate := <-ready
	_, _ = s.run(g, fate, send)
	s.mu.Lock()
	g.returned()
	g.done, g.busy = true, false // the call was all it had to do
	s.inflight = nil
	s.mu.Unlock()
	s.notify()
}

// firstSend is when the first scheduled call made under a context of
// withFirstSend was let go (before any delay its fate adds: no later than
// it was sent).
type firstSend struct {
	mu sync.Mutex
	at time.Time
}

type firstSendKey struct{}

// withFirstSend returns ctx with a fresh firstSend that the scheduler
// marks.
func withFirstSend(ctx context.Context) (context.Context, *firstSend) {
	f := &firstSend{}
	return context.WithValue(ctx, firstSendKey{}, f), f
}

func (f *firstSend) mark() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.at.IsZero() {
		f.at = time.Now()
	}
}

// time is the mark (zero: no call was let go).
func (f *firstSend) time() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.at
}

// run carries out fate for one picked call.
func (s *Scheduler) run(a *actor, fate Fate, send func() (any, error)) (any, error) {
	crashed := fmt.Errorf("explore: actor %s: %w", a.name, inventory.ErrCrashed)
	switch fate {
	case CrashBefore:
		return nil, crashed
	case Delay:
		s.mu.Lock()
		d := time.Duration(a.rng.Int63n(int64(maxDelay)))
		s.mu.Unlock()
		time.Sleep(d)
	}
	v, err := send()
	switch fate {
	case DropReply:
		return nil, errReplyLost
	case CrashAfter:
		return nil, crashed
	}
	return v, err
}

// Run picks calls until every actor started with Go has finished, or
// waits only on calls parked for the next phase.
func (s *Scheduler) Run() {
	s.mu.Lock()
	s.closed = false
	s.mu.Unlock()
	for {
		wait, finished := s.pick()
		if finished {
			return
		}
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-s.wake:
			case <-t.C:
			}
			t.Stop()
		}
	}
}

// Wait waits until every actor's function returned (after the last Run).
func (s *Scheduler) Wait() { s.wg.Wait() }
