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
// A run that returns errFillRaced (a fill whose loader read the row before
// a Set or Invalidate that came in while it ran: its value was not stored)
// gives its value to its own caller, whose Get started before that write,
// but not to the callers that joined it: one of them may have started
// after the write returned (its read of Redis missed because the
// Invalidate had deleted the key) and must not get what the loader read
// before it. They run it again, as a new run.
type flightGroup struct {
	mu    sync.Mutex
	calls map[string]*flightCall // guarded by mu
}

type flightCall struct {
	done     chan struct{}
	val      []byte
	err      error
	canceled bool // the run's context was done when it returned
	raced    bool // the run returned errFillRaced: its value is its first caller's only
}

// errFillRaced is what a fill returns, with its value, when a write came
// in between its read of the versions and its store (flightGroup.do).
var errFillRaced = errors.New("cache: a write raced the fill")

var errFillPanicked = errors.New("cache: the fill panicked")

func (g *flightGroup) do(ctx context.Context, key string, fn func(context.Context) ([]byte, error)) ([]byte, error) {
	for {
		g.mu.Lock()
		if g.calls == nil {
			g.calls = map[string]*flightCall{}
		}
		if c, ok := g.calls[key]; ok {
			g.mu.Unlock()
			select {
			case <-c.done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if (c.canceled || c.raced) && ctx.Err() == nil {
				continue
			}
			if c.raced {
				return nil, ctx.Err()
			}
			return c.val, c.err
		}
		c := &flightCall{done: make(chan struct{}), err: errFillPanicked}
		g.calls[key] = c
		g.mu.Unlock()
		defer func() {
			g.mu.Lock()
			delete(g.calls, key)
			g.mu.Unlock()
			close(c.done)
		}()
		c.val, c.err = fn(ctx)
		c.canceled = ctx.Err() != nil
		if c.err == errFillRaced {
			c.raced, c.err = true, nil
		}
		return c.val, c.err
	}
}
