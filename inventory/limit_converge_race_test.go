package inventory

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestConvergeKeepsANewerPendingChange: a reconciler pass
// (ConvergeLimits) reads node n1's pending limit change v1, then pauses
// (a GC or VM pause past its node lease, a slow node) before it finishes.
// Meanwhile a newer limit change v2 misses n2 too (n2 fails during that
// LoadStock) and is recorded on n1 in the same field, replacing v1. The
// paused pass resumes, sends v1 (older: a no-op where v2 is) and drops
// the field it read: before, the drop deleted whatever the field held, so
// v2's record went with it and no reconciler ever took v2 to n2. The
// route then kept two limits for good: a user whose quota node is n2
// could hold more than the limit the last LoadStock set (found by a
// review).
func TestConvergeKeepsANewerPendingChange(t *testing.T) {
	e := newLimitRouteEnv(t)
	if _, err := e.inv.LoadStock(e.ctx, "d", "t", 0, 5); err != nil {
		t.Fatal(err)
	}
	// An instance whose loads never reach n2 (it fails during the call).
	lossy := e.loadsNeverReach("n2")
	// The paused reconciler: its first limit-sync is held back.
	var once sync.Once
	held, release := make(chan struct{}), make(chan struct{})
	paused := e.faultyInstance(&hookFaults{call: func(ctx context.Context, c ScriptCall, send func() (any, error)) (any, error) {
		if c.Script == "limit-sync" {
			first := false
			once.Do(func() { first = true; close(held) })
			if first {
				select {
				case <-release:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
		}
		return send()
	}})

	// v1: limit 3 reaches n1 only; recorded on n1.
	if _, err := lossy.LoadStock(e.ctx, "d", "t", 0, 3); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("LoadStock limit 3 with n2 failing = %v; want ErrUnavailable", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := paused.ConvergeLimits(e.ctx, "n1")
		done <- err
	}()
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the paused pass never reached its limit-sync")
	}
	// v2: limit 1, again n1 only; recorded on n1 over v1.
	time.Sleep(5 * time.Millisecond)
	if _, err := lossy.LoadStock(e.ctx, "d", "t", 0, 1); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("LoadStock limit 1 with n2 failing = %v; want ErrUnavailable", err)
	}
	todo := e.clients["n1"].HGetAll(e.ctx, keyLimitsTodo).Val()
	t.Logf("n1's pending changes before the paused pass resumes: %v", todo)
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t.Logf("n1's pending changes after it: %v", e.clients["n1"].HGetAll(e.ctx, keyLimitsTodo).Val())

	// Later passes of any reconciler, every node.
	limits := e.convergedLimits(3)
	if limits["n1"] != "1" || limits["n2"] != "1" {
		t.Errorf("after the last LoadStock set limit 1 and the reconcilers' passes, the route's limits are %v; want 1 everywhere", limits)
	}
	user, got := e.unitsHeldByAUserOnN2("cv", 3)
	if got > 1 {
		t.Errorf("user %s holds %d units of d/t, whose per-user limit the last LoadStock set to 1", user, got)
	}
}

// loadsNeverReach is an instance of e's inventory whose load scripts on
// node fail before they reach it (the call is never sent).
func (e *stagedEnv) loadsNeverReach(node string) *Inventory {
	return e.faultyInstance(&hookFaults{call: func(ctx context.Context, c ScriptCall, send func() (any, error)) (any, error) {
		if c.Script == "load" && c.Node == node {
			return nil, errors.New(node + " unreachable (injected: the call never reached the node)")
		}
		return send()
	}})
}

// pauseN2 pauses n2's server and waits until e's instance no longer
// uses n2 (10 s at most; the server resumed and the test failed then).
func (e *stagedEnv) pauseN2() {
	e.t.Helper()
	e.srvs[1].Pause()
	n2, _ := e.r.Node("n2")
	for deadline := time.Now().Add(10 * time.Second); e.inv.usable(n2); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			e.srvs[1].Resume()
			e.t.Fatal("n2 still usable 10s after its server was paused")
		}
	}
}

// convergedLimits runs passes reconcilers' limit convergence on n1 and n2
// (each pass every node; an error fails the test) and returns the d/t
// limit each node then holds, logging its version.
func (e *stagedEnv) convergedLimits(passes int) map[string]string {
	e.t.Helper()
	for range passes {
		for _, n := range []string{"n1", "n2"} {
			left, err := e.inv.ConvergeLimits(e.ctx, n)
			if err != nil {
				e.t.Fatalf("ConvergeLimits %s: %v", n, err)
			}
			e.t.Logf("ConvergeLimits(%s) = %d", n, left)
		}
	}
	limits := map[string]string{}
	for _, n := range []string{"n1", "n2"} {
		f, err := e.clients[n].HMGet(e.ctx, stockKey("d", "t"), "limit", "limit_ver").Result()
		if err != nil {
			e.t.Fatal(err)
		}
		limits[n], _ = f[0].(string)
		e.t.Logf("%s: limit %v, limit_ver %v", n, f[0], f[1])
	}
	return limits
}

// unitsHeldByAUserOnN2 picks a user whose quota node in route d is n2 and
// reserves n one-unit orders of d/t for it (ids prefix0, prefix1, …); it
// returns the user and how many were reserved (a refusal other than
// ErrLimitExceeded fails the test).
func (e *stagedEnv) unitsHeldByAUserOnN2(prefix string, n int) (string, int64) {
	e.t.Helper()
	set, _ := e.inv.set(e.ctx, "d")
	user := ""
	for i := 0; ; i++ {
		if u := "u" + strconv.Itoa(i); quotaNode(set, u).Name() == "n2" {
			user = u
			break
		}
	}
	var got int64
	for i := range n {
		_, err := e.inv.Reserve(e.ctx, prefix+strconv.Itoa(i), []Item{{Route: "d", SKU: "t", Quantity: 1}}, user, time.Minute)
		if err == nil {
			got++
		} else if !errors.Is(err, ErrLimitExceeded) {
			e.t.Fatal(err)
		}
	}
	return user, got
}
