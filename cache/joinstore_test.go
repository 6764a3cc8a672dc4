package cache_test

import (
	"context"
	"testing"
	"time"

	"github.com/shardis/shardis/cache"
)

// A Get that starts after an Invalidate returned, misses in Redis and
// joins an older in-process fill (whose loader read the row before the
// Invalidate) must not get that fill's value. The fill's store is refused
// by the version check, and the joiner reruns (flight.go) — unless the
// copy's node became unusable before the store: storeFill then skips the
// copy, reports neither "raced" nor "not stored", and the joiner got the
// old value although it started after the Invalidate returned nil.
func TestJoinerOfAFillWhoseStoreWasSkippedGetsNoOldValue(t *testing.T) {
	e := newEnv(t, 2)
	cs := e.caches(cache.Options{TTL: time.Minute})
	key := keyHomedOn(t, e, "sku-", "n2")
	old := newSlowLoad([]byte("old"), nil)
	first := make(chan error, 1)
	go func() {
		_, err := cs[0].Get(e.ctx, key, old.load)
		first <- err
	}()
	select {
	case <-old.called:
	case <-time.After(20 * time.Second):
		t.Fatal("the loader was not called")
	}
	// The row changes to "new" and the writer invalidates the key.
	if err := cs[1].Invalidate(e.ctx, key); err != nil {
		t.Fatal(err)
	}
	type res struct {
		v   []byte
		err error
	}
	late := make(chan res, 1)
	go func() {
		v, err := cs[0].Get(e.ctx, key, func(context.Context, string) ([]byte, error) { return []byte("new"), nil })
		late <- res{v, err}
	}()
	time.Sleep(200 * time.Millisecond) // it read its miss and joined the fill
	e.srv[1].Kill()
	waitDown(t, e.rtrs[0], "n2")
	close(old.released)
	<-first
	select {
	case r := <-late:
		if string(r.v) == "old" {
			t.Fatalf("Get started after Invalidate returned %q, %v: the value a loader read before the Invalidate (its fill's store was skipped, the node being down)", r.v, r.err)
		}
		t.Logf("late Get = %q, %v", r.v, r.err)
	case <-time.After(20 * time.Second):
		t.Fatal("the late Get did not return")
	}
}
