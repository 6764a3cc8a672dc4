package cache_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/cache"
)

// holdHook holds, once armed, the first command match accepts: before it
// is sent, or with after after its reply came, until released.
type holdHook struct {
	match    func(redis.Cmder) bool
	after    bool
	armed    atomic.Bool
	reached  chan struct{}
	released chan struct{}
}

func newHoldHook(after bool, match func(redis.Cmder) bool) *holdHook {
	return &holdHook{match: match, after: after, reached: make(chan struct{}), released: make(chan struct{})}
}

func (h *holdHook) hold(cmd redis.Cmder) {
	if h.match(cmd) && h.armed.CompareAndSwap(true, false) {
		close(h.reached)
		<-h.released
	}
}

func (h *holdHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *holdHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !h.after {
			h.hold(cmd)
		}
		err := next(ctx, cmd)
		if h.after {
			h.hold(cmd)
		}
		return err
	}
}
func (h *holdHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !h.after {
			for _, cmd := range cmds {
				h.hold(cmd)
			}
		}
		err := next(ctx, cmds)
		if h.after {
			for _, cmd := range cmds {
				h.hold(cmd)
			}
		}
		return err
	}
}

func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatal(what)
	}
}

// waitJoined returns once a Get of key has joined c's in-process run.
func waitJoined(t *testing.T, c *cache.Cache, key string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for c.FlightJoined(key) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the late Get did not join the run under way")
		}
		time.Sleep(time.Millisecond)
	}
}

type getResult struct {
	v   []byte
	err error
}

func goGet(ctx context.Context, c *cache.Cache, key string, load cache.Loader) <-chan getResult {
	ch := make(chan getResult, 1)
	go func() {
		v, err := c.Get(ctx, key, load)
		ch <- getResult{v, err}
	}()
	return ch
}

func loadOf(v string) cache.Loader {
	return func(context.Context, string) ([]byte, error) { return []byte(v), nil }
}

// A fill that finds the value another instance stored meanwhile (between
// its miss and its gate) gives it to its callers, and first copies it
// into the key's missing copies (refill: one round trip). A Get that
// started after an Invalidate returned in that round trip missed in
// Redis (the Invalidate deleted the copy), joined the fill and got the
// value from before the Invalidate: the found copy was read before the
// Invalidate, and nothing checked it since.
func TestGetJoiningAFillAfterItsReadGetsNoValueAnInvalidateDeleted(t *testing.T) {
	e := newEnv(t, 2)
	a, err := cache.New(e.rtrs[0], "cache", "r", cache.Options{TTL: time.Minute, MaxReplicas: 2, Replicas: func(string) int { return 2 }})
	if err != nil {
		t.Fatal(err)
	}
	b, err := cache.New(e.rtrs[1], "cache", "r", cache.Options{TTL: time.Minute, MaxReplicas: 2, Replicas: func(string) int { return 1 }})
	if err != nil {
		t.Fatal(err)
	}
	const key = "sku"
	miss := newHoldHook(true, func(cmd redis.Cmder) bool {
		return cmd.Name() == "get" && len(cmd.Args()) > 1 && strings.HasSuffix(cmd.Args()[1].(string), ":"+key)
	})
	refill := newHoldHook(false, func(cmd redis.Cmder) bool { // fillScript: 2 keys, 3 arguments
		n := cmd.Name()
		return (n == "evalsha" || n == "eval") && len(cmd.Args()) == 8
	})
	for _, name := range []string{"n1", "n2", "n3"} {
		n, _ := e.rtrs[0].Node(name)
		n.Client().AddHook(miss)
		n.Client().AddHook(refill)
	}
	miss.armed.Store(true)
	first := goGet(e.ctx, a, key, func(context.Context, string) ([]byte, error) {
		return nil, errors.New("the loader of the first Get was called")
	})
	wait(t, miss.reached, "the first Get did not read the key")
	// Instance b fills copy 0 with the row as it is, "old".
	if v, err := b.Get(e.ctx, key, loadOf("old")); err != nil || string(v) != "old" {
		t.Fatalf("b.Get = %q, %v", v, err)
	}
	refill.armed.Store(true)
	close(miss.released) // a's miss goes on: its fill finds b's copy and refills copy 1
	wait(t, refill.reached, "the fill did not refill the key's other copy")
	// The row changes to "new" and the writer invalidates the key.
	if err := b.Invalidate(e.ctx, key); err != nil {
		t.Fatal(err)
	}
	late := goGet(e.ctx, a, key, loadOf("new"))
	waitJoined(t, a, key)
	close(refill.released)
	r := <-first
	t.Logf("the Get started before the Invalidate = %q, %v", r.v, r.err)
	select {
	case r := <-late:
		if r.err != nil || string(r.v) != "new" {
			t.Fatalf("Get started after Invalidate returned = %q, %v; want \"new\" (it joined a fill that had read the copy before the Invalidate)", r.v, r.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the late Get did not return")
	}
}

// FallbackToLoader loads a key none of whose copies this instance can
// read without caching, in the key's in-process single flight. Nothing
// versions that load: a Get that started after an Invalidate returned
// (another instance reaches the node) joined the load its loader had
// begun before the row changed, and got the older value.
func TestFallbackGetJoiningAfterTheLoaderCallGetsNoOlderValue(t *testing.T) {
	for _, notFound := range []bool{false, true} {
		name := "value"
		if notFound {
			name = "not-found"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, 1)
			writer := e.caches(cache.Options{TTL: time.Minute})[0]
			key := keyHomedOn(t, e, "sku-", "n2")
			p := newCutProxy(t, e.srv[1].Addr())
			ra := e.routerVia(t, "n2", p.ln.Addr().String())
			a, err := cache.New(ra, "cache", "r", cache.Options{TTL: time.Minute, FallbackToLoader: true})
			if err != nil {
				t.Fatal(err)
			}
			p.Cut()
			waitDown(t, ra, "n2")
			old := newSlowLoad([]byte("old"), nil)
			if notFound {
				old = newSlowLoad(nil, cache.ErrNotFound)
			}
			first := goGet(e.ctx, a, key, old.load)
			wait(t, old.called, "the loader was not called")
			// The row changes to "new" and the writer invalidates the key.
			if err := writer.Invalidate(e.ctx, key); err != nil {
				t.Fatal(err)
			}
			late := goGet(e.ctx, a, key, loadOf("new"))
			waitJoined(t, a, key)
			close(old.released)
			r := <-first
			t.Logf("the Get started before the Invalidate = %q, %v", r.v, r.err)
			select {
			case r := <-late:
				if r.err != nil || string(r.v) != "new" {
					t.Fatalf("Get started after Invalidate returned = %q, %v; want \"new\" (it joined an uncached load begun before the row changed)", r.v, r.err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the late Get did not return")
			}
		})
	}
}
