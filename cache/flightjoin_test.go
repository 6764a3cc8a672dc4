package cache_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardis/shardis/cache"
)

// A Get that starts after an Invalidate returned must not be answered
// with a value a loader read before it. In one process a miss joins the
// key's in-process single flight: when that fill's loader read the row
// before the Invalidate (the fill then does not store it), the Get that
// started after the Invalidate and read a miss from Redis joined it and
// got the old value.
func TestGetAfterInvalidateDoesNotJoinAnOlderFill(t *testing.T) {
	for _, notFound := range []bool{false, true} {
		name := "value"
		if notFound {
			name = "not-found"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, 2)
			cs := e.caches(cache.Options{TTL: time.Minute, NegativeTTL: time.Minute})
			old := newSlowLoad([]byte("old"), nil)
			if notFound {
				old = newSlowLoad(nil, cache.ErrNotFound)
			}
			first := make(chan error, 1)
			go func() {
				_, err := cs[0].Get(e.ctx, "sku", old.load)
				first <- err
			}()
			select {
			case <-old.called:
			case <-time.After(20 * time.Second):
				t.Fatal("the loader was not called")
			}
			// The row changes to "new" and the writer invalidates the key.
			if err := cs[1].Invalidate(e.ctx, "sku"); err != nil {
				t.Fatal(err)
			}
			// A Get started after the Invalidate returned, in the filler's
			// process.
			type res struct {
				v   []byte
				err error
			}
			late := make(chan res, 1)
			go func() {
				v, err := cs[0].Get(e.ctx, "sku", func(context.Context, string) ([]byte, error) { return []byte("new"), nil })
				late <- res{v, err}
			}()
			time.Sleep(200 * time.Millisecond) // it read its miss and joined the fill
			close(old.released)
			<-first
			select {
			case r := <-late:
				if r.err != nil || string(r.v) != "new" {
					if errors.Is(r.err, cache.ErrNotFound) {
						t.Fatalf("Get started after Invalidate returned ErrNotFound decided before it; want \"new\"")
					}
					t.Fatalf("Get started after Invalidate returned %q, %v; want \"new\" (it joined a fill whose loader read the row before the Invalidate)", r.v, r.err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the late Get did not return")
			}
		})
	}
}
