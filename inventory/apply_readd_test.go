package inventory

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/topology"
)

// TestReaddedRouteRefusesAStaleCounter: route c (10 units of c/s)
// moves off n3 onto n2 (epoch 2), then route c is removed (epoch 3: its
// counters stay where they are, n2's 10, and n2 is marked). n3 goes back
// to a copy of its data from before epoch 2 (c's 10 units again), is
// accepted (fenced) and brought forward by the apply of the current
// topology: the change it reads (epoch 2 to 3) removes c, so its take
// back and its report of what it left behind skip c. Route c added back
// over n2 and n3 must refuse n3's hash (no mark of the removal:
// apply_readd.go); before the marks the apply went through and n3's stale
// 10 units were sold on top of n2's (20 of 10 loaded; found by a review).
// Following the refusal (delete the key, apply again), c sells its 10.
func TestReaddedRouteRefusesAStaleCounter(t *testing.T) {
	t.Parallel()
	srvs, ctx, routes, apply := routeCWorld(t)
	before, after, removed, readd := routes("n3"), routes("n2"), routes(), routes("n2", "n3")
	n3 := srvs[2].Client(t)
	inv := openInv(t, before, Options{})
	if _, err := inv.LoadStock(ctx, "c", "s", 10, 0); err != nil {
		t.Fatal(err)
	}
	inv.Close()
	old3 := takeCopy(t, n3)
	if rep, err := apply(after); err != nil || rep.Phase != topology.PhaseStable || rep.StockMoved != 1 {
		t.Fatalf("moving route c off n3 = %+v, %v; want stable, 1 stock hash moved", rep, err)
	}
	if rep, err := apply(removed); err != nil || rep.Phase != topology.PhaseStable {
		t.Fatalf("removing route c = %+v, %v; want stable", rep, err)
	}
	old3.restore(t, n3) // c's 10 units again
	acceptNode(t, ctx, removed, n3, "n3")
	rep, err := apply(removed)
	if err != nil || len(rep.Forward) != 1 {
		t.Fatalf("bringing n3 forward = %+v, %v; want n3 forward", rep, err)
	}
	t.Logf("forward: taken back %d, left behind %+v", rep.TakenBack, rep.LeftBehind)
	if a := n3.HGet(ctx, stockKey("c", "s"), "available").Val(); a != "10" {
		t.Fatalf("setup: n3 holds c/s available %q, want 10 (stale)", a)
	}
	_, err = apply(readd)
	if !errors.Is(err, topology.ErrInvalid) || !strings.Contains(err.Error(), "node n3 holds inv:stock:c:s and no mark of the route's removal") {
		t.Fatalf("adding route c back over n2 and n3 = %v; want refused, naming n3's stale hash", err)
	}
	if strings.Contains(err.Error(), "node n2") {
		t.Errorf("the refusal names n2, which holds c's units since the removal: %v", err)
	}
	if got := srvs[1].Client(t).Get(ctx, removedKey("c")).Val(); got != "3" {
		t.Errorf("n2's mark of c's removal = %q, want 3 (the removal's epoch)", got)
	}
	if err := n3.Del(ctx, stockKey("c", "s")).Err(); err != nil {
		t.Fatal(err)
	}
	if rep, err = apply(readd); err != nil || rep.Phase != topology.PhaseStable {
		t.Fatalf("adding route c back once n3's hash is deleted = %+v, %v; want stable", rep, err)
	}
	inv = openInv(t, readd, Options{})
	sold := int64(0)
	for i := 0; i < 20; i++ {
		id := "o-" + string(rune('a'+i))
		if _, err := inv.Reserve(ctx, id, []Item{{Route: "c", SKU: "s", Quantity: 1}}, "", time.Hour); err != nil {
			continue
		}
		if out, err := inv.Confirm(ctx, id); err == nil && out.Status == StatusConfirmed {
			sold++
		}
	}
	lvl, err := inv.GetStock(ctx, "c", "s")
	if err != nil {
		t.Fatal(err)
	}
	if sold != 10 || lvl.Available != 0 || lvl.Confirmed != 10 {
		t.Fatalf("route c added back: %d units of c/s sold, %d available, %d confirmed; want 10 sold of the 10 loaded, none left", sold, lvl.Available, lvl.Confirmed)
	}
}

