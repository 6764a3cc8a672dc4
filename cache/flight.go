package cache

import (
	"context"
	"errors"
	"sync"
)

// flightGroup runs one function per key at a time; concurrent callers of
// the same key wait for it and share its result (in-process single
// flight, as golang.org/x/sync/singleflight, without the dependency).
//
// The function runs under the first caller's context. A caller that
// joined waits no longer than its own context, and when the run ended
// because the first caller's context did, a caller whose own context is
// still live runs it again (as the first caller of a new run) rather than
// get someone else's cancellation.
//
// Which callers get the run's answer (a value, or ErrNotFound): a Get
// started after a Set or Invalidate returned must not get what was read
// before that write, and a caller may join the run at any time until it
// ends, also after the read that decided its answer (its own read of
// Redis missed because the Invalidate had deleted the key). So the run's
// first caller, whose Get started before everything the run read, always
// gets the answer; a caller that joined gets it only if the run confirmed
// it after the join (flightRun.confirm, with a mark taken before the
// confirming step was sent): the loader was called, the copy was read,
// or a store compared with the version the fill read was accepted on a
// copy's node, after it joined. Any write that returned before the join
// was then seen by that step (a loader reads the row after it, a read
// misses the copy it deleted, a store is refused by its version). The
// joined callers the answer was not confirmed for are handed together to
// a next run, joined before anything it does (do), so it confirms its
// answer for them all. Errors that are no answer (the loader's failure,
// ErrThrottled, ErrFilling, an unavailable node) are every caller's.
type flightGroup struct {
	mu    sync.Mutex
	calls map[string]*flightCall // guarded by mu
}

type flightCall struct {
	done      chan struct{}
	val       []byte
	err       error
	canceled  bool        // the run's context was done when it returned
	joined    int         // callers that joined the run so far; guarded by flightGroup.mu
	confirmed int         // the answer is confirmed for joiners 1..confirmed; guarded by flightGroup.mu
	led       bool        // a caller runs it; guarded by flightGroup.mu
	next      *flightCall // the run its unconfirmed joiners were handed to, if any
}

// flightRun is what a run's function is given to say for which of the
// callers that joined it its answer is confirmed (flightGroup's doc).
type flightRun struct {
	g *flightGroup
	c *flightCall // nil: a run without joiners (no flight)
}

// mark returns how many callers have joined the run so far. Take it just
// before sending the step (loader call, read, compared store) that may
// confirm the answer, and pass it to confirm once the step did.
func (r flightRun) mark() int {
	if r.c == nil {
		return 0
	}
	r.g.mu.Lock()
	defer r.g.mu.Unlock()
	return r.c.joined
}

// confirm says the run's answer is confirmed for the first n callers that
// joined it (n a mark taken before the confirming step was sent).
func (r flightRun) confirm(n int) {
	if r.c == nil {
		return
	}
	r.g.mu.Lock()
	defer r.g.mu.Unlock()
	r.c.confirmed = max(r.c.confirmed, n)
}

var errFillPanicked = errors.New("cache: the fill panicked")

// isAnswer reports whether a run's result (val, err) answers the key's
// state: a value, or ErrNotFound (flightGroup's doc).
func isAnswer(err error) bool { return err == nil || errors.Is(err, ErrNotFound) }

// do runs fn for key as a new run, or joins the key's run and shares its
// result (flightGroup's doc). The joiners a run's answer was not
// confirmed for are handed, when it ends, to a next run of their own,
// already joined (so its loader call or read confirms it for them all,
// as one run): the first of them still waiting runs it with its own fn.
func (g *flightGroup) do(ctx context.Context, key string, fn func(context.Context, flightRun) ([]byte, error)) ([]byte, error) {
	for {
		g.mu.Lock()
		if g.calls == nil {
			g.calls = map[string]*flightCall{}
		}
		c, ok := g.calls[key]
		if !ok {
			c = &flightCall{done: make(chan struct{}), err: errFillPanicked}
			g.calls[key] = c
		}
		if !c.led && ctx.Err() == nil { // new, or handed over with none of its joiners left to run it
			c.led = true
			g.mu.Unlock()
			return g.lead(ctx, key, c, fn)
		}
		c.joined++
		me := c.joined
		g.mu.Unlock()
		for {
			select {
			case <-c.done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			// every write to c happened before done was closed
			unconfirmed := isAnswer(c.err) && me > c.confirmed
			if !unconfirmed || c.next == nil || ctx.Err() != nil {
				break
			}
			n := c.next // handed over: already joined to it, before anything it reads
			me -= c.confirmed
			c = n
			g.mu.Lock()
			if !n.led {
				n.led = true
				g.mu.Unlock()
				return g.lead(ctx, key, n, fn)
			}
			g.mu.Unlock()
		}
		unconfirmed := isAnswer(c.err) && me > c.confirmed
		if (c.canceled || unconfirmed) && ctx.Err() == nil {
			continue
		}
		if unconfirmed {
			return nil, ctx.Err()
		}
		return c.val, c.err
	}
}

// lead runs fn as c's first caller, then ends c: its joiners the answer
// was not confirmed for are handed to a next run (do), unless c's
// context ended (they then run it again themselves, as before).
func (g *flightGroup) lead(ctx context.Context, key string, c *flightCall, fn func(context.Context, flightRun) ([]byte, error)) ([]byte, error) {
	defer func() {
		g.mu.Lock()
		delete(g.calls, key)
		if left := c.joined - c.confirmed; left > 0 && isAnswer(c.err) && !c.canceled {
			c.next = &flightCall{done: make(chan struct{}), err: errFillPanicked, joined: left}
			g.calls[key] = c.next
		}
		g.mu.Unlock()
		close(c.done)
	}()
	c.val, c.err = fn(ctx, flightRun{g: g, c: c})
	c.canceled = ctx.Err() != nil
	return c.val, c.err
}
