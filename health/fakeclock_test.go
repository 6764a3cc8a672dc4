package health

import (
	"sync"
	"testing"
	"time"
)

// fakeClock is a manual [Clock]: time only moves when the test calls
// Advance or AdvanceTo, and a timer fires (its channel receives the current
// fake time) as soon as the fake time reaches its deadline.
//
// Besides Now and NewTimer it lets a test see what the scheduler loop is
// doing with timers: Active counts timers that are armed (created, not yet
// fired, not stopped), Created counts NewTimer calls, and BlockUntil waits,
// without polling, until at least n timers are armed.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	armed   map[*fakeTimer]struct{}
	created int
	changed chan struct{} // closed and replaced whenever the timer set changes
}

// fakeEpoch is where every fake clock starts; far from the zero time so a
// zero time.Time in a result is never mistaken for a real one.
var fakeEpoch = time.Date(2025, 3, 14, 15, 9, 26, 0, time.UTC)

func newFakeClock() *fakeClock {
	return &fakeClock{now: fakeEpoch, armed: make(map[*fakeTimer]struct{}), changed: make(chan struct{})}
}

var _ Clock = (*fakeClock)(nil)

// Now returns the fake time.
func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer arms a timer firing at Now()+d; d <= 0 fires at once.
func (c *fakeClock) NewTimer(d time.Duration) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, ch: make(chan time.Time, 1), deadline: c.now.Add(d)}
	c.created++
	if d <= 0 {
		t.ch <- c.now
	} else {
		c.armed[t] = struct{}{}
	}
	c.notifyLocked()
	return t
}

// Advance moves the fake time forward by d and fires every timer due.
func (c *fakeClock) Advance(d time.Duration) {
	if d < 0 {
		panic("fakeClock: negative Advance")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advanceLocked(c.now.Add(d))
}

// AdvanceTo moves the fake time to at (not backwards) and fires every timer due.
func (c *fakeClock) AdvanceTo(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if at.Before(c.now) {
		panic("fakeClock: AdvanceTo into the past")
	}
	c.advanceLocked(at)
}

func (c *fakeClock) advanceLocked(at time.Time) {
	c.now = at
	for t := range c.armed {
		if !t.deadline.After(at) {
			delete(c.armed, t)
			t.ch <- at // buffered(1) and sent at most once: never blocks
		}
	}
	c.notifyLocked()
}

// Active returns how many timers are armed.
func (c *fakeClock) Active() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.armed)
}

// Created returns how many timers NewTimer has made.
func (c *fakeClock) Created() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.created
}

// BlockUntil waits until at least n timers are armed (as clockwork's
// BlockUntil): the scheduler loop is asleep. It fails the test after 5s.
func (c *fakeClock) BlockUntil(tb testing.TB, n int) {
	tb.Helper()
	deadline := time.After(5 * time.Second)
	for {
		c.mu.Lock()
		armed, changed := len(c.armed), c.changed
		c.mu.Unlock()
		if armed >= n {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			tb.Fatalf("fakeClock.BlockUntil(%d): got %d armed timers after 5s", n, armed)
		}
	}
}

func (c *fakeClock) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

type fakeTimer struct {
	c        *fakeClock
	ch       chan time.Time
	deadline time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

// Stop disarms the timer; it reports whether the timer was armed.
func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	_, armed := t.c.armed[t]
	delete(t.c.armed, t)
	t.c.notifyLocked()
	return armed
}

// TestFakeClock checks the test clock itself, so a scheduler test failure
// cannot come from it.
func TestFakeClock(t *testing.T) {
	c := newFakeClock()
	if got := c.Now(); !got.Equal(fakeEpoch) {
		t.Fatalf("Now() = %v, want %v", got, fakeEpoch)
	}
	a := c.NewTimer(time.Second)
	b := c.NewTimer(2 * time.Second)
	if got, want := c.Active(), 2; got != want {
		t.Fatalf("Active() = %d, want %d", got, want)
	}
	c.BlockUntil(t, 2)
	c.Advance(time.Second - 1)
	select {
	case <-a.C():
		t.Fatal("timer fired 1ns before its deadline")
	default:
	}
	c.Advance(1)
	select {
	case at := <-a.C():
		if want := fakeEpoch.Add(time.Second); !at.Equal(want) {
			t.Fatalf("fired at %v, want %v", at, want)
		}
	default:
		t.Fatal("timer did not fire at its deadline")
	}
	if a.Stop() {
		t.Fatal("Stop() of a fired timer = true, want false")
	}
	if !b.Stop() {
		t.Fatal("Stop() of an armed timer = false, want true")
	}
	c.Advance(time.Hour)
	select {
	case <-b.C():
		t.Fatal("stopped timer fired")
	default:
	}
	z := c.NewTimer(0)
	select {
	case <-z.C():
	default:
		t.Fatal("NewTimer(0) did not fire at once")
	}
	if got, want := c.Created(), 3; got != want {
		t.Fatalf("Created() = %d, want %d", got, want)
	}
	if got := c.Active(); got != 0 {
		t.Fatalf("Active() = %d, want 0", got)
	}
}
