package topology

import (
	"fmt"
	"testing"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/router"
)

func TestTopologyFingerprint(t *testing.T) {
	mk := func(routes map[string][]string, weights map[string]int) Topology {
		cfg := config.Default()
		cfg.Nodes = map[string]config.Node{}
		for _, ms := range routes {
			for _, m := range ms {
				w := weights[m]
				if w == 0 {
					w = 1
				}
				cfg.Nodes[m] = config.Node{Addr: m + ":1", Weight: w}
			}
		}
		cfg.Servers = map[string]config.Server{"inventory": {Routes: routes}}
		return Of(&cfg)
	}
	a := mk(map[string][]string{"r": {"n1", "n2"}, "s": {"n3"}}, nil)
	b := mk(map[string][]string{"s": {"n3"}, "r": {"n2", "n1"}}, nil)
	if a.Fingerprint() != b.Fingerprint() {
		t.Fatalf("member and route order changed the fingerprint: %s vs %s", a.Fingerprint(), b.Fingerprint())
	}
	for name, other := range map[string]Topology{
		"weight":       mk(map[string][]string{"r": {"n1", "n2"}, "s": {"n3"}}, map[string]int{"n2": 2}),
		"member added": mk(map[string][]string{"r": {"n1", "n2", "n4"}, "s": {"n3"}}, nil),
		"route moved":  mk(map[string][]string{"r": {"n1", "n2"}, "t": {"n3"}}, nil),
	} {
		if other.Fingerprint() == a.Fingerprint() {
			t.Errorf("%s: fingerprint unchanged", name)
		}
	}
	if got := a.String(); got != "r=[n1 n2] s=[n3]" {
		t.Errorf("String() = %q", got)
	}
	if got := a.Nodes(); len(got) != 3 || got[0] != "n1" || got[2] != "n3" {
		t.Errorf("Nodes() = %v", got)
	}
}

// TestTopologyDiff: the pending change an instance reports names what its
// configuration would add, remove and reweigh, node by node.
func TestTopologyDiff(t *testing.T) {
	m := func(name string, w int) router.Member { return router.Member{Name: name, Weight: w} }
	applied := Topology{Routes: map[string][]router.Member{
		"r": {m("n1", 1), m("n2", 1), m("n3", 1)},
		"s": {m("n3", 1)},
	}}
	for _, tc := range []struct {
		cfg  Topology
		want string
	}{
		{Topology{Routes: map[string][]router.Member{"r": {m("n1", 1), m("n2", 1), m("n3", 1)}, "s": {m("n3", 1)}, "x": {m("n4", 1)}}},
			"+n4 (route x)"},
		{Topology{Routes: map[string][]router.Member{"r": {m("n1", 1), m("n2", 2)}, "x": {m("n1", 1), m("n4", 1), m("n5", 1)}, "y": {m("n4", 1)}}},
			"n1 +route x; n2 weight 1→2; -n3 (route r, route s); +n4 (route x, route y); +n5 (route x)"},
	} {
		if got := Diff(applied, tc.cfg); got != tc.want {
			t.Errorf("Diff(%s, %s) = %q, want %q", applied, tc.cfg, got, tc.want)
		}
	}
}

// TestWeightsTakesTheFirstRoutes: a node listed by several routes with
// different weights (a topology no configuration makes, but a record can
// hold) gets the weight of the first route in name order, every time.
// Before, the last route a map walk met won, so two calls could differ.
func TestWeightsTakesTheFirstRoutes(t *testing.T) {
	m := func(name string, w int) router.Member { return router.Member{Name: name, Weight: w} }
	top := Topology{Routes: map[string][]router.Member{}}
	for i := 0; i < 8; i++ {
		top.Routes[string(rune('a'+i))] = []router.Member{m("n1", i+1), m(fmt.Sprintf("n%d", i+2), 1)}
	}
	for i := 0; i < 50; i++ {
		if w := top.Weights()["n1"]; w != 1 {
			t.Fatalf("Weights()[n1] = %d, want 1 (route a's)", w)
		}
	}
}
