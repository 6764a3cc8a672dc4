package health

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The tests drive the scheduler with a fakeClock and fakeTargets. The only
// white-box part is harness.idle, which looks at the scheduler's own state
// (no probe in flight, no pending wake-up) together with the fake clock (the
// loop has armed its sleep timer) to know the loop is asleep, so that time
// can be advanced deterministically.

var errProbe = errors.New("connection refused")

// waitFor polls cond (the scheduler has no hook to wait on) with tiny real
// sleeps, failing the test after 5s.
func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; !cond(); i++ {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after 5s waiting for %s", what)
		}
		if i < 20 {
			runtime.Gosched() // usually enough for the scheduler's goroutines
		} else {
			time.Sleep(20 * time.Microsecond)
		}
	}
}

// recv receives from ch or fails the test after 5s.
func recv[T any](tb testing.TB, ch <-chan T, what string) T {
	tb.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(5 * time.Second):
		tb.Fatalf("timed out after 5s waiting for %s", what)
		panic("unreachable")
	}
}

// waitGoroutines waits until the goroutine count is back to at most want.
func waitGoroutines(tb testing.TB, want int) {
	tb.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := runtime.NumGoroutine()
		if got <= want {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			buf = buf[:runtime.Stack(buf, true)]
			tb.Fatalf("goroutine leak: got %d goroutines, want <= %d\n%s", got, want, buf)
		}
		time.Sleep(time.Millisecond)
	}
}

// ---- fake target -----------------------------------------------------------

// script decides the outcome of probe number n (1-based).
type script func(ctx context.Context, n int) error

func alwaysOK(context.Context, int) error   { return nil }
func alwaysFail(context.Context, int) error { return errProbe }

// results scripts probe n with rs[n-1]; the last result repeats.
func results(rs ...error) script {
	return func(_ context.Context, n int) error { return rs[min(n, len(rs))-1] }
}

// fakeTarget is a scripted Target that records its probes. Like a real node
// it starts DOWN, and SetUp/SetDown report true only when they change it.
type fakeTarget struct {
	name   string
	clk    *fakeClock
	script script

	mu       sync.Mutex
	up       bool
	times    []time.Time // fake time at each probe start
	outcomes []error     // each finished probe's result
	setCalls int         // SetUp + SetDown calls
	changes  int         // calls that reported a change
}

func newTarget(name string, clk *fakeClock, s script) *fakeTarget {
	return &fakeTarget{name: name, clk: clk, script: s}
}

func (f *fakeTarget) Name() string { return f.name }

func (f *fakeTarget) Probe(ctx context.Context) error {
	f.mu.Lock()
	f.times = append(f.times, f.clk.Now())
	n := len(f.times)
	f.mu.Unlock()
	err := f.script(ctx, n)
	f.mu.Lock()
	f.outcomes = append(f.outcomes, err)
	f.mu.Unlock()
	return err
}

func (f *fakeTarget) SetUp() bool { return f.set(true) }

func (f *fakeTarget) SetDown(reason error) bool {
	if reason == nil {
		panic("SetDown(nil)")
	}
	return f.set(false)
}

func (f *fakeTarget) set(up bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setCalls++
	changed := f.up != up
	f.up = up
	if changed {
		f.changes++
	}
	return changed
}

func (f *fakeTarget) Probes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.times)
}

func (f *fakeTarget) Times() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.times...)
}

func (f *fakeTarget) Outcomes() []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]error(nil), f.outcomes...)
}

func (f *fakeTarget) IsUp() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.up
}

func (f *fakeTarget) SetCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.setCalls
}

// lastProbe returns the fake time of the last probe.
func (f *fakeTarget) lastProbe(tb testing.TB) time.Time {
	tb.Helper()
	ts := f.Times()
	if len(ts) == 0 {
		tb.Fatalf("%s: no probe yet", f.name)
	}
	return ts[len(ts)-1]
}

// ---- event recorder --------------------------------------------------------

type recorder struct {
	mu     sync.Mutex
	events []Event
}

func (r *recorder) OnChange(e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) all() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

func (r *recorder) of(name string) []Event {
	var out []Event
	for _, e := range r.all() {
		if e.Target == name {
			out = append(out, e)
		}
	}
	return out
}

// ---- harness ---------------------------------------------------------------

type harness struct {
	t   *testing.T
	clk *fakeClock
	s   *Scheduler
	rec *recorder
}

// start runs a scheduler over targets with set; set.Clock is replaced by the
// harness's fake clock and, unless set.OnChange is given, events go to h.rec.
// The scheduler is closed at cleanup.
func start(t *testing.T, clk *fakeClock, set Settings, targets ...*fakeTarget) *harness {
	t.Helper()
	h := &harness{t: t, clk: clk, rec: &recorder{}}
	set.Clock = clk
	if set.OnChange == nil {
		set.OnChange = h.rec.OnChange
	}
	ts := make([]Target, len(targets))
	for i, f := range targets {
		ts[i] = f
	}
	h.s = New(ts, set)
	t.Cleanup(func() { closeWithin(t, h.s, 5*time.Second) })
	return h
}

