package inventory

import (
	"context"
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
