package node

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
)

type breaker = gobreaker.TwoStepCircuitBreaker[struct{}]

// guard is one generation of a node's breaker: the gobreaker itself and the
// two flags the lock-free fast path reads. All of a breaker's state lives in
// its guard. [Node.SetUp] swaps in a fresh guard; a command admitted under
// an older guard reports its outcome to that guard only, and an older
// breaker's state changes write only their own guard, so a retired breaker
// can never open (or close) the current one. This is gobreaker's own
// generation rule, one level up.
type guard struct {
	cb        *breaker
	openUntil atomic.Int64 // unix nanos the breaker is open until; 0 = not open
	// failing is set while a failure was reported and the breaker has not
	// seen a success since: admissions then go through the breaker. mu
	// makes "report a failure, set failing" and "see a closed breaker with
	// no failure, clear failing" atomic with respect to each other.
	mu      sync.Mutex
	failing atomic.Bool
}

func (n *Node) newGuard() *guard {
	g := &guard{}
	failures := uint32(n.opts.BreakerFailures)
	g.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        n.opts.Name,
		Timeout:     n.opts.BreakerOpenTimeout,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures },
		IsExcluded:  func(err error) bool { return errors.Is(err, errExcluded) },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			switch to {
			case gobreaker.StateOpen:
				g.openUntil.Store(time.Now().Add(n.opts.BreakerOpenTimeout).UnixNano())
			case gobreaker.StateClosed:
				g.openUntil.Store(0)
			}
			if n.guard.Load() == g {
				n.log.Warn("breaker state changed", "from", from.String(), "to", to.String())
			}
		},
	})
	return g
}

// fast reports whether a command may skip the breaker: it is closed and no
// failure is pending, so a success would change nothing in it.
func (g *guard) fast() bool { return g.openUntil.Load() == 0 && !g.failing.Load() }

// usable reports whether the breaker is not open now: closed, half-open,
// or open past its timeout. A command that takes no trial (a replica
// read, admitRead) may go then.
func (g *guard) usable() bool {
	until := g.openUntil.Load()
	return until == 0 || time.Now().UnixNano() >= until
}

// admits reports whether the breaker admits a command of the node's
// client now: closed, open past its timeout (so the trial can happen), or
// half-open with no trial counting against it (while the trial is in
// flight every other command is refused). It agrees with gobreaker's own
// admission: a half-open breaker (MaxRequests 0, so one trial) admits
// while Requests - TotalExclusions < 1, so a trial that ended excluded
// (its caller gave up, the pool timed out or was closed) frees the slot
// for the next one. Counts are cleared on every state change, so these
// are the current half-open period's. The closed case reads one atomic.
func (g *guard) admits() bool {
	if g.openUntil.Load() == 0 {
		return true
	}
	if !g.usable() {
		return false
	}
	if g.cb.State() != gobreaker.StateHalfOpen {
		return true
	}
	c := g.cb.Counts()
	return c.Requests <= c.TotalExclusions
}

// fail reports a node failure of a command admitted on the fast path (done
// is nil) or through the breaker.
func (g *guard) fail(done func(error)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.failing.Store(true)
	if done != nil {
		done(errFailure)
		return
	}
	if d, err := g.cb.Allow(); err == nil {
		d(errFailure)
	}
}

// succeed reports a command the node answered, admitted through the
// breaker, and returns to the fast path once the breaker is closed with no
// failure counted.
func (g *guard) succeed(done func(error)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	done(nil)
	if g.cb.State() == gobreaker.StateClosed && g.cb.Counts().ConsecutiveFailures == 0 {
		g.failing.Store(false)
	}
}
