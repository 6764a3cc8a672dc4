package cache

import "context"

// LoadUncached is loadUncached, for the tests of package cache_test: what
// a FallbackToLoader Get runs for a key none of whose copies is usable.
func (c *Cache) LoadUncached(ctx context.Context, key string, loader Loader) ([]byte, error) {
	return c.loadUncached(ctx, key, loader, flightRun{})
}

// InvalidateL1 is invalidateL1, for the tests of package cache_test: the
// publish half of a Set or Invalidate, apart from its writes' errors.
func (c *Cache) InvalidateL1(ctx context.Context, key string) error {
	return c.invalidateL1(ctx, key)
}

// FlightJoined is how many callers have joined the in-process run (fill
// or uncached load) of key under way, for the tests of package
// cache_test: 0 when none is under way.
func (c *Cache) FlightJoined(key string) int {
	c.flight.mu.Lock()
	defer c.flight.mu.Unlock()
	if r, ok := c.flight.calls[key]; ok {
		return r.joined
	}
	return 0
}
