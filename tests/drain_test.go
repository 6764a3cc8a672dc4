package tests

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
)

// A drain is shared and durable: made through one router, every other
// router over the same nodes applies it within a heartbeat, a router
// started later starts with it, and it can be lifted through any router.
// A drain of a node that cannot be written is refused, changing nothing.
func TestDrainSharedAndDurable(t *testing.T) {
	t.Parallel()
	srv := redistest.StartN(t, 2, redistest.Options{})
	cfg := newConfig(t, map[string]string{"n1": srv[0].Addr(), "n2": srv[1].Addr()},
		map[string]config.Server{"product": server(config.OnNodeDownFail, map[string][]string{"clothes": {"n1", "n2"}})},
		&quickHealth)
	rk := node.RouteKey{Server: "product", Route: "clothes"}
	enabled := func(r *router.Router, name string) bool {
		n, _ := r.Node(name)
		return n.RouteEnabled(rk)
	}
	a, _ := startRouter(t, cfg)
	b, _ := startRouter(t, cfg)
	ctx := context.Background()
	if err := a.SetRouteEnabled(ctx, "n2", "product", "clothes", false); err != nil {
		t.Fatal(err)
	}
	if enabled(a, "n2") {
		t.Fatal("router a: n2 still enabled right after its own drain")
	}
	// Within one heartbeat (100ms here) plus a probe: well under a second.
	waitFor(t, time.Second, "router b sees the drain", func() bool { return !enabled(b, "n2") })

	// A router started now (a restarted instance) starts with the drain.
	c, _ := startRouter(t, cfg)
	if enabled(c, "n2") {
		t.Error("a router started after the drain has n2 enabled")
	}
	if !enabled(c, "n1") {
		t.Error("the drain of n2 touched n1")
	}

	// Lifted through another router, everyone follows.
	if err := b.SetRouteEnabled(ctx, "n2", "product", "clothes", true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Second, "routers a and c see the undrain", func() bool { return enabled(a, "n2") && enabled(c, "n2") })

	// A node that cannot record the drain is not drained anywhere.
	srv[1].Kill()
	n2, _ := a.Node("n2")
	waitFor(t, 5*time.Second, "n2 DOWN", func() bool { return !n2.Usable() })
	if err := a.SetRouteEnabled(ctx, "n2", "product", "clothes", false); err == nil || !errors.Is(err, node.ErrDown) {
		t.Errorf("drain of a DOWN node: %v, want an error wrapping node.ErrDown", err)
	}
	if !enabled(a, "n2") {
		t.Error("a refused drain changed the local flag")
	}
}
