package cache_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/cache"
	"github.com/shardis/shardis/router"
)

// fillNode sets n2's maxmemory to 1 byte (noeviction, the default policy:
// every command that takes memory is refused with OOM) until undo or the
// test's end.
func fillNode(t *testing.T, e *env) (admin *redis.Client, undo func()) {
	t.Helper()
	admin = e.srv[1].Client(t)
	if err := admin.ConfigSet(e.ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	undo = func() {
		if err := admin.ConfigSet(context.Background(), "maxmemory", "0").Err(); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(undo)
	return admin, undo
}

// A Set or Invalidate whose copy's node is down fails with an error that
// names the key. Found by a review: the error was "node n2: no node
// available: copy 0 not written", naming no key, unlike every other error
// of the package.
func TestWriteErrorsNameTheKey(t *testing.T) {
	e := newEnv(t, 1)
	c := e.caches(cache.Options{TTL: time.Minute})[0]
	key := keyHomedOn(t, e, "sku-", "n2")
	e.srv[1].Kill()
	waitDown(t, e.rtrs[0], "n2")
	for name, err := range map[string]error{"Set": c.Set(e.ctx, key, []byte("v")), "Invalidate": c.Invalidate(e.ctx, key)} {
		if !errors.Is(err, router.ErrUnavailable) || !strings.Contains(err.Error(), `"`+key+`"`) {
			t.Errorf("%s of %q with its copy on a DOWN node = %v; want an error wrapping router.ErrUnavailable that names the key", name, key, err)
		}
	}
}

// A Set or Invalidate on a node at maxmemory (noeviction) deletes the
// copy there and returns nil: no copy is left older than the write, the
// Set's value is not stored (it would take memory the node refuses), and
// once the node has room a Get loads the new value. Found by a review:
// the write script wrote the version key first, which OOM refused, so the
// DEL never ran: both returned the bare OOM reply (not the
// router.ErrUnavailable their doc promised) and every Get kept reading
// the old value, though a DEL is allowed on a full node.
func TestWritesToAFullNodeDeleteTheCopy(t *testing.T) {
	e := newEnv(t, 1)
	c := e.caches(cache.Options{TTL: time.Minute})[0]
	for name, write := range map[string]func(key string) error{
		"Set":        func(key string) error { return c.Set(e.ctx, key, []byte("new")) },
		"Invalidate": func(key string) error { return c.Invalidate(e.ctx, key) },
	} {
		key := keyHomedOn(t, e, "sku-"+name, "n2")
		if err := c.Set(e.ctx, key, []byte("old")); err != nil {
			t.Fatal(err)
		}
		admin, undo := fillNode(t, e)
		err := write(key)
		left := admin.Exists(e.ctx, "shardis:cache:default:cache:r:k:"+key).Val()
		undo()
		v, gerr := c.Get(e.ctx, key, func(context.Context, string) ([]byte, error) { return []byte("new"), nil })
		if err != nil || left != 0 || gerr != nil || string(v) != "new" {
			t.Errorf("%s on a full node = %v, copy left there: %d, then Get = %q, %v; want nil, 0 and the new value", name, err, left, v, gerr)
		}
	}
}

// A fill whose loader read the row before an Invalidate of a full node
// does not store that value once the node has room again: the Invalidate
// wrote its version there too (after its DEL, which Redis lets a script's
// later writes through with). Found by a review: the Invalidate failed
// with OOM and left the copy; skipping the version write on OOM would
// have let the racing fill store the older value, since the DEL itself
// may free the memory its store needs.
func TestFillRacingAnInvalidateOfAFullNodeIsNotStored(t *testing.T) {
	e := newEnv(t, 1)
	c := e.caches(cache.Options{TTL: time.Minute})[0]
	key := keyHomedOn(t, e, "sku-", "n2")
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		v, err := c.Get(e.ctx, key, func(context.Context, string) ([]byte, error) {
			close(started)
			<-release
			return []byte("old"), nil
		})
		if err == nil && string(v) != "old" {
			err = errors.New("racing Get returned " + string(v))
		}
		done <- err
	}()
	<-started
	_, undo := fillNode(t, e)
	err := c.Invalidate(e.ctx, key)
	undo()
	close(release)
	if ferr := <-done; ferr != nil {
		t.Fatalf("the racing Get: %v", ferr)
	}
	v, gerr := c.Get(e.ctx, key, func(context.Context, string) ([]byte, error) { return []byte("new"), nil })
	if err != nil || gerr != nil || string(v) != "new" {
		t.Fatalf("Invalidate of a full node during a fill = %v; the next Get = %q, %v; want nil, then the new value (the fill's older one not stored)", err, v, gerr)
	}
}

// A Set or Invalidate refused by a usable node with an error reply on
// purpose (here the node's ACL refuses SET and DEL: inside the write's
// script Redis answers "can't run this command") fails with that reply,
// named with the key and node, not router.ErrUnavailable (the node can
// serve; its answer was no), as their doc now says. Found by a review:
// the doc promised router.ErrUnavailable, and the reply came bare.
func TestWriteRefusedByAUsableNodeIsItsReply(t *testing.T) {
	e := newEnv(t, 1)
	c := e.caches(cache.Options{TTL: time.Minute})[0]
	key := keyHomedOn(t, e, "sku-", "n2")
	admin := e.srv[1].Client(t)
	if err := admin.Do(e.ctx, "ACL", "SETUSER", "default", "-set", "-del").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Do(context.Background(), "ACL", "SETUSER", "default", "+set", "+del") })
	errs := map[string]error{"Set": c.Set(e.ctx, key, []byte("v")), "Invalidate": c.Invalidate(e.ctx, key)}
	if n, _ := e.rtrs[0].Node("n2"); !n.Usable() {
		t.Fatal("n2 became unusable: the test no longer holds a usable node's error reply")
	}
	for name, err := range errs {
		if err == nil || errors.Is(err, router.ErrUnavailable) || !strings.Contains(err.Error(), "can't run this command") ||
			!strings.Contains(err.Error(), `"`+key+`"`) || !strings.Contains(err.Error(), "n2") {
			t.Errorf("%s refused by the node's ACL = %v; want its reply naming the key and n2, not router.ErrUnavailable", name, err)
		}
	}
}

// The publish half of a write with no usable node to publish on fails
// with an error wrapping router.ErrUnavailable that names the key, as
// Set's and Invalidate's doc says of every node that could not serve.
// Found by a review: it was a plain error, outside their documented kinds.
func TestPublishWithNoUsableNodeIsUnavailable(t *testing.T) {
	e := newEnv(t, 1)
	c := e.caches(cache.Options{L1Size: 10})[0]
	for i, s := range e.srv {
		s.Kill()
		waitDown(t, e.rtrs[0], []string{"n1", "n2", "n3"}[i])
	}
	if err := c.InvalidateL1(e.ctx, "sku"); !errors.Is(err, router.ErrUnavailable) || !strings.Contains(err.Error(), `"sku"`) {
		t.Fatalf("publishing an invalidation with every node down = %v; want an error wrapping router.ErrUnavailable that names the key", err)
	}
}
