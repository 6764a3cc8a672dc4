package health

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// RetryAfterError's contract: the next probe is due when the target may
// pass, whenever that comes before the backoff's delay. A RetryAfter of
// zero or less says the target may pass already: that is before any
// backoff delay, so the next probe comes at once (just retryMargin
// later), not after the backoff's full delay.
func TestReviewRetryAfterAlreadyPassed(t *testing.T) {
	for _, left := range []time.Duration{0, -retryMargin / 2, -retryMargin, -time.Second, math.MinInt64} {
		t.Run(fmt.Sprint(left), func(t *testing.T) {
			clk := newFakeClock()
			f := newTarget("a", clk, results(heldBack{left: left}, nil))
			h := start(t, clk, Settings{Backoff: []time.Duration{2 * time.Second}}, f)
			recv(t, h.s.Ready(), "Ready")
			h.expectNextProbe(f, fakeEpoch, 0, retryMargin)
			if !f.IsUp() {
				t.Fatal("target DOWN after its second probe passed")
			}
		})
	}
}

// A RetryAfter so long that adding retryMargin overflows is still longer
// than the backoff: the backoff's delay applies.
func TestReviewRetryAfterHuge(t *testing.T) {
	clk := newFakeClock()
	f := newTarget("a", clk, results(heldBack{left: math.MaxInt64}, nil))
	h := start(t, clk, Settings{Backoff: []time.Duration{2 * time.Second}}, f)
	recv(t, h.s.Ready(), "Ready")
	h.expectJittered(f, fakeEpoch, 2*time.Second)
}
