package node

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/internal/redistest"
)

// A probe's drain read that began before this process's drain write is
// not applied after it: the drain stays in force, instead of being undone
// until the next heartbeat (a stale read applied late made a drain
// reported by SetRouteEnabled read back enabled from ListNodes). A read
// that began after the write applies as before.
func TestStaleDrainReadDropped(t *testing.T) {
	n, rk, c, ctx := drainNode(t)
	read := func() (map[string]string, uint64) {
		gen := n.drainGen.Load() // as probeTrip: before the read
		d, err := c.HGetAll(ctx, DrainKey).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d, gen
	}
	enabled := func() bool { return n.Routes()[rk] }

	stale, gen := read() // nothing drained yet
	if err := n.PersistRouteEnabled(ctx, rk, false); err != nil {
		t.Fatal(err)
	}
	n.applyDrains(stale, gen)
	if enabled() {
		t.Fatal("a drain read that began before the drain was written re-enabled the route")
	}
	n.applyDrains(read()) // a read after the write
	if enabled() {
		t.Fatal("a drain read after the drain enabled the route")
	}
	// another process re-enables it on the node: the next read applies it
	if err := c.HDel(ctx, DrainKey, rk.String()).Err(); err != nil {
		t.Fatal(err)
	}
	n.applyDrains(read())
	if !enabled() {
		t.Fatal("a drain lifted on the node by another process was not applied")
	}
}

// A probe's apply of an older read that races a drain write of this
// process never ends with the older read in force: the write's flag is
// applied after the probe's, or the probe's is dropped. Before drainMu,
// a probe that had checked the generation just before the write's bump
// set the route back to drained after the write enabled it (ci474).
func TestStaleDrainApplyRacingAWrite(t *testing.T) {
	n, rk, c, ctx := drainNode(t)
	for i := range 300 {
		if err := n.PersistRouteEnabled(ctx, rk, false); err != nil {
			t.Fatal(err)
		}
		gen := n.drainGen.Load()
		stale, err := c.HGetAll(ctx, DrainKey).Result() // drained
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			n.applyDrains(stale, gen)
		}()
		if err := n.PersistRouteEnabled(ctx, rk, true); err != nil {
			t.Fatal(err)
		}
		<-done
		if !n.Routes()[rk] {
			t.Fatalf("round %d: the route is drained after the write that enabled it returned", i)
		}
	}
}

// A route of a node over its maxmemory (noeviction) can be drained: the
// drain's HSET comes after an HDEL, which takes no memory, so Redis lets
// it through. Before, the drain of a full node was refused with OOM.
func TestDrainOnAFullNode(t *testing.T) {
	n, rk, c, ctx := drainNode(t)
	if err := c.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "k", "v", 0).Err(); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("SET on the full node: %v, want an OOM refusal", err)
	}
	if err := n.PersistRouteEnabled(ctx, rk, false); err != nil {
		t.Fatalf("drain of a full node: %v", err)
	}
	if v := c.HGet(ctx, DrainKey, rk.String()).Val(); v != "1" || n.Routes()[rk] {
		t.Fatalf("after the drain: %s holds %q, route enabled %v; want \"1\" and false", DrainKey, v, n.Routes()[rk])
	}
	if err := n.PersistRouteEnabled(ctx, rk, true); err != nil || !n.Routes()[rk] {
		t.Fatalf("re-enable on the full node: %v, enabled %v", err, n.Routes()[rk])
	}
}

// drainNode starts a server and a node n1 over it serving route
// inventory/clothes, probed (stamped) and up, and returns it with that
// route, a plain client of the server and a context of 10 s.
func drainNode(t *testing.T) (*Node, RouteKey, *redis.Client, context.Context) {
	t.Helper()
	n, rk, srv, ctx := drainNodeOn(t)
	return n, rk, srv.Client(t), ctx
}

// drainNodeOn is drainNode returning the node's server.
func drainNodeOn(t *testing.T) (*Node, RouteKey, *redistest.Server, context.Context) {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	rk := RouteKey{Server: "inventory", Route: "clothes"}
	n, err := New(Options{Name: "n1", Addr: srv.Addr(), Routes: []RouteKey{rk}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	if err := n.Probe(ctx); err != nil { // stamps the node
		t.Fatal(err)
	}
	n.SetUp() // as the health scheduler does after a probe passed
	return n, rk, srv, ctx
}

// A drain whose caller's deadline passes while the node does not answer
// (paused) is the caller's deadline, not an unreachable node: it wraps
// context.DeadlineExceeded (the service answers deadline_exceeded) and
// not ErrUnreachable, which the service answered unavailable, blaming
// the node for a wait the caller chose.
func TestDrainPastTheCallersDeadline(t *testing.T) {
	n, rk, srv, ctx := drainNodeOn(t)
	if err := n.PersistRouteEnabled(ctx, rk, true); err != nil { // a pooled connection
		t.Fatal(err)
	}
	srv.Pause()
	defer srv.Resume()
	short, cancel2 := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel2()
	err := n.PersistRouteEnabled(short, rk, false)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrUnreachable) {
		t.Fatalf("drain past the caller's deadline: %v; want it to wrap context.DeadlineExceeded, not ErrUnreachable", err)
	}
}
