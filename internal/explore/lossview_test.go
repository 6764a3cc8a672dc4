package explore

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/topology"
)

// configWorld is a World with the three topologies' configurations only
// (placeholder addresses, no server): enough for what the checks weigh
// of them.
func configWorld(t *testing.T) *World {
	t.Helper()
	addrs := map[string]string{"n1": "127.0.0.1:1", "n2": "127.0.0.1:2", "n3": "127.0.0.1:3", "n4": "127.0.0.1:4"}
	w := &World{}
	for _, c := range []struct {
		cfg    **config.Config
		routes map[string][]string
	}{{&w.cfg0, routesT0}, {&w.cfg1, routesT1}, {&w.cfg2, routesT2}} {
		cfg, err := worldConfig(addrs, c.routes)
		if err != nil {
			t.Fatal(err)
		}
		*c.cfg = cfg
	}
	return w
}

// TestRanView: the routes a loss may have changed and the routes split
// are those of the applies that ran, not of those the schedule drew.
// Before, lossMoved compared T0 with T1 (and T2 when the shrink was
// drawn) whether or not any apply ran, so n3's loss excused route c's
// quota-vs-parts checks and its stranded stock in a schedule whose
// topology never changed, and a schedule that drew the shrink held route
// c as split though its topology actor ended before the apply of T2.
func TestRanView(t *testing.T) {
	w := configWorld(t)
	t0 := time.Now()
	lossAt := func(node string, d time.Duration) stockLoss { return stockLoss{node: node, at: t0.Add(d)} }
	apply := func(to string, d time.Duration) topoApply { return topoApply{to: to, began: t0.Add(d)} }
	for _, c := range []struct {
		name        string
		shrink      bool // drawn
		losses      []stockLoss
		ran         []topoApply
		lost, split []string
	}{
		{"no apply", false, []stockLoss{lossAt("n3", 0)}, nil, nil, nil},
		{"shrink drawn, no apply", true, []stockLoss{lossAt("n3", 0)}, nil, nil, nil},
		{"T1 before the loss", false, []stockLoss{lossAt("n3", 0)}, []topoApply{apply("T1", -time.Second)}, []string{"c"}, nil},
		{"T1 after the loss", false, []stockLoss{lossAt("n3", 0)}, []topoApply{apply("T1", time.Second)}, nil, nil},
		{"T1 before another node's loss", false, []stockLoss{lossAt("n1", 0)}, []topoApply{apply("T1", -time.Second)}, nil, nil},
		{"shrink drawn, T1 ran only", true, []stockLoss{lossAt("n1", 0)}, []topoApply{apply("T1", -time.Second)}, nil, nil},
		{"T1 and T2 before n1's loss", true, []stockLoss{lossAt("n1", 0)},
			[]topoApply{apply("T1", -2*time.Second), apply("T2", -time.Second)}, []string{"c"}, []string{"c"}},
		{"T2 after n1's loss", true, []stockLoss{lossAt("n1", 0)},
			[]topoApply{apply("T1", -2*time.Second), apply("T2", time.Second)}, nil, []string{"c"}},
		{"T1 and T2 before n3's loss", true, []stockLoss{lossAt("n3", 0)},
			[]topoApply{apply("T1", -2*time.Second), apply("T2", -time.Second)}, []string{"c", "d"}, []string{"c"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := newObserved()
			o.shrink, o.stockLosses, o.ran = c.shrink, c.losses, c.ran
			lost, split := w.ranView(o)
			if got := slices.Sorted(maps.Keys(lost)); !slices.Equal(got, c.lost) {
				t.Errorf("routes a loss may have changed %v, want %v", got, c.lost)
			}
			if got := slices.Sorted(maps.Keys(split)); !slices.Equal(got, c.split) {
				t.Errorf("split routes %v, want %v", got, c.split)
			}
		})
	}
}

// TestAppliedRecordsWhatRan: an apply is recorded as one that ran once
// it knew its epoch (every write of an apply comes after that), not when
// it failed before (reading the nodes, connecting), and every apply is
// counted.
func TestAppliedRecordsWhatRan(t *testing.T) {
	o := newObserved()
	o.applied("T1", time.Now(), topology.Report{}, nil)
	if o.ranTo("T1") || o.applies != 1 {
		t.Fatalf("an apply that failed before its epoch: ran %v, applies %d; want not ran, 1", o.ran, o.applies)
	}
	o.applied("T2", time.Now(), topology.Report{FromEpoch: 2, ToEpoch: 3}, nil)
	if !o.ranTo("T2") || o.ranTo("T1") || o.applies != 2 {
		t.Fatalf("an apply of T2 at epoch 3: ran %v, applies %d; want T2 only, 2", o.ran, o.applies)
	}
	// refused for stale counters before its first write, whatever epoch
	// it knew: counted, not one that ran
	stale := &inventory.StaleCountersError{Epoch: 4, Found: []inventory.StaleCounter{{Node: "n3", Route: "c", Key: "inv:stock:c:s"}}}
	o.applied("T1", time.Now(), topology.Report{FromEpoch: 3, ToEpoch: 4}, fmt.Errorf("apply: %w", stale))
	if len(o.ran) != 1 || o.applies != 3 || o.stale != 1 || o.staleFound != 1 {
		t.Fatalf("an apply refused for a stale counter: ran %v, applies %d, stale %d naming %d; want T2 only, 3, 1, 1", o.ran, o.applies, o.stale, o.staleFound)
	}
}