// closeWithin closes s, failing the test instead of hanging when Close does
// not return in time (a deadlocked scheduler).
func closeWithin(t *testing.T, s *Scheduler, d time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		t.Errorf("Close did not return within %v", d)
	}
}

// isIdle reports whether the scheduler is asleep with nothing to do: no
// probe in flight or still finishing (a probe goroutine pokes the loop after
// it released the lock, so the entries alone cannot tell), no pending
// wake-up, and the loop goroutine parked in its select on a timer armed on
// the fake clock (so its sleep was computed from the current fake time and
// heap, and advancing the clock now cannot race with that computation).
func (h *harness) isIdle() bool {
	s := h.s
	s.mu.Lock()
	for _, e := range s.queue {
		if e.inflight {
			s.mu.Unlock()
			return false
		}
	}
	s.mu.Unlock()
	if len(s.wake) != 0 || h.clk.Active() == 0 {
		return false
	}
	loops, probes := schedulerGoroutines()
	if probes != 0 || len(loops) == 0 {
		return false
	}
	for _, state := range loops {
		if state != "select" {
			return false
		}
	}
	return true
}

// schedulerGoroutines returns the wait state of every scheduler loop
// goroutine ("select" when parked in its select) and the number of live
// probe goroutines, from a stack dump of all goroutines.
func schedulerGoroutines() (loopStates []string, probes int) {
	buf := make([]byte, 64<<10)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	const pkg = "created by github.com/shardis/shardis/health."
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		switch {
		case strings.Contains(g, pkg+"(*Scheduler).loop"):
			probes++
		case strings.Contains(g, pkg+"New"):
			header, _, _ := strings.Cut(g, "\n") // goroutine 7 [select, 2 minutes]:
			_, state, _ := strings.Cut(header, "[")
			state, _, _ = strings.Cut(state, "]")
			state, _, _ = strings.Cut(state, ",")
			loopStates = append(loopStates, state)
		}
	}
	return loopStates, probes
}

// idle waits until the scheduler is idle.
func (h *harness) idle() {
	h.t.Helper()
	h.clk.BlockUntil(h.t, 1)
	waitFor(h.t, "the scheduler to go idle (all probes finished, loop asleep)", h.isIdle)
}

// advance moves the fake time by d once the loop is asleep, then waits for
// whatever that triggered to finish.
func (h *harness) advance(d time.Duration) {
	h.t.Helper()
	h.idle()
	h.clk.Advance(d)
	h.idle()
}

func (h *harness) advanceTo(at time.Time) {
	h.t.Helper()
	h.idle()
	h.clk.AdvanceTo(at)
	h.idle()
}

// wantProbes checks f was probed exactly n times.
func (h *harness) wantProbes(f *fakeTarget, n int, when string) {
	h.t.Helper()
	if got := f.Probes(); got != n {
		h.t.Fatalf("%s: %s probed %d times, want %d (probe times %v)", when, f.name, got, n, f.Times())
	}
}

// status returns Status(name), failing on an unknown name.
func (h *harness) status(name string) (int, time.Time) {
	h.t.Helper()
	n, next, ok := h.s.Status(name)
	if !ok {
		h.t.Fatalf("Status(%q): ok = false, want true", name)
	}
	return n, next
}

// expectNextProbe checks that f, whose last probe was at last, is due for
// its next probe after a delay within [lo, hi], that it is not probed 1ns
// before that, and is probed exactly then; it returns the probe's time.
func (h *harness) expectNextProbe(f *fakeTarget, last time.Time, lo, hi time.Duration) time.Time {
	h.t.Helper()
	h.idle()
	_, next := h.status(f.name)
	if d := next.Sub(last); d < lo || d > hi {
		h.t.Fatalf("%s: next probe %v after the last one, want within [%v, %v]", f.name, d, lo, hi)
	}
	n := f.Probes()
	h.advanceTo(next.Add(-time.Nanosecond))
	h.wantProbes(f, n, fmt.Sprintf("1ns before the due time %v", next.Sub(fakeEpoch)))
	h.advance(time.Nanosecond)
	h.wantProbes(f, n+1, fmt.Sprintf("at the due time %v", next.Sub(fakeEpoch)))
	if got := f.lastProbe(h.t); !got.Equal(next) {
		h.t.Fatalf("%s probed at %v, want %v", f.name, got.Sub(fakeEpoch), next.Sub(fakeEpoch))
	}
	return next
}

// expectJittered is expectNextProbe for a backoff delay d with ±10 % jitter.
func (h *harness) expectJittered(f *fakeTarget, last time.Time, d time.Duration) time.Time {
	h.t.Helper()
	lo, hi := jitterBounds(d)
	return h.expectNextProbe(f, last, lo, hi)
}

func jitterBounds(d time.Duration) (lo, hi time.Duration) {
	return d - d/10, d + d/10
}

func wantEvent(tb testing.TB, got Event, want Event) {
	tb.Helper()
	if got.Target != want.Target || got.Up != want.Up || got.FailedProbes != want.FailedProbes || !got.At.Equal(want.At) ||
		!errors.Is(got.Err, want.Err) || (want.Err == nil) != (got.Err == nil) {
		tb.Fatalf("event:\n got %+v\nwant %+v", got, want)
	}
}

