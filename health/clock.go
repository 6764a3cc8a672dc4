package health

import "time"

// Clock is the scheduler's source of time. Tests inject a manual clock;
// the zero [Settings] uses the real one.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that fires once after d.
	NewTimer(d time.Duration) Timer
}

// Timer is a stoppable one-shot timer, as time.Timer.
type Timer interface {
	// C returns the channel the fire time is sent on.
	C() <-chan time.Time
	// Stop stops the timer; it reports whether the timer was active.
	Stop() bool
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time { return t.t.C }
func (t realTimer) Stop() bool          { return t.t.Stop() }
