package cache_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/shardis/shardis/cache"
	"github.com/shardis/shardis/router"
)

// keyHomedOn returns a key (<prefix>0, <prefix>1, ...) whose copy 0 is on
// node name for e's first router (which must find the node usable).
func keyHomedOn(t *testing.T, e *env, prefix, name string) string {
	t.Helper()
	for i := 0; i < 10000; i++ {
		k := fmt.Sprintf("%s%d", prefix, i)
		if n, err := e.rtrs[0].Pick("cache", "r", k); err == nil && n.Name() == name {
			return k
		}
	}
	t.Fatalf("no key homed on %s", name)
	return ""
}

// An Invalidate that cannot reach a copy's node says so with an error
// wrapping router.ErrUnavailable, as a Set does (README: "a Set or
// Invalidate that could not reach a copy's node says so"). It sent its
// script to the DOWN node and returned the node's refusal, a *node.Error
// wrapping node.ErrDown, which is not router.ErrUnavailable.
func TestInvalidateOfACopyOnADownNodeIsUnavailable(t *testing.T) {
	e := newEnv(t, 1)
	c := e.caches(cache.Options{TTL: time.Minute})[0]
	key := keyHomedOn(t, e, "k", "n2")
	e.srv[1].Kill()
	waitDown(t, e.rtrs[0], "n2")
	errSet := c.Set(e.ctx, key, []byte("v"))
	errInv := c.Invalidate(e.ctx, key)
	if !errors.Is(errSet, router.ErrUnavailable) {
		t.Errorf("Set of a key whose copy is on a DOWN node = %v, want an error wrapping router.ErrUnavailable", errSet)
	}
	if !errors.Is(errInv, router.ErrUnavailable) {
		t.Errorf("Invalidate of a key whose copy is on a DOWN node = %v, want an error wrapping router.ErrUnavailable", errInv)
	}
}
