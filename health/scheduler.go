// Package health runs one ping/reconnect scheduler for all nodes.
//
// The scheduler keeps a timer heap of next-probe times, one entry per
// target, and a single goroutine that sleeps until the earliest one. An UP
// target is probed every heartbeat; a failed command can pull its probe
// forward ([Scheduler.Trigger]). A failed probe marks the target DOWN and
// schedules reconnect probes along the backoff list (the last delay
// repeats, each with ±10 % jitter); a successful probe marks it UP. State
// changes are delivered to [Settings.OnChange] outside any lock.
//
// Package health imports nothing of shardis: a target is anything with a
// name, a probe and a state (a *node.Node is one).
package health

import (
	"container/heap"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// Target is something the scheduler probes and flips.
type Target interface {
	// Name identifies the target in events; names must be unique.
	Name() string
	// Probe checks the target, bounded by its own timeout and by ctx.
	Probe(ctx context.Context) error
	// SetUp marks the target UP and reports whether its state changed.
	SetUp() bool
	// SetDown marks the target DOWN and reports whether its state changed.
	SetDown(reason error) bool
}

// RetryAfterError is implemented by a failed probe's error (or one it
// wraps) that knows when the target may pass: its next probe is due then,
// when that comes before the backoff's delay (a node held back after a
// restart says how much longer); at once when it may pass already (a
// RetryAfter of zero or less).
type RetryAfterError interface {
	error
	// RetryAfter is how long from now the target may pass.
	RetryAfter() time.Duration
}

// retryMargin is added to a RetryAfter, so the probe lands just after it.
const retryMargin = 10 * time.Millisecond

// Event is a state change of one target.
type Event struct {
	// Target is the target's name.
	Target string
	// Up is the new state.
	Up bool
	// Err is the failed probe's error for a DOWN event, nil for UP.
	Err error
	// FailedProbes counts consecutive failed probes (0 for UP).
	FailedProbes int
	// At is when the probe finished, by the scheduler's clock.
	At time.Time
}

// Settings configures [New]. The zero value works.
type Settings struct {
	// Heartbeat is the probe period of an UP target.
	// default: 500ms
	Heartbeat time.Duration
	// Backoff lists the delays between probes of a DOWN target; the last
	// repeats. Each delay gets ±10 % jitter. New copies the list; an entry
	// of zero or less takes [DefaultBackoff]'s at its place (its last past
	// the end), so a DOWN target is never probed in a tight loop.
	// default: [500ms, 1s, 1.5s]
	Backoff []time.Duration
	// OnChange, when set, receives every state change, in order per target,
	// on a scheduler goroutine and outside any lock. It must not block for
	// long: the next probe of that target waits for it.
	OnChange func(Event)
	// OnProbe, when set, is called after every probe that ran to its end
	// with its duration and error (for metrics), on the probe's goroutine,
	// outside any lock; not for a probe that Close cancelled. It must not
	// call Close (Close waits for it).
	OnProbe func(target string, d time.Duration, err error)
	// Clock is the source of time.
	// default: the real clock
	Clock Clock
}

// DefaultBackoff is the backoff list used when [Settings.Backoff] is empty.
var DefaultBackoff = []time.Duration{500 * time.Millisecond, time.Second, 1500 * time.Millisecond}

// Scheduler probes targets. Its methods are safe for concurrent use.
type Scheduler struct {
	set    Settings
	ctx    context.Context // canceled by Close; probes run under it
	cancel context.CancelFunc
	wake   chan struct{} // buffered(1): the heap changed, recompute the sleep
	ready  chan struct{} // closed once every target finished one probe
	done   chan struct{} // closed when the loop exits
	wg     sync.WaitGroup

	mu      sync.Mutex
	byName  map[string]*entry // immutable after New
	queue   entryHeap         // guarded by mu
	pending int               // guarded by mu: targets not probed yet
	closed  bool              // guarded by mu
}

type entry struct {
	target   Target
	due      time.Time // guarded by Scheduler.mu
	index    int       // heap index, guarded by Scheduler.mu
	failures int       // consecutive failed probes, guarded by Scheduler.mu
	inflight bool      // a probe goroutine owns the entry; guarded by Scheduler.mu
	probed   bool      // guarded by Scheduler.mu
}

// New starts a scheduler over targets. Every target is probed at once;
// [Scheduler.Ready] tells when all have been probed once. Call Close to stop it.
func New(targets []Target, set Settings) *Scheduler {
	if set.Heartbeat <= 0 {
		set.Heartbeat = 500 * time.Millisecond
	}
	set.Backoff = ownBackoff(set.Backoff)
	if set.Clock == nil {
		set.Clock = realClock{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Scheduler{
		set: set, ctx: ctx, cancel: cancel,
		wake: make(chan struct{}, 1), ready: make(chan struct{}), done: make(chan struct{}),
		byName: make(map[string]*entry, len(targets)), pending: len(targets),
	}
	now := set.Clock.Now()
	for _, t := range targets {
		e := &entry{target: t, due: now}
		s.byName[t.Name()] = e
		heap.Push(&s.queue, e)
	}
	if s.pending == 0 {
		close(s.ready)
	}
	go s.loop()
	return s
}

// Ready returns a channel closed once every target has been probed once,
// or once the scheduler is closed.
func (s *Scheduler) Ready() <-chan struct{} { return s.ready }

// Trigger asks for an immediate probe of an UP target (a command to it just
// failed). It is cheap and never blocks; it does nothing for an unknown
// name, a probe already in flight, or a DOWN target, whose reconnect
// probes keep to the backoff list.
func (s *Scheduler) Trigger(name string) { s.probeNow(name, false) }

// Reprobe asks for an immediate probe of a target, UP or DOWN: an
// operator acted on it (a node accepted after it was refused for its
// data), so what refused it may be gone now, and a DOWN target would
// otherwise wait out its backoff step. A failing probe goes on with the
// backoff where it was (the failures are not reset). Cheap and
// non-blocking like Trigger; nothing for an unknown name, a probe in
// flight, a target not probed yet or a closed scheduler.
func (s *Scheduler) Reprobe(name string) { s.probeNow(name, true) }

// probeNow makes target name due now (Trigger, Reprobe): not an unknown
// name, a probe in flight, a target not probed yet or a closed
// scheduler, nor a failing target unless down is set.
func (s *Scheduler) probeNow(name string, down bool) {
	e := s.byName[name]
	if e == nil {
		return
	}
	s.mu.Lock()
	if s.closed || e.inflight || (e.failures > 0 && !down) || !e.probed {
		s.mu.Unlock()
		return
	}
	e.due = s.set.Clock.Now()
	heap.Fix(&s.queue, e.index)
	s.mu.Unlock()
	s.poke()
}

// Status returns the consecutive failed probes of a target and when it is
// next probed (while a probe of it is under way: when that probe was due,
// a time already past); ok is false for an unknown name.
func (s *Scheduler) Status(name string) (failedProbes int, next time.Time, ok bool) {
	e := s.byName[name]
	if e == nil {
		return 0, time.Time{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return e.failures, e.due, true
}

// Close stops the scheduler and waits for in-flight probes (they are
// canceled). No event is delivered after Close returns. Idempotent. Do not
// call it from OnChange, OnProbe or a Target's Probe: it waits for the
// goroutines they run on.
func (s *Scheduler) Close() {
	s.mu.Lock()
	already := s.closed
	s.closed = true
	s.mu.Unlock()
	if !already {
		s.cancel()
	}
	<-s.done
	s.wg.Wait()
	s.mu.Lock()
	if s.pending > 0 {
		s.pending = 0
		close(s.ready) // nobody waits forever on a closed scheduler
	}
	s.mu.Unlock()
}

func (s *Scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// loop sleeps until the earliest due entry and starts its probe.
func (s *Scheduler) loop() {
	defer close(s.done)
	for {
		s.mu.Lock()
		now := s.set.Clock.Now()
		for len(s.queue) > 0 && !s.queue[0].due.After(now) && s.ctx.Err() == nil {
			// Out of the heap while in flight; the probe pushes it back.
			e := heap.Pop(&s.queue).(*entry)
			e.inflight = true
			s.wg.Add(1)
			go s.probe(e)
		}
		sleep := time.Hour
		if len(s.queue) > 0 {
			sleep = s.queue[0].due.Sub(now)
		}
		s.mu.Unlock()

		timer := s.set.Clock.NewTimer(sleep)
		select {
		case <-s.ctx.Done():
			timer.Stop()
			return
		case <-s.wake:
		case <-timer.C():
		}
		timer.Stop()
	}
}

// probe runs one probe of e and applies the outcome.
func (s *Scheduler) probe(e *entry) {
	defer s.wg.Done()
	start := s.set.Clock.Now()
	err := e.target.Probe(s.ctx)
	if s.ctx.Err() != nil {
		return // closing: the outcome says nothing about the target
	}
	if s.set.OnProbe != nil {
		s.set.OnProbe(e.target.Name(), s.set.Clock.Now().Sub(start), err)
	}
	var changed bool
	if err == nil {
		changed = e.target.SetUp()
	} else {
		changed = e.target.SetDown(err)
	}

	// The count is updated with the target's state, before the event, so a
	// Status read after the event (or after the target changed) agrees with
	// it. The change is delivered while the entry is still in flight, so the
	// next probe of this target cannot overtake it.
	s.mu.Lock()
	now := s.set.Clock.Now()
	failures := 0
	if err != nil {
		failures = e.failures + 1
	}
	e.failures = failures
	s.mu.Unlock()
	if changed && s.set.OnChange != nil {
		s.set.OnChange(Event{Target: e.target.Name(), Up: err == nil, Err: err, FailedProbes: failures, At: now})
	}

	s.mu.Lock()
	if err == nil {
		e.due = now.Add(s.set.Heartbeat)
	} else {
		e.due = now.Add(retryDelay(err, s.backoff(failures)))
	}
	e.inflight = false
	heap.Push(&s.queue, e)
	if !e.probed {
		e.probed = true
		s.pending--
		if s.pending == 0 {
			close(s.ready)
		}
	}
	s.mu.Unlock()
	s.poke()
}

// retryDelay is backoff, or the failed probe's RetryAfter (plus
// retryMargin) when err has one that comes sooner. A RetryAfter of zero
// or less (the target may pass already) is retryMargin. The comparison
// leaves retryMargin out, so a RetryAfter near the largest duration does
// not overflow into a short delay.
func retryDelay(err error, backoff time.Duration) time.Duration {
	var ra RetryAfterError
	if errors.As(err, &ra) {
		if d := max(ra.RetryAfter(), 0); d < backoff-retryMargin {
			return d + retryMargin
		}
	}
	return backoff
}

// ownBackoff is a copy of b, or of DefaultBackoff when b is empty, with
// every entry of zero or less replaced by DefaultBackoff's at its place.
func ownBackoff(b []time.Duration) []time.Duration {
	if len(b) == 0 {
		b = DefaultBackoff
	}
	out := slices.Clone(b)
	for i, d := range out {
		if d <= 0 {
			out[i] = DefaultBackoff[min(i, len(DefaultBackoff)-1)]
		}
	}
	return out
}

// backoff returns the delay before reconnect probe number failures+1, with
// ±10 % jitter.
func (s *Scheduler) backoff(failures int) time.Duration {
	i := min(failures-1, len(s.set.Backoff)-1)
	d := s.set.Backoff[i]
	jitter := time.Duration((rand.Float64()*0.2 - 0.1) * float64(d))
	return d + jitter
}

// entryHeap orders entries by due time.
type entryHeap []*entry

func (h entryHeap) Len() int           { return len(h) }
func (h entryHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h entryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *entryHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *entryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