// TestRemovalMarksSurviveACrash: an apply removing route c (on n2 and
// n3, 5 units each) dies after marking the first node (crash point
// "removal-mark"): the epoch stays migrating, an apply adding c back is
// refused until the removal is finished, and the removal's rerun marks
// both nodes, so adding c back over them keeps their units (no node
// read as stale) and sells the 10.
func TestRemovalMarksSurviveACrash(t *testing.T) {
	t.Parallel()
	srvs, ctx, routes, apply := routeCWorld(t)
	with, without := routes("n2", "n3"), routes()
	inv := openInv(t, with, Options{})
	if _, err := inv.LoadStock(ctx, "c", "s", 10, 0); err != nil {
		t.Fatal(err)
	}
	inv.Close()
	marks := func() (n int) {
		for _, s := range srvs[1:] {
			if s.Client(t).Get(ctx, removedKey("c")).Val() == "2" {
				n++
			}
		}
		return n
	}
	if _, err := apply(without, crashAtPoint("removal-mark")); !errors.Is(err, ErrCrashed) {
		t.Fatalf("removing route c with a crash at removal-mark = %v; want ErrCrashed", err)
	}
	if n := marks(); n != 1 {
		t.Fatalf("after the crash %d nodes hold c's removal mark; want 1 (the crash comes after the first)", n)
	}
	if _, err := apply(with); err == nil {
		t.Fatal("adding route c back while its removal is migrating went through; want refused")
	}
	if rep, err := apply(without); err != nil || rep.Phase != topology.PhaseStable {
		t.Fatalf("the removal's rerun = %+v, %v; want stable", rep, err)
	}
	if n := marks(); n != 2 {
		t.Fatalf("after the rerun %d nodes hold c's removal mark at epoch 2; want both", n)
	}
	if rep, err := apply(with); err != nil || rep.Phase != topology.PhaseStable {
		t.Fatalf("adding route c back over n2 and n3 = %+v, %v; want stable (their counters are the removal's)", rep, err)
	}
	lvl, err := openInv(t, with, Options{}).GetStock(ctx, "c", "s")
	if err != nil || lvl.Available != 10 || lvl.Loaded != 10 {
		t.Fatalf("c/s after adding c back = %+v, %v; want 10 available of 10 loaded", lvl, err)
	}
}

// routeCWorld starts three nodes for the tests of route c's counters on a
// node that came back with an older copy: routes a on n1, b on n2, d on
// n3, and c over the members routes names (none: no route c). apply runs
// ApplyTopology to a topology, quietly, with the faults given, if any.
func routeCWorld(t *testing.T) (srvs []*redistest.Server, ctx context.Context,
	routes func(c ...string) *config.Config, apply func(to *config.Config, f ...Faults) (topology.Report, error)) {
	t.Helper()
	srvs = redistest.StartN(t, 3, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	addrs := map[string]string{"n1": srvs[0].Addr(), "n2": srvs[1].Addr(), "n3": srvs[2].Addr()}
	routes = func(c ...string) *config.Config {
		rs := map[string][]string{"a": {"n1"}, "b": {"n2"}, "d": {"n3"}}
		if len(c) > 0 {
			rs["c"] = c
		}
		return leaveConfig(t, addrs, rs)
	}
	quiet := slog.New(slog.DiscardHandler)
	apply = func(to *config.Config, f ...Faults) (topology.Report, error) {
		opts := ApplyOptions{To: to, Wait: 5 * time.Second, Logger: quiet}
		if len(f) > 0 {
			opts.Faults = f[0]
		}
		return ApplyTopology(ctx, opts)
	}
	return srvs, ctx, routes, apply
}
