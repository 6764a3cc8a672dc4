package inventory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardis/shardis/topology"
)

// TestApplyCarriesALimitChangeOnlyALeavingNodeTook: a per-user limit
// change (LoadStock of r/z, limit 1) reached only n3 of route r (n1, n2,
// n3): the load failed on n1 and n2, so LoadStock answered ErrUnavailable,
// promising the others take it when they return, and recorded the change
// for ConvergeLimits on n3, the one node that took it. n3 then leaves the
// server (topology apply to r: n1, n2) before any reconciler ran, and the
// record leaves with it. The apply must carry the change to the route's
// staying members (the newest version the old members hold), or they keep
// no limit for good and a user reserves past it.
func TestApplyCarriesALimitChangeOnlyALeavingNodeTook(t *testing.T) {
	_, addrs := startNamed(t, 3)
	old := leaveConfig(t, addrs, map[string][]string{"r": {"n1", "n2", "n3"}})
	next := leaveConfig(t, addrs, map[string][]string{"r": {"n1", "n2"}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	var failLoads atomic.Bool
	hook := &hookFaults{call: func(ctx context.Context, c ScriptCall, send func() (any, error)) (any, error) {
		if failLoads.Load() && c.Script == "load" && c.Node != "n3" {
			return nil, fmt.Errorf("node %s: connection reset (fault injected)", c.Node)
		}
		return send()
	}}
	p1 := openInv(t, old, Options{Faults: hook})
	if _, err := p1.LoadStock(ctx, "r", "z", 300, 0); err != nil {
		t.Fatal(err)
	}
	failLoads.Store(true)
	_, err := p1.LoadStock(ctx, "r", "z", 0, 1)
	failLoads.Store(false)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("LoadStock with the limit reaching n3 only: %v, want ErrUnavailable", err)
	}
	t.Logf("limit change reaching n3 only: %v", err)

	rep, err := ApplyTopology(ctx, ApplyOptions{To: next, From: old, Wait: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil || rep.Phase != topology.PhaseStable {
		t.Fatalf("apply: %+v, %v", rep, err)
	}
	t.Logf("apply: phase %s, left %v, limits copied %d", rep.Phase, rep.Left, rep.LimitsCopied)

	p2 := openInv(t, next, Options{})
	for _, n := range []string{"n1", "n2"} {
		if left, err := p2.ConvergeLimits(ctx, n); err != nil || left != 0 {
			t.Fatalf("ConvergeLimits(%s) = %d, %v", n, left, err)
		}
	}
	set, err := p2.set(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	user := ""
	for i := 0; user == ""; i++ {
		if u := fmt.Sprintf("u%d", i); quotaNode(set, u).Name() == "n1" {
			user = u
		}
	}
	got := 0
	for i := 0; i < 3; i++ {
		_, err := p2.Reserve(ctx, fmt.Sprintf("o%d", i), []Item{{Route: "r", SKU: "z", Quantity: 1}}, user, time.Minute)
		switch {
		case err == nil:
			got++
		case errors.Is(err, ErrLimitExceeded):
		default:
			t.Fatalf("Reserve o%d: %v", i, err)
		}
	}
	if got > 1 {
		t.Errorf("user %s (quota node n1) reserved %d units of r/z after a limit change to 1 that reached only n3, which then left: the change was lost with n3's record of it", user, got)
	}
}
