package tests

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/rollback"
)

// invFill fills node c (maxmemory-policy noeviction) until it refuses
// writes with OOM: maxmemory 1 MiB above what it uses, 64 KiB values until
// one is refused, then maxmemory lowered to 90 % of what it uses, so it
// stays over its limit whatever client buffers do. It returns the keys
// written (invFree deletes them).
func invFill(t *testing.T, ctx context.Context, c *redis.Client, prefix string) []string {
	t.Helper()
	used := func() (n int64) {
		fmt.Sscan(c.InfoMap(ctx, "memory").Val()["Memory"]["used_memory"], &n)
		return n
	}
	if err := c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "maxmemory", fmt.Sprint(used()+1<<20)).Err(); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for i := 0; ; i++ {
		k := fmt.Sprintf("%s:%d", prefix, i)
		err := c.Set(ctx, k, strings.Repeat("x", 64<<10), 0).Err()
		if err != nil && strings.HasPrefix(err.Error(), "OOM") {
			break
		}
		if err != nil || i > 1000 {
			t.Fatalf("filling the node: %v after %d values", err, i)
		}
		keys = append(keys, k)
	}
	if err := c.ConfigSet(ctx, "maxmemory", fmt.Sprint(used()*9/10)).Err(); err != nil {
		t.Fatal(err)
	}
	return keys
}

// invFree deletes the keys invFill wrote and lifts maxmemory.
func invFree(t *testing.T, ctx context.Context, c *redis.Client, keys []string) {
	t.Helper()
	if len(keys) > 0 {
		if err := c.Del(ctx, keys...).Err(); err != nil {
			t.Fatalf("freeing the node: %v", err)
		}
	}
	if err := c.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
}

