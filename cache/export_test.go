package cache

import "context"

// LoadUncached is loadUncached, for the tests of package cache_test: what
// a FallbackToLoader Get runs for a key none of whose copies is usable.
func (c *Cache) LoadUncached(ctx context.Context, key string, loader Loader) ([]byte, error) {
	return c.loadUncached(ctx, key, loader)
}
