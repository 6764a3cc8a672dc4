package cache

import "context"

// LoadUncached is loadUncached, for the tests of package cache_test: what
// a FallbackToLoader Get runs for a key none of whose copies is usable.
func (c *Cache) LoadUncached(ctx context.Context, key string, loader Loader) ([]byte, error) {
	return c.loadUncached(ctx, key, loader)
}

// InvalidateL1 is invalidateL1, for the tests of package cache_test: the
// publish half of a Set or Invalidate, apart from its writes' errors.
func (c *Cache) InvalidateL1(ctx context.Context, key string) error {
	return c.invalidateL1(ctx, key)
}
