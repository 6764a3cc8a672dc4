package router_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
)

// reviewRouter builds a router over three fresh redis-server nodes n1..n3,
// all in route order/a (and n1, n2 in order/b), with fast probes. keep
// lists Options.KeepData.
func reviewRouter(t *testing.T, policy string, keep ...string) (*router.Router, []*redistest.Server) {
	t.Helper()
	srvs := redistest.StartN(t, 3, redistest.Options{})
	var b strings.Builder
	b.WriteString("nodes:\n")
	for i, s := range srvs {
		fmt.Fprintf(&b, "  n%d: {addr: %q}\n", i+1, s.Addr())
	}
	fmt.Fprintf(&b, "health: {heartbeat: 100ms, timeout: 300ms, backoff: [100ms], hold_back: 100ms}\n"+
		"servers:\n  order:\n    on_node_down: %s\n    routes:\n      a: [n1, n2, n3]\n      b: [n1, n2]\n", policy)
	cfg, err := config.Parse([]byte(b.String()), nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := router.New(context.Background(), cfg, router.Options{
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		KeepData: keep,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r, srvs
}

// waitState waits until node name is in state want.
func waitState(t *testing.T, r *router.Router, name string, want node.State, limit time.Duration) {
	t.Helper()
	n, err := r.Node(name)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(limit)
	for n.State() != want {
		if time.Now().After(deadline) {
			t.Fatalf("node %s is %v after %v, want %v (down reason: %v)", name, n.State(), limit, want, n.DownReason())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReviewAcceptAboveViewedGeneration: AcceptNode promises a new
// incarnation "at a generation above every one witnessed" after which "its
// next probe passes". A mark read from a peer that is DOWN by the time of
// the accept is part of what was witnessed (the node's view, which its
// probes compare the stamp with): an accept below it leaves the node
// refused.
func TestReviewAcceptAboveViewedGeneration(t *testing.T) {
	r, srvs := reviewRouter(t, "fail", "order")
	for _, n := range []string{"n1", "n2", "n3"} {
		waitState(t, r, n, node.StateUp, 5*time.Second)
	}
	ctx := context.Background()
	// A peer holds a mark of n1 five generations on: n1 went back to a
	// copy from before accepts that peer witnessed.
	c3 := srvs[2].Client(t)
	if err := c3.HSet(ctx, node.WitnessKey, "n1", "5:elsewhere:1").Err(); err != nil {
		t.Fatal(err)
	}
	waitState(t, r, "n1", node.StateDown, 5*time.Second)
	t.Logf("n1 refused: %v", mustNode(t, r, "n1").DownReason())
	// That peer is down when the operator accepts n1.
	srvs[2].Kill()
	waitState(t, r, "n3", node.StateDown, 5*time.Second)

	m, err := r.AcceptNode(ctx, "n1")
	if err != nil {
		t.Fatalf("AcceptNode: %v", err)
	}
	if m.Gen <= 5 {
		t.Errorf("AcceptNode gave generation %d, not above the witnessed generation 5", m.Gen)
	}
	waitState(t, r, "n1", node.StateUp, 3*time.Second)
}

func mustNode(t *testing.T, r *router.Router, name string) *node.Node {
	t.Helper()
	n, err := r.Node(name)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