// ---- 1. start and Ready ----------------------------------------------------

func TestStartProbesAllTargetsAndReady(t *testing.T) {
	clk := newFakeClock()
	gate := make(chan struct{})
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(gate) }) }
	a := newTarget("a", clk, alwaysOK)
	b := newTarget("b", clk, alwaysOK)
	c := newTarget("c", clk, alwaysFail)
	slow := newTarget("slow", clk, func(ctx context.Context, _ int) error {
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	// OnChange of a first probe runs before Ready closes, so that a caller
	// woken by Ready sees every first event.
	var sp atomic.Pointer[Scheduler]
	published := make(chan struct{})
	var earlyReady atomic.Int32
	rec := &recorder{}
	onChange := func(e Event) {
		<-published
		select {
		case <-sp.Load().Ready():
			earlyReady.Add(1)
		default:
		}
		rec.OnChange(e)
	}
	h := start(t, clk, Settings{Heartbeat: time.Second, OnChange: onChange}, a, b, c, slow)
	h.rec = rec
	sp.Store(h.s)
	close(published)
	t.Cleanup(release)

	for _, f := range []*fakeTarget{a, b, c, slow} {
		waitFor(t, f.name+"'s first probe", func() bool { return f.Probes() == 1 })
	}
	waitFor(t, "a, b and c to finish", func() bool {
		return len(a.Outcomes()) == 1 && len(b.Outcomes()) == 1 && len(c.Outcomes()) == 1
	})
	select {
	case <-h.s.Ready():
		t.Fatal("Ready closed while slow's first probe is still in flight")
	default:
	}

	release()
	recv(t, h.s.Ready(), "Ready after every first probe")
	// Ready closing happens after the events of the first probes were
	// delivered: no waiting needed.
	if n := earlyReady.Load(); n != 0 {
		t.Fatalf("%d first-probe events delivered after Ready closed, want 0", n)
	}
	evs := h.rec.all()
	if got, want := len(evs), 3; got != want {
		t.Fatalf("got %d events %+v, want %d (UP for a, b, slow; none for c, which stays DOWN)", got, evs, want)
	}
	for _, f := range []*fakeTarget{a, b, slow} {
		e := h.rec.of(f.name)
		if len(e) != 1 {
			t.Fatalf("%s: got events %+v, want exactly one UP", f.name, e)
		}
		wantEvent(t, e[0], Event{Target: f.name, Up: true, At: fakeEpoch})
		if !f.IsUp() {
			t.Fatalf("%s is DOWN, want UP", f.name)
		}
	}
	if e := h.rec.of("c"); len(e) != 0 {
		t.Fatalf("c: got events %+v, want none (it was DOWN and stays DOWN)", e)
	}
	if c.IsUp() {
		t.Fatal("c is UP, want DOWN")
	}
	for _, f := range []*fakeTarget{a, b, c, slow} {
		h.wantProbes(f, 1, "after start")
		if got := f.lastProbe(t); !got.Equal(fakeEpoch) {
			t.Fatalf("%s first probed at %v, want at start %v", f.name, got, fakeEpoch)
		}
	}
	if n, _ := h.status("c"); n != 1 {
		t.Fatalf("Status(c) failedProbes = %d, want 1", n)
	}
}

func TestReadyWithoutTargets(t *testing.T) {
	h := start(t, newFakeClock(), Settings{})
	select {
	case <-h.s.Ready():
	default:
		t.Fatal("Ready not closed for a scheduler without targets")
	}
	if _, _, ok := h.s.Status("x"); ok {
		t.Fatal("Status(unknown) ok = true, want false")
	}
}

// ---- 2. heartbeat ------------------------------------------------------------

func TestHeartbeat(t *testing.T) {
	clk := newFakeClock()
	const hb = time.Second
	f := newTarget("a", clk, alwaysOK)
	h := start(t, clk, Settings{Heartbeat: hb, Backoff: []time.Duration{time.Minute}}, f)
	recv(t, h.s.Ready(), "Ready")

	h.advance(hb - time.Nanosecond)
	h.wantProbes(f, 1, "1ns before the first heartbeat")
	h.advance(time.Nanosecond)
	h.wantProbes(f, 2, "at the first heartbeat")
	if got, want := f.lastProbe(t), fakeEpoch.Add(hb); !got.Equal(want) {
		t.Fatalf("second probe at %v, want %v", got, want)
	}

	// Smaller steps: still once per heartbeat.
	h.advance(hb / 2)
	h.wantProbes(f, 2, "half a heartbeat later")
	h.advance(hb/2 - time.Nanosecond)
	h.wantProbes(f, 2, "1ns before the second heartbeat")
	h.advance(time.Nanosecond)
	h.wantProbes(f, 3, "at the second heartbeat")

	failed, next := h.status("a")
	if failed != 0 {
		t.Fatalf("Status failedProbes = %d, want 0", failed)
	}
	if want := fakeEpoch.Add(3 * hb); !next.Equal(want) {
		t.Fatalf("Status next = %v, want %v", next, want)
	}
	if got := len(h.rec.all()); got != 1 {
		t.Fatalf("got %d events, want 1 (the first UP)", got)
	}
}

// ---- 3. failure and backoff --------------------------------------------------

func TestFailureBackoff(t *testing.T) {
	clk := newFakeClock()
	const hb = time.Second
	backoff := []time.Duration{500 * time.Millisecond, time.Second, 4 * time.Second}
	f := newTarget("a", clk, results(nil, errProbe)) // UP, then failing for good
	h := start(t, clk, Settings{Heartbeat: hb, Backoff: backoff}, f)
	recv(t, h.s.Ready(), "Ready")

	h.advance(hb)
	h.wantProbes(f, 2, "at the heartbeat")
	failedAt := fakeEpoch.Add(hb)
	evs := h.rec.of("a")
	if len(evs) != 2 {
		t.Fatalf("got events %+v, want UP then DOWN", evs)
	}
	wantEvent(t, evs[1], Event{Target: "a", Up: false, Err: errProbe, FailedProbes: 1, At: failedAt})
	if f.IsUp() {
		t.Fatal("target UP after a failed probe, want DOWN")
	}

	last := failedAt
	for i, d := range []time.Duration{500 * time.Millisecond, time.Second, 4 * time.Second, 4 * time.Second, 4 * time.Second} {
		failed, _ := h.status("a")
		if failed != i+1 {
			t.Fatalf("before reconnect probe %d: Status failedProbes = %d, want %d", i+1, failed, i+1)
		}
		last = h.expectJittered(f, last, d)
	}
	if failed, _ := h.status("a"); failed != 6 {
		t.Fatalf("Status failedProbes = %d, want 6", failed)
	}
	if got := len(h.rec.all()); got != 2 {
		t.Fatalf("got %d events %+v, want 2: no event for failures while DOWN", got, h.rec.all())
	}
}

// A target that is DOWN from the start (as a fresh node) and fails its first
// probe does not change state, so no event; it still follows the backoff.
func TestDownFromStartFollowsBackoff(t *testing.T) {
	clk := newFakeClock()
	f := newTarget("a", clk, alwaysFail)
	h := start(t, clk, Settings{Backoff: []time.Duration{time.Second, 3 * time.Second}}, f)
	recv(t, h.s.Ready(), "Ready (a failed first probe counts)")
	last := fakeEpoch
	for _, d := range []time.Duration{time.Second, 3 * time.Second, 3 * time.Second} {
		last = h.expectJittered(f, last, d)
	}
	if got := h.rec.all(); len(got) != 0 {
		t.Fatalf("got events %+v, want none", got)
	}
	if got, want := f.SetCalls(), 4; got != want {
		t.Fatalf("SetDown called %d times, want %d (once per probe)", got, want)
	}
}

// ---- 4. recovery -------------------------------------------------------------

func TestRecovery(t *testing.T) {
	clk := newFakeClock()
	const hb = time.Second
	backoff := []time.Duration{500 * time.Millisecond, 2 * time.Second}
	f := newTarget("a", clk, results(nil, errProbe, errProbe, errProbe, nil))
	h := start(t, clk, Settings{Heartbeat: hb, Backoff: backoff}, f)
	recv(t, h.s.Ready(), "Ready")

	h.advance(hb) // probe 2 fails
	last := fakeEpoch.Add(hb)
	last = h.expectJittered(f, last, 500*time.Millisecond) // probe 3 fails
	last = h.expectJittered(f, last, 2*time.Second)        // probe 4 fails
	if failed, _ := h.status("a"); failed != 3 {
		t.Fatalf("Status failedProbes = %d, want 3", failed)
	}
	last = h.expectJittered(f, last, 2*time.Second) // probe 5 succeeds

	evs := h.rec.of("a")
	if len(evs) != 3 {
		t.Fatalf("got events %+v, want UP, DOWN, UP", evs)
	}
	wantEvent(t, evs[2], Event{Target: "a", Up: true, FailedProbes: 0, At: last})
	if !f.IsUp() {
		t.Fatal("target DOWN after recovery, want UP")
	}
	failed, next := h.status("a")
	if failed != 0 {
		t.Fatalf("after recovery Status failedProbes = %d, want 0", failed)
	}
	if want := last.Add(hb); !next.Equal(want) {
		t.Fatalf("after recovery Status next = %v, want heartbeat later %v", next, want)
	}
	h.expectNextProbe(f, last, hb, hb)
	h.expectNextProbe(f, last.Add(hb), hb, hb)
	if got := len(h.rec.all()); got != 3 {
		t.Fatalf("got %d events, want 3", got)
	}
}

// ---- 5. no duplicate events ----------------------------------------------------

func TestNoDuplicateEvents(t *testing.T) {
	clk := newFakeClock()
	const hb, step = 100 * time.Millisecond, 10 * time.Millisecond
	steady := newTarget("steady", clk, alwaysOK)
	broken := newTarget("broken", clk, results(nil, errProbe))
	dead := newTarget("dead", clk, alwaysFail)
	h := start(t, clk, Settings{Heartbeat: hb, Backoff: []time.Duration{hb}}, steady, broken, dead)
	recv(t, h.s.Ready(), "Ready")
	for range 200 {
		h.advance(step)
	}
	h.wantProbes(steady, 21, "after 2s")
	for _, f := range []*fakeTarget{broken, dead} {
		if n := f.Probes(); n < 16 {
			t.Fatalf("%s probed %d times in 2s, want >= 16", f.name, n)
		}
	}
	check := func(name string, want ...bool) {
		t.Helper()
		evs := h.rec.of(name)
		if len(evs) != len(want) {
			t.Fatalf("%s: got %d events %+v, want %d", name, len(evs), evs, len(want))
		}
		for i, e := range evs {
			if e.Up != want[i] {
				t.Fatalf("%s: event %d Up = %v, want %v", name, i, e.Up, want[i])
			}
		}
	}
	check("steady", true)
	check("broken", true, false)
	check("dead")
}

// ---- 6. Trigger --------------------------------------------------------------

func TestTrigger(t *testing.T) {
	const hb = time.Second
	set := Settings{Heartbeat: hb, Backoff: []time.Duration{2 * time.Second}}

	t.Run("UpTargetProbedAtOnce", func(t *testing.T) {
		clk := newFakeClock()
		f := newTarget("a", clk, alwaysOK)
		other := newTarget("b", clk, alwaysOK)
		h := start(t, clk, set, f, other)
		recv(t, h.s.Ready(), "Ready")
		h.advance(300 * time.Millisecond)
		at := clk.Now()

		h.s.Trigger("a")
		waitFor(t, "the triggered probe", func() bool { return f.Probes() == 2 })
		h.idle()
		h.wantProbes(f, 2, "after Trigger")
		h.wantProbes(other, 1, "after Trigger of another target")
		if got := f.lastProbe(t); !got.Equal(at) {
			t.Fatalf("triggered probe at %v, want %v (clock not advanced)", got, at)
		}
		// The heartbeat restarts from the triggered probe.
		h.expectNextProbe(f, at, hb, hb)
		if got := len(h.rec.of("a")); got != 1 {
			t.Fatalf("got %d events for a, want 1 (no duplicate UP)", got)
		}
	})

	t.Run("DownTargetKeepsBackoff", func(t *testing.T) {
		clk := newFakeClock()
		f := newTarget("a", clk, results(nil, errProbe))
		h := start(t, clk, set, f)
		recv(t, h.s.Ready(), "Ready")
		h.advance(hb) // DOWN
		h.wantProbes(f, 2, "at the heartbeat")
		_, before := h.status("a")

		h.s.Trigger("a")
		_, after := h.status("a")
		if !after.Equal(before) {
			t.Fatalf("Trigger moved a DOWN target's next probe from %v to %v", before, after)
		}
		h.idle()
		h.wantProbes(f, 2, "after Trigger of a DOWN target")
		h.expectJittered(f, fakeEpoch.Add(hb), 2*time.Second)
	})

	t.Run("ReprobeOfADownTargetKeepsItsBackoff", func(t *testing.T) {
		clk := newFakeClock()
		f := newTarget("a", clk, results(nil, errProbe, errProbe))
		h := start(t, clk, set, f)
		recv(t, h.s.Ready(), "Ready")
		h.advance(hb) // DOWN
		h.wantProbes(f, 2, "at the heartbeat")
		at := clk.Now()
		h.s.Reprobe("a")
		waitFor(t, "the probe Reprobe asked for", func() bool { return f.Probes() == 3 })
		h.idle()
		if got := f.lastProbe(t); !got.Equal(at) {
			t.Fatalf("reprobe at %v, want %v (clock not advanced)", got, at)
		}
		if failed, _ := h.status("a"); failed != 2 {
			t.Fatalf("failed probes after a failing reprobe = %d, want 2 (the backoff goes on)", failed)
		}
		h.s.Reprobe("nope")
		h.idle()
	})

	t.Run("UnknownNameIsNoop", func(t *testing.T) {
		clk := newFakeClock()
		f := newTarget("a", clk, alwaysOK)
		h := start(t, clk, set, f)
		recv(t, h.s.Ready(), "Ready")
		h.idle()
		_, before := h.status("a")
		h.s.Trigger("nope")
		h.s.Trigger("")
		h.idle()
		h.wantProbes(f, 1, "after Trigger of unknown names")
		if _, after := h.status("a"); !after.Equal(before) {
			t.Fatalf("next probe of a moved from %v to %v", before, after)
		}
		if _, _, ok := h.s.Status("nope"); ok {
			t.Fatal("Status(unknown) ok = true, want false")
		}
	})

	t.Run("InFlightProbeNotDoubled", func(t *testing.T) {
		clk := newFakeClock()
		started, release := make(chan struct{}, 1), make(chan struct{})
		f := newTarget("a", clk, func(ctx context.Context, n int) error {
			if n == 2 {
				started <- struct{}{}
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			return nil
		})
		h := start(t, clk, set, f)
		recv(t, h.s.Ready(), "Ready")
		h.idle()
		clk.Advance(hb)
		recv(t, started, "the second probe")
		h.s.Trigger("a")
		close(release)
		h.idle()
		h.wantProbes(f, 2, "after Trigger during a probe")
		if _, next := h.status("a"); !next.Equal(fakeEpoch.Add(2 * hb)) {
			t.Fatalf("Status next = %v, want %v", next, fakeEpoch.Add(2*hb))
		}
	})
}

// ---- 7. ordering and OnChange outside the lock ---------------------------------

func TestOnChangeOrderAndReentrancy(t *testing.T) {
	clk := newFakeClock()
	const hb, step = 100 * time.Millisecond, 10 * time.Millisecond
	flap := func(_ context.Context, n int) error { // ok, fail, ok, fail, ...
		if n%2 == 0 {
			return errProbe
		}
		return nil
	}
	a := newTarget("a", clk, flap)
	b := newTarget("b", clk, flap)

	var sp atomic.Pointer[Scheduler]
	published := make(chan struct{})
	rec := &recorder{}
	var busy [2]atomic.Int32
	var overlaps atomic.Int32
	var statusBad atomic.Value // string
	onChange := func(e Event) {
		<-published
		i := 0
		if e.Target == "b" {
			i = 1
		}
		if busy[i].Add(1) != 1 {
			overlaps.Add(1)
		}
		defer busy[i].Add(-1)
		s := sp.Load()
		// Both would deadlock if OnChange ran under the scheduler's lock.
		// Status agrees with the event it is delivered with: a reader that
		// saw the event (or the target's new state) sees its count.
		if failed, _, ok := s.Status(e.Target); !ok {
			statusBad.Store("Status(" + e.Target + ") ok = false")
		} else if failed != e.FailedProbes {
			statusBad.Store(fmt.Sprintf("Status(%s) during its event = %d failed probes, event says %d", e.Target, failed, e.FailedProbes))
		}
		s.Trigger(e.Target)
		other := "a"
		if e.Target == "a" {
			other = "b"
		}
		s.Status(other)
		s.Trigger(other)
		rec.OnChange(e)
	}
	h := start(t, clk, Settings{Heartbeat: hb, Backoff: []time.Duration{hb}, OnChange: onChange}, a, b)
	sp.Store(h.s)
	close(published)
	recv(t, h.s.Ready(), "Ready (a deadlock in OnChange would block it)")
	for range 100 {
		h.advance(step)
	}
	if v := statusBad.Load(); v != nil {
		t.Fatal(v)
	}
	if n := overlaps.Load(); n != 0 {
		t.Fatalf("OnChange ran concurrently for the same target %d times, want 0", n)
	}
	for _, f := range []*fakeTarget{a, b} {
		evs := rec.of(f.name)
		probes := f.Probes()
		if probes < 10 {
			t.Fatalf("%s probed %d times in 1s, want >= 10", f.name, probes)
		}
		// Every probe flips the state, so every probe is one event, in order.
		if len(evs) != probes {
			t.Fatalf("%s: got %d events, want %d (one per probe)", f.name, len(evs), probes)
		}
		times := f.Times()
		for i, e := range evs {
			want := Event{Target: f.name, Up: i%2 == 0, At: times[i]}
			if !want.Up {
				want.Err, want.FailedProbes = errProbe, 1
			}
			wantEvent(t, e, want)
		}
	}
}

// ---- 8. Close ------------------------------------------------------------------

func TestClose(t *testing.T) {
	t.Run("CancelsInFlightProbe", func(t *testing.T) {
		baseline := runtime.NumGoroutine()
		clk := newFakeClock()
		started := make(chan struct{}, 1)
		var returned atomic.Bool
		f := newTarget("a", clk, func(ctx context.Context, _ int) error {
			started <- struct{}{}
			<-ctx.Done()
			returned.Store(true)
			return ctx.Err()
		})
		other := newTarget("b", clk, alwaysOK)
		h := start(t, clk, Settings{}, f, other)
		recv(t, started, "the blocking probe")
		waitFor(t, "b's probe", func() bool { return len(h.rec.of("b")) == 1 })

		closed := make(chan struct{})
		go func() { h.s.Close(); close(closed) }()
		recv(t, closed, "Close to return (probe blocked on ctx.Done)")
		if !returned.Load() {
			t.Fatal("Close returned before the in-flight probe did")
		}
		if n := f.SetCalls(); n != 0 {
			t.Fatalf("a canceled probe called SetUp/SetDown %d times, want 0", n)
		}
		if got := h.rec.of("a"); len(got) != 0 {
			t.Fatalf("got events %+v for a canceled probe, want none", got)
		}
		h.s.Close() // idempotent
		h.s.Close()
		waitGoroutines(t, baseline)
	})

	t.Run("NoEventAfterClose", func(t *testing.T) {
		baseline := runtime.NumGoroutine()
		clk := newFakeClock()
		started, release := make(chan struct{}, 1), make(chan struct{})
		// A probe that succeeds even though it was canceled.
		stubborn := newTarget("stubborn", clk, func(ctx context.Context, _ int) error {
			started <- struct{}{}
			<-ctx.Done()
			<-release
			return nil
		})
		steady := newTarget("steady", clk, alwaysOK)
		h := start(t, clk, Settings{Heartbeat: time.Second}, stubborn, steady)
		var once sync.Once
		unblock := func() { once.Do(func() { close(release) }) }
		t.Cleanup(unblock)
		recv(t, started, "the stubborn probe")
		waitFor(t, "steady's UP", func() bool { return len(h.rec.of("steady")) == 1 })

		closed := make(chan struct{})
		go func() { h.s.Close(); close(closed) }()
		time.Sleep(5 * time.Millisecond) // let Close cancel; the probe ignores it
		select {
		case <-closed:
			t.Fatal("Close returned while a probe was still running")
		default:
		}
		unblock()
		recv(t, closed, "Close")
		if got := h.rec.of("stubborn"); len(got) != 0 {
			t.Fatalf("got events %+v for a probe that finished after Close, want none", got)
		}
		if n := stubborn.SetCalls(); n != 0 {
			t.Fatalf("probe finished after Close called SetUp/SetDown %d times, want 0", n)
		}
		events, probes := len(h.rec.all()), steady.Probes()
		clk.Advance(time.Hour)
		h.s.Trigger("steady")
		time.Sleep(2 * time.Millisecond)
		if got := len(h.rec.all()); got != events {
			t.Fatalf("got %d events after Close, want %d", got, events)
		}
		if got := steady.Probes(); got != probes {
			t.Fatalf("steady probed %d times after Close, want %d", got, probes)
		}
		if _, _, ok := h.s.Status("steady"); !ok {
			t.Fatal("Status after Close: ok = false, want true")
		}
		waitGoroutines(t, baseline)
	})

	t.Run("WaitsForOnChange", func(t *testing.T) {
		baseline := runtime.NumGoroutine()
		clk := newFakeClock()
		inside, release := make(chan struct{}), make(chan struct{})
		var delivered atomic.Bool
		onChange := func(Event) {
			close(inside)
			<-release
			delivered.Store(true)
		}
		h := start(t, clk, Settings{OnChange: onChange}, newTarget("a", clk, alwaysOK))
		recv(t, inside, "OnChange")
		closed := make(chan struct{})
		go func() { h.s.Close(); close(closed) }()
		time.Sleep(5 * time.Millisecond)
		select {
		case <-closed:
			t.Fatal("Close returned while OnChange was running")
		default:
		}
		close(release)
		recv(t, closed, "Close")
		if !delivered.Load() {
			t.Fatal("Close returned before OnChange did")
		}
		waitGoroutines(t, baseline)
	})

	t.Run("ConcurrentAndRepeated", func(t *testing.T) {
		baseline := runtime.NumGoroutine()
		clk := newFakeClock()
		targets := make([]*fakeTarget, 5)
		for i := range targets {
			targets[i] = newTarget(fmt.Sprint("t", i), clk, alwaysOK)
		}
		h := start(t, clk, Settings{}, targets...)
		recv(t, h.s.Ready(), "Ready")
		h.advance(500 * time.Millisecond)
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(h.s.Close)
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		recv(t, done, "4 concurrent Close calls")
		h.s.Close()
		waitGoroutines(t, baseline)
	})

	t.Run("BeforeFirstProbe", func(t *testing.T) {
		baseline := runtime.NumGoroutine()
		clk := newFakeClock()
		s := New([]Target{newTarget("a", clk, alwaysOK)}, Settings{Clock: clk})
		s.Close()
		s.Close()
		waitGoroutines(t, baseline)
	})
}

// ---- 9. zero Settings ----------------------------------------------------------

func TestZeroSettingsDefaults(t *testing.T) {
	clk := newFakeClock()
	up := newTarget("up", clk, alwaysOK)
	down := newTarget("down", clk, results(nil, errProbe))
	// Only the clock is set: OnChange nil, Heartbeat and Backoff defaults.
	s := New([]Target{up, down}, Settings{Clock: clk})
	t.Cleanup(func() { closeWithin(t, s, 5*time.Second) })
	h := &harness{t: t, clk: clk, s: s, rec: &recorder{}}
	recv(t, s.Ready(), "Ready")

	if !down.IsUp() {
		t.Fatal("down is not UP after its first probe")
	}
	const hb = 500 * time.Millisecond
	h.expectNextProbe(up, fakeEpoch, hb, hb)
	h.wantProbes(down, 2, "at the default heartbeat")
	last := fakeEpoch.Add(hb)
	if down.IsUp() {
		t.Fatal("down is UP after a failed probe")
	}
	if len(DefaultBackoff) != 3 {
		t.Fatalf("DefaultBackoff = %v, want 3 delays", DefaultBackoff)
	}
	for i, d := range []time.Duration{500 * time.Millisecond, time.Second, 1500 * time.Millisecond, 1500 * time.Millisecond} {
		if failed, _ := h.status("down"); failed != i+1 {
			t.Fatalf("Status failedProbes = %d, want %d", failed, i+1)
		}
		last = h.expectJittered(down, last, d)
	}
}

func TestZeroSettingsRealClock(t *testing.T) {
	s := New(nil, Settings{})
	recv(t, s.Ready(), "Ready")
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	recv(t, done, "Close")
}

// ---- 10. many targets --------------------------------------------------------

func TestManyTargetsNoStarvation(t *testing.T) {
	clk := newFakeClock()
	const (
		hb    = 100 * time.Millisecond
		step  = 10 * time.Millisecond
		total = 3 * time.Second
	)
	backoff := []time.Duration{50 * time.Millisecond, 200 * time.Millisecond}
	flap := func(_ context.Context, n int) error {
		if n%2 == 0 {
			return errProbe
		}
		return nil
	}
	targets := make([]*fakeTarget, 50)
	for i := range targets {
		s := script(alwaysOK)
		switch i % 3 {
		case 1:
			s = alwaysFail
		case 2:
			s = flap
		}
		targets[i] = newTarget(fmt.Sprintf("n%02d", i), clk, s)
	}
	h := start(t, clk, Settings{Heartbeat: hb, Backoff: backoff}, targets...)
	recv(t, h.s.Ready(), "Ready")
	for range total / step {
		h.advance(step)
	}
	end := fakeEpoch.Add(total)

	for i, f := range targets {
		times, outs := f.Times(), f.Outcomes()
		if len(times) != len(outs) {
			t.Fatalf("%s: %d probes started, %d finished", f.name, len(times), len(outs))
		}
		failures := 0
		for k := 1; k < len(times); k++ {
			gap := times[k].Sub(times[k-1])
			if outs[k-1] == nil {
				failures = 0
				if gap != hb {
					t.Fatalf("%s: probe %d came %v after a successful one, want exactly %v", f.name, k+1, gap, hb)
				}
				continue
			}
			failures++
			lo, hi := jitterBounds(backoff[min(failures, len(backoff))-1])
			if gap < lo || gap > hi+step {
				t.Fatalf("%s: probe %d came %v after failure %d, want within [%v, %v]", f.name, k+1, gap, failures, lo, hi+step)
			}
		}
		// No starvation: probed recently, by the longest possible gap.
		if last := times[len(times)-1]; end.Sub(last) > backoff[1]+backoff[1]/10+step {
			t.Fatalf("%s last probed at %v, %v before the end", f.name, last.Sub(fakeEpoch), end.Sub(last))
		}
		evs := h.rec.of(f.name)
		switch i % 3 {
		case 0:
			h.wantProbes(f, int(total/hb)+1, "always-up target")
			if len(evs) != 1 {
				t.Fatalf("%s: got %d events, want 1", f.name, len(evs))
			}
		case 1:
			if len(evs) != 0 {
				t.Fatalf("%s: got %d events, want 0", f.name, len(evs))
			}
		case 2:
			if len(evs) != len(times) {
				t.Fatalf("%s: got %d events, want %d (one per probe)", f.name, len(evs), len(times))
			}
		}
	}
}

// ---- backoff jitter --------------------------------------------------------------

func TestBackoffJitter(t *testing.T) {
	backoff := []time.Duration{100 * time.Millisecond, time.Second, 10 * time.Second}
	s := New(nil, Settings{Backoff: backoff, Clock: newFakeClock()})
	defer s.Close()
	for failures := 1; failures <= 6; failures++ {
		want := backoff[min(failures, len(backoff))-1]
		lo, hi := jitterBounds(want)
		gotMin, gotMax := hi, lo
		for range 1000 {
			d := s.backoff(failures)
			if d < lo || d > hi {
				t.Fatalf("backoff(%d) = %v, want within [%v, %v]", failures, d, lo, hi)
			}
			gotMin, gotMax = min(gotMin, d), max(gotMax, d)
		}
		// The jitter is real: 1000 draws spread over most of the ±10 %.
		if gotMin > want-want/20 || gotMax < want+want/20 {
			t.Fatalf("backoff(%d) over 1000 draws spans [%v, %v], want wider than [%v, %v]",
				failures, gotMin, gotMax, want-want/20, want+want/20)
		}
	}
}

// heldBack is a probe error that knows when the target may pass.
type heldBack struct{ left time.Duration }

func (h heldBack) Error() string             { return fmt.Sprintf("held back %v more", h.left) }
func (h heldBack) RetryAfter() time.Duration { return h.left }

// A failed probe whose error says when the target may pass (a node held
// back after a restart) is followed by a probe then, not after the
// backoff's longer delay; a RetryAfter longer than the backoff changes
// nothing.
func TestRetryAfterComesBeforeTheBackoff(t *testing.T) {
	clk := newFakeClock()
	backoff := []time.Duration{2 * time.Second}
	held := fmt.Errorf("probe: %w", heldBack{left: 300 * time.Millisecond})
	f := newTarget("a", clk, results(held, heldBack{left: 5 * time.Second}, nil))
	h := start(t, clk, Settings{Backoff: backoff}, f)
	recv(t, h.s.Ready(), "Ready")
	last := h.expectNextProbe(f, fakeEpoch, 300*time.Millisecond+retryMargin, 300*time.Millisecond+retryMargin)
	h.expectJittered(f, last, 2*time.Second)
	if !f.IsUp() {
		t.Fatal("target DOWN after its third probe passed")
	}
}
