package inventory

import (
	"context"
	"fmt"
	"sync/atomic"
)

// crashPoint is the tests' Faults: it stops an actor at one crash point
// (none while point holds nil) and passes every script call through, or
// to call while it holds one.
type crashPoint struct {
	point atomic.Pointer[string]
	call  atomic.Pointer[callHook]
}

// callHook runs one script call in Faults.Call's place (its rules).
type callHook func(ctx context.Context, c ScriptCall, send func() (any, error)) (any, error)

func (c *crashPoint) Call(ctx context.Context, sc ScriptCall, send func() (any, error)) (any, error) {
	if h := c.call.Load(); h != nil {
		return (*h)(ctx, sc, send)
	}
	return send()
}

func (c *crashPoint) Crash(_ context.Context, point string) bool {
	p := c.point.Load()
	return p != nil && *p == point
}

// at stops actors at point.
func crashAtPoint(point string) *crashPoint {
	c := &crashPoint{}
	c.point.Store(&point)
	return c
}

// landsAsCallerGivesUp is a callHook for the first order-decide call
// whose op is op: it lets the call land, then cut()s its caller's context
// before the reply comes back, and loses the reply when the call's own
// context is done by then (a call under the caller's context; one run
// detached keeps its reply). decided reports whether it struck.
func landsAsCallerGivesUp(op orderOp, cut func()) (h callHook, decided *atomic.Bool) {
	decided = &atomic.Bool{}
	h = func(ctx context.Context, c ScriptCall, send func() (any, error)) (any, error) {
		if c.Script != orderDecideScript.name || len(c.Args) == 0 || c.Args[0] != string(op) || !decided.CompareAndSwap(false, true) {
			return send()
		}
		v, err := send() // the decision lands
		cut()            // its caller gives up before the reply comes back
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w (the reply not read: outcome unknown)", ctx.Err())
		}
		return v, err
	}
	return h, decided
}
