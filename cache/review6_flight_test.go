package cache_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardis/shardis/cache"
)

// A caller in another instance that waits for a fill must not fail
// because the filler's own caller gave up: once the filler's gate is
// released without a value, the waiter fills the key itself, well within
// FillWait, instead of polling to the end and returning ErrFilling.
func TestReview6WaiterOfACancelledFillerFillsItself(t *testing.T) {
	e := newEnv(t, 2)
	cs := e.caches(cache.Options{TTL: time.Minute, FillWait: 5 * time.Second})
	called := make(chan struct{})
	lctx, cancel := context.WithCancel(e.ctx)
	leaderDone := make(chan error, 1)
	go func() {
		_, err := cs[0].Get(lctx, "sku", func(ctx context.Context, _ string) ([]byte, error) {
			close(called)
			<-ctx.Done()
			return nil, ctx.Err()
		})
		leaderDone <- err
	}()
	select {
	case <-called: // the leader holds the gate and is loading
	case <-time.After(20 * time.Second):
		t.Fatal("the leader's loader was not called")
	}
	waiter := make(chan error, 1)
	var got []byte
	go func() {
		v, err := cs[1].Get(e.ctx, "sku", func(context.Context, string) ([]byte, error) { return []byte("v"), nil })
		got = v
		waiter <- err
	}()
	time.Sleep(200 * time.Millisecond) // the waiter found the gate taken and polls
	cancel()
	if err := <-leaderDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("the leader's Get: %v, want its cancellation", err)
	}
	select {
	case err := <-waiter:
		if err != nil || string(got) != "v" {
			t.Fatalf("the other instance's waiting Get: %q, %v; want \"v\" (the gate was free since the leader gave up)", got, err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the waiting Get did not return")
	}
}
