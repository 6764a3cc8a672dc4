package inventory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/router"
	"github.com/shardis/shardis/topology"
)

// bumpHook runs hook the first time the apply reaches crash point
// point, and never stops the apply there: an apply that is slow between
// two of its steps, while other processes act.
type bumpHook struct {
	point string
	hook  func()
	done  atomic.Bool
}

func (f *bumpHook) Call(_ context.Context, _ ScriptCall, send func() (any, error)) (any, error) {
	return send()
}

func (f *bumpHook) Crash(_ context.Context, point string) bool {
	if point == f.point && f.done.CompareAndSwap(false, true) {
		f.hook()
	}
	return false
}

// userHomedOn returns a user id whose quota node in a ring over members
// (weight 1 each) is want.
func userHomedOn(t *testing.T, want string, members ...string) string {
	t.Helper()
	ms := make([]router.Member, len(members))
	for i, m := range members {
		ms[i] = router.Member{Name: m, Weight: 1}
	}
	ring, err := router.NewRing(ms)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10000; i++ {
		u := fmt.Sprintf("u%d", i)
		if ring.Name(ring.Home("user:"+u)) == want {
			return u
		}
	}
	t.Fatalf("no user homed on %s", want)
	return ""
}

// joinRouteStart starts n1..n3 with the topologies of a route r (n2, n3)
// that n1, a node of the server (route s), joins, and an instance of the
// old one that loaded 100 units of r/z with a per-user limit of 5.
func joinRouteStart(t *testing.T) (srvs []*redistest.Server, old, next *config.Config, ctx context.Context, p1 *Inventory) {
	srvs, addrs := startNamed(t, 3)
	old = leaveConfig(t, addrs, map[string][]string{"r": {"n2", "n3"}, "s": {"n1"}})
	next = leaveConfig(t, addrs, map[string][]string{"r": {"n1", "n2", "n3"}, "s": {"n1"}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	p1 = openInv(t, old, Options{})
	if _, err := p1.LoadStock(ctx, "r", "z", 100, 5); err != nil {
		t.Fatal(err)
	}
	return srvs, old, next, ctx, p1
}

// TestApplyJoiningRouteKeepsALimitChangedMeanwhile adds n1, a node of the
// server (route s), to route r (n2, n3). The apply copies r's per-user
// limits onto n1 before its bump; an instance still at the old topology
// lowers r/z's limit from 5 to 1 on n2 and n3 while the apply is between
// its first bump (n1, which sorts first) and the bumps of n2 and n3, and
// that LoadStock answers success. Once the apply is stable, a user whose
// quota node in the new r is n1 must get no more than 1 unit of r/z: the
// limit every node of r held when the change answered.
func TestApplyJoiningRouteKeepsALimitChangedMeanwhile(t *testing.T) {
	srvs, old, next, ctx, p1 := joinRouteStart(t)
	var lowered error
	f := &bumpHook{point: "bump", hook: func() {
		lvl, err := p1.LoadStock(ctx, "r", "z", 0, 1)
		lowered = err
		t.Logf("during the apply's bumps, the old instance lowers r/z's limit to 1: limit %d, %v", lvl.Limit, err)
	}}
	rep, err := ApplyTopology(ctx, ApplyOptions{To: next, From: old, Wait: 5 * time.Second, Logger: slog.New(slog.DiscardHandler), Faults: f})
	if err != nil || rep.Phase != topology.PhaseStable {
		t.Fatalf("apply: %+v, %v", rep, err)
	}
	if lowered != nil {
		t.Skipf("the limit change did not answer success (%v): nothing promised", lowered)
	}
	t.Logf("apply: phase %s, limits copied %d", rep.Phase, rep.LimitsCopied)

	p2 := openInv(t, next, Options{})
	user := userHomedOn(t, "n1", "n1", "n2", "n3")
	for _, c := range srvs {
		v, _ := c.Client(t).HMGet(ctx, stockKey("r", "z"), "limit", "limit_ver").Result()
		t.Logf("%s r/z limit %v limit_ver %v", c.Addr(), v[0], v[1])
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
	t.Logf("user %s (quota node n1 in the new r) reserved %d units of r/z, limit 1", user, got)
	if got > 1 {
		t.Errorf("user %s holds %d units of r/z after a limit change to 1 answered success: the joining node n1 kept the limit copied before the change", user, got)
	}
}

// TestApplyLimitCopiedAgainKeepsANewerChange: the apply of the same
// change (n1 joins route r) stops after its first bump (n1); an instance
// of the new topology then changes r/z's limit to 3, which reaches n1
// only (n2 and n3 are still at the old epoch: it is recorded for
// ConvergeLimits). The rerun copies the limits onto n1 again once n2 and
// n3 are bumped: that copy must keep n1's newer change, so every node of
// r ends at 3 once the change converges.
func TestApplyLimitCopiedAgainKeepsANewerChange(t *testing.T) {
	srvs, old, next, ctx, _ := joinRouteStart(t)
	apply := func(f Faults) (topology.Report, error) {
		return ApplyTopology(ctx, ApplyOptions{To: next, From: old, Wait: 5 * time.Second, Logger: slog.New(slog.DiscardHandler), Faults: f})
	}
	if _, err := apply(&topoFaults{point: "bump", nth: 1}); !errors.Is(err, ErrCrashed) {
		t.Fatalf("apply stopped after its first bump: %v", err)
	}
	p2 := openInv(t, next, Options{})
	_, err := p2.LoadStock(ctx, "r", "z", 0, 3)
	t.Logf("the new topology's instance changes r/z's limit to 3 while only n1 is bumped: %v", err)
	rep, err := apply(nil)
	if err != nil || rep.Phase != topology.PhaseStable {
		t.Fatalf("rerun: %+v, %v", rep, err)
	}
	for _, name := range []string{"n1", "n2", "n3"} {
		if _, err := p2.ConvergeLimits(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range srvs {
		v, err := c.Client(t).HMGet(ctx, stockKey("r", "z"), "limit", "limit_ver").Result()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("n%d r/z limit %v limit_ver %v", i+1, v[0], v[1])
		if v[0] != "3" {
			t.Errorf("n%d: r/z limit %v after the change to 3 converged, want 3", i+1, v[0])
		}
	}
}