// A node near OOM must not strand parts (safety issue item B6): a burst
// of multi-node orders (one item on each of three single-node routes, one
// on a route over all of them, half with a per-user limit) with short TTLs
// runs while node n2 is filled with other data until it refuses writes
// (maxmemory, noeviction). With the reconciler and the deferred queue
// wired as `shardis serve` wires them, within a bound after every
// deadline no part may be pending, set aside as stuck, or reserved, while
// n2 is still full (settling and deciding only release what exists, so
// they run on a full node), and every SKU's stock must add up to what was
// loaded. Reserves refused by n2 say so, typed. Once n2 is freed, orders
// go through again and stock still adds up.
func TestInvOOMNodeStrandsNothing(t *testing.T) {
	t.Parallel()
	h := invFastHealth
	h.Timeout = 500 * time.Millisecond // a loaded machine must not make nodes flap
	c := newInvCluster(t, invOpts{routes: map[string][]string{
		"a": {"n1"}, "b": {"n2"}, "c": {"n3"}, "r": {"n1", "n2", "n3"},
	}, health: &h, lease: 500 * time.Millisecond})
	ctx := invCtx(t, 60*time.Second)
	const loaded, ttl = 100000, 800 * time.Millisecond
	skus := [][2]string{{"a", "oom"}, {"b", "oom"}, {"c", "oom"}, {"r", "oom"}, {"r", "lim"}}
	for _, s := range skus {
		limit := int64(0)
		if s[1] == "lim" {
			limit = 1000
		}
		c.load(s[0], s[1], loaded, limit)
	}
	rec := c.reconciler(nil, nil, rollback.Settings{Interval: 100 * time.Millisecond})
	rec.Start()

	items := []inventory.Item{invItem("a", "oom", 1), invItem("b", "oom", 2), invItem("c", "oom", 3), invItem("r", "oom", 1)}
	var (
		seq       atomic.Int64
		ok, fail  atomic.Int64
		lastDue   atomic.Int64 // unix ms: the latest part deadline (+ grace) an order may have
		oomErrs   atomic.Int64
		oomSample atomic.Pointer[string]
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := seq.Add(1)
				id := fmt.Sprintf("oom-%d-%d", w, i)
				lastDue.Store(max(lastDue.Load(), time.Now().Add(ttl+2*time.Second).UnixMilli()))
				user, its := "", items
				if i%2 == 0 {
					user = fmt.Sprintf("u%d", i%7)
					its = append(its[:len(its):len(its)], invItem("r", "lim", 1))
				}
				if _, err := c.inv.Reserve(ctx, id, its, user, ttl); err != nil {
					fail.Add(1)
					if errors.Is(err, inventory.ErrOutOfMemory) {
						oomErrs.Add(1)
						msg := err.Error()
						oomSample.Store(&msg)
					}
					continue
				}
				ok.Add(1)
				switch i % 3 {
				case 0:
					_, _ = c.inv.Confirm(ctx, id)
				case 1:
					_, _ = c.inv.Cancel(ctx, id)
				}
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	full := c.clients["n2"]
	fill := invFill(t, ctx, full, "oom:fill")
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	t.Logf("reserved %d, refused %d (%d out of memory)", ok.Load(), fail.Load(), oomErrs.Load())
	if oomErrs.Load() == 0 {
		t.Fatal("no Reserve was refused with ErrOutOfMemory while n2 was full")
	}
	if msg := *oomSample.Load(); !strings.Contains(msg, "node n2 is out of memory (maxmemory ") ||
		!strings.Contains(msg, "noeviction") {
		t.Fatalf("out-of-memory error %q: want it to name node n2, its maxmemory and policy", msg)
	}

	// Every deadline handed out (and its grace) has passed, plus a bound
	// for the reconciler: nothing pending, stuck or reserved, n2 still full.
	invWaitNothingHeld(t, ctx, c, skus, loaded, time.UnixMilli(lastDue.Load()).Add(5*time.Second), rec)
	if err := full.Set(ctx, "oom:probe", "x", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "OOM") {
		t.Fatalf("n2 accepts writes (%v): the test did not keep it full", err)
	}

	// Freed: orders over every node go through again.
	invFree(t, ctx, full, fill)
	for i := range 5 {
		id := fmt.Sprintf("oom-after-%d", i)
		if _, err := c.inv.Reserve(ctx, id, items, "", ttl); err != nil {
			t.Fatalf("Reserve %s after n2 was freed: %v", id, err)
		}
		if _, err := c.inv.Cancel(ctx, id); err != nil {
			t.Fatalf("Cancel %s: %v", id, err)
		}
	}
	invWaitNothingHeld(t, ctx, c, skus, loaded, time.Now().Add(5*time.Second), rec)
}

// invWaitNothingHeld polls until no part is pending or set aside on any
// node, failing the test at bound, then checks every SKU adds up to loaded
// with nothing reserved.
func invWaitNothingHeld(t *testing.T, ctx context.Context, c *invCluster, skus [][2]string, loaded int64, bound time.Time, rec *rollback.Reconciler) {
	t.Helper()
	for {
		left, err := invPendingOf(ctx, c.clients, nil)
		stuck := int64(0)
		for _, cl := range c.clients {
			stuck += cl.ZCard(ctx, "inv:stuck").Val()
		}
		if err == nil && len(left) == 0 && stuck == 0 {
			break
		}
		if time.Now().After(bound) {
			if len(left) > 5 {
				left = left[:5]
			}
			t.Fatalf("parts held past every deadline: %d stuck, %d+ pending (err %v), e.g. %v; reconciler %+v",
				stuck, len(left), err, left, rec.Stats())
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, s := range skus {
		if lvl := hostileInvariantOn(t, c.inv, s[0], s[1], loaded); lvl.Reserved != 0 {
			t.Fatalf("%s/%s: %d units reserved with no part pending: %+v", s[0], s[1], lvl.Reserved, lvl)
		}
	}
}

// A refusal's fence starts a record (inventory/soldout.go, "Refusals
// behind a fence"), so a node out of memory refuses it like any new
// order: an order short only because the SKU's units are reserved, whose
// reads come first (the sold-out hint), is answered ErrOutOfMemory there
// and the full node gains no key; once the node is freed it is refused
// behind its fence.
func TestInvOOMRefusalWritesNoFence(t *testing.T) {
	c := newInvCluster(t, invOpts{nodes: 1})
	ctx := invCtx(t, 30*time.Second)
	c.load("r", "held", 2, 0)
	for i := range 2 {
		if _, err := c.inv.Reserve(ctx, fmt.Sprintf("holder-%d", i), []inventory.Item{invItem("r", "held", 1)}, "", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	// the first refusal marks the hint (and leaves its fence)
	if _, err := c.inv.Reserve(ctx, "short-0", []inventory.Item{invItem("r", "held", 1)}, "", time.Minute); !errors.Is(err, inventory.ErrInsufficientStock) {
		t.Fatalf("Reserve short-0: %v, want ErrInsufficientStock", err)
	}
	n1 := c.clients[c.names[0]]
	filled := invFill(t, ctx, n1, "oom-fill")
	before := n1.DBSize(ctx).Val()
	_, err := c.inv.Reserve(ctx, "short-1", []inventory.Item{invItem("r", "held", 1)}, "", time.Minute)
	if !errors.Is(err, inventory.ErrOutOfMemory) {
		t.Errorf("Reserve short-1 on a full node: %v, want ErrOutOfMemory", err)
	}
	if after := n1.DBSize(ctx).Val(); after != before {
		t.Errorf("a refusal on a full node wrote %d key(s)", after-before)
	}
	invFree(t, ctx, n1, filled)
	if _, err := c.inv.Reserve(ctx, "short-1", []inventory.Item{invItem("r", "held", 1)}, "", time.Minute); !errors.Is(err, inventory.ErrInsufficientStock) {
		t.Fatalf("Reserve short-1 once freed: %v, want ErrInsufficientStock", err)
	}
}
