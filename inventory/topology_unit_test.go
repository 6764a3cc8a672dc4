package inventory

import (
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
		return TopologyOf(&cfg)
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

func TestParseQuotaKey(t *testing.T) {
	for _, c := range []struct{ route, sku, user string }{
		{"r", "X", ":9"}, {"r", "X:", "9"}, {"clothes", "sku:1:2", "u:1"}, {"r", "", "u"},
	} {
		k := quotaKey(c.route, c.sku, c.user)
		sku, user, ok := parseQuotaKey(c.route, k)
		if !ok || sku != c.sku || user != c.user {
			t.Errorf("parseQuotaKey(%q) = %q, %q, %v; want %q, %q", k, sku, user, ok, c.sku, c.user)
		}
	}
	for _, k := range []string{"inv:quota:r:", "inv:quota:r:5:abc:u", "inv:quota:r:x:a:b", "inv:quota:other:1:a:b", "inv:quota:r:-1:a:b"} {
		if _, _, ok := parseQuotaKey("r", k); ok {
			t.Errorf("parseQuotaKey(%q) accepted a malformed key", k)
		}
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
		if got := topologyDiff(applied, tc.cfg); got != tc.want {
			t.Errorf("topologyDiff(%s, %s) = %q, want %q", applied, tc.cfg, got, tc.want)
		}
	}
}
