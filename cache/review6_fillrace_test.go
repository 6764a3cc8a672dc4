package cache_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardis/shardis/cache"
)

// slowLoad is a loader that reads the system of record when called (the
// value it returns is the one it "read" then), and returns it only after
// release is closed; called is closed at the call.
type slowLoad struct {
	val      []byte
	err      error
	called   chan struct{}
	released chan struct{}
}

func newSlowLoad(val []byte, err error) *slowLoad {
	return &slowLoad{val: val, err: err, called: make(chan struct{}), released: make(chan struct{})}
}

func (s *slowLoad) load(ctx context.Context, key string) ([]byte, error) {
	close(s.called)
	select {
	case <-s.released:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.val, s.err
}

// raceFill starts filler.Get(key) with old's loader, waits until that
// loader read the old state, runs write (the row changes and the cache is
// told: Set or Invalidate) and then lets the loader return; it returns
// when the racing Get did.
func raceFill(t *testing.T, e *env, filler *cache.Cache, key string, old *slowLoad, write func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := filler.Get(e.ctx, key, old.load)
		done <- err
	}()
	select {
	case <-old.called:
	case <-time.After(20 * time.Second):
		t.Fatal("the loader was not called")
	}
	if err := write(); err != nil {
		t.Fatal(err)
	}
	close(old.released)
	select {
	case err := <-done:
		t.Logf("the racing Get returned %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("the racing Get did not return")
	}
}

// A fill whose loader read the row before a write+Invalidate must not
// store what it read after the Invalidate: the next reader (another
// instance) would get the old value for a whole TTL although the writer
// did everything the package asks of it.
func TestReview6FillRacingInvalidateIsNotStored(t *testing.T) {
	e := newEnv(t, 2)
	cs := e.caches(cache.Options{TTL: time.Minute, Replicas: func(string) int { return 2 }})
	old := newSlowLoad([]byte("old"), nil)
	raceFill(t, e, cs[0], "sku", old, func() error { return cs[1].Invalidate(e.ctx, "sku") })
	v, err := cs[1].Get(e.ctx, "sku", func(context.Context, string) ([]byte, error) { return []byte("new"), nil })
	if err != nil || string(v) != "new" {
		t.Fatalf("Get after the row changed and Invalidate returned: %q, %v; want \"new\" (the racing fill stored the value it read before the Invalidate)", v, err)
	}
}

// The same for a "not found": a marker the loader decided on before the
// row was created and the key invalidated must not hide the row for
// NegativeTTL.
func TestReview6NotFoundRacingInvalidateIsNotStored(t *testing.T) {
	e := newEnv(t, 2)
	cs := e.caches(cache.Options{TTL: time.Minute, NegativeTTL: time.Minute})
	old := newSlowLoad(nil, cache.ErrNotFound)
	raceFill(t, e, cs[0], "sku", old, func() error { return cs[1].Invalidate(e.ctx, "sku") })
	v, err := cs[1].Get(e.ctx, "sku", func(context.Context, string) ([]byte, error) { return []byte("created"), nil })
	if err != nil || string(v) != "created" {
		t.Fatalf("Get after the row was created and Invalidate returned: %q, %v; want \"created\" (a stale not-found marker was stored)", v, err)
	}
}

// And for a Set: the value Set stored is newer than what a fill running
// beside it read, and must not be overwritten by it.
func TestReview6FillRacingSetIsNotStored(t *testing.T) {
	e := newEnv(t, 2)
	cs := e.caches(cache.Options{TTL: time.Minute, Replicas: func(string) int { return 3 }})
	old := newSlowLoad([]byte("old"), nil)
	raceFill(t, e, cs[0], "sku", old, func() error { return cs[1].Set(e.ctx, "sku", []byte("new")) })
	for i := 0; i < 30; i++ { // every copy (reads pick one at random)
		v, err := cs[1].Get(e.ctx, "sku", func(context.Context, string) ([]byte, error) { return nil, errors.New("no load expected") })
		if err != nil || string(v) != "new" {
			t.Fatalf("Get %d after Set(new) returned: %q, %v; want \"new\" (a fill that read the row before the Set overwrote it)", i, v, err)
		}
	}
}

// After Close the instance hears no invalidations: its L1 must not go on
// answering (until L1TTL, by default the TTL) a key another instance has
// since changed.
func TestReview6GetAfterCloseServesNoStaleL1(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	cs := e.caches(cache.Options{TTL: time.Minute, L1Size: 100})
	time.Sleep(300 * time.Millisecond) // subscriptions made
	if err := cs[1].Set(e.ctx, "sku", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	noLoad := func(context.Context, string) ([]byte, error) { return nil, errors.New("no load expected") }
	if v, err := cs[0].Get(e.ctx, "sku", noLoad); err != nil || string(v) != "v1" {
		t.Fatalf("first Get: %q, %v", v, err)
	}
	cs[0].Close()
	if v, err := cs[0].Get(e.ctx, "sku", noLoad); err != nil || string(v) != "v1" { // read after Close
		t.Fatalf("Get after Close: %q, %v", v, err)
	}
	if err := cs[1].Set(e.ctx, "sku", []byte("v2")); err != nil {
		t.Fatal(err)
	}
	v, err := cs[0].Get(e.ctx, "sku", noLoad)
	if err != nil || string(v) != "v2" {
		t.Fatalf("Get on a closed cache after another instance's Set(v2): %q, %v; want \"v2\" (Redis holds v2; the closed instance's L1 no longer hears invalidations)", v, err)
	}
}
