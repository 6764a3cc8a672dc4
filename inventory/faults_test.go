package inventory

import (
	"context"
	"sync/atomic"
)

// crashPoint is the tests' Faults: it stops an actor at one crash point
// (none while point holds nil) and passes every script call through.
type crashPoint struct {
	point atomic.Pointer[string]
}

func (c *crashPoint) Call(_ context.Context, _ ScriptCall, send func() (any, error)) (any, error) {
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
