package node

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
)

// admits agrees with gobreaker's own admission through a half-open
// period: true before the trial, false while it is in flight, true again
// once it ended excluded (gobreaker admits while Requests -
// TotalExclusions < 1), and closed after a trial that succeeded. Found by
// a review: admits required Requests == 0, so after an excluded trial it
// said false while gobreaker would admit, and no trial was ever sent.
func TestAdmitsAgreesWithGobreakerAfterExcludedTrial(t *testing.T) {
	n := &Node{opts: Options{Name: "n1", BreakerFailures: 1, BreakerOpenTimeout: 20 * time.Millisecond},
		log: slog.New(slog.DiscardHandler)}
	g := n.newGuard()
	n.guard.Store(g)
	// check compares admits with whether gobreaker admits a request now,
	// and gives the request back (as excluded) if it did.
	check := func(step string, want bool) {
		t.Helper()
		got := g.admits()
		done, err := g.cb.Allow()
		if err == nil {
			done(errExcluded)
		} else if !errors.Is(err, gobreaker.ErrTooManyRequests) && !errors.Is(err, gobreaker.ErrOpenState) {
			t.Fatalf("%s: Allow: %v", step, err)
		}
		if got != want || (err == nil) != want {
			t.Fatalf("%s: admits() = %v, gobreaker admits = %v (%v), want both %v (breaker %s)",
				step, got, err == nil, err, want, g.cb.State())
		}
	}
	g.fail(nil) // one failure: the breaker opens
	if s := g.cb.State(); s != gobreaker.StateOpen {
		t.Fatalf("breaker %s after a failure, want open", s)
	}
	if g.admits() {
		t.Fatal("admits() = true while the breaker is open within its timeout")
	}
	time.Sleep(30 * time.Millisecond) // past the open timeout: half-open
	check("half-open, no trial yet", true)
	trial, err := g.cb.Allow()
	if err != nil {
		t.Fatalf("trial: %v", err)
	}
	check("trial in flight", false)
	trial(errExcluded) // its caller gave up
	check("trial ended excluded", true)
	check("a second excluded trial", true)
	next, err := g.cb.Allow()
	if err != nil {
		t.Fatalf("next trial: %v", err)
	}
	check("next trial in flight", false)
	g.succeed(next)
	if s := g.cb.State(); s != gobreaker.StateClosed {
		t.Fatalf("breaker %s after a successful trial, want closed", s)
	}
	if !g.admits() {
		t.Fatal("admits() = false with the breaker closed")
	}
}
