package tests

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
)

// TestDrainRoute: a route drained on a node gets no traffic there while the
// node's other routes keep theirs, and re-enabling restores the placement.
func TestDrainRoute(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.StartN(t, 3, redistest.Options{})
	all := []string{"n1", "n2", "n3"}
	cfg := newConfig(t,
		nodeAddrs(srv),
		map[string]config.Server{"product": server(config.OnNodeDownFail,
			map[string][]string{"clothes": all, "electronics": all})},
		&quickHealth)
	r, ev := startRouter(t, cfg)
	waitUp(t, r, ev, all...)
	drained := srv[1].Client(t)

	clothes, _ := r.Set("product", "clothes")
	electronics, _ := r.Set("product", "electronics")
	cKeys, eKeys := keys("clothes", 2000), keys("electronics", 2000)
	placement := func(s *router.Set, ks []string) map[string]string {
		t.Helper()
		out := make(map[string]string, len(ks))
		for _, k := range ks {
			n, err := s.Pick(k)
			if err != nil {
				t.Fatalf("%s Pick(%s): %v", s.Key(), k, err)
			}
			out[k] = n.Name()
		}
		return out
	}
	count := func(p map[string]string, name string) int {
		c := 0
		for _, n := range p {
			if n == name {
				c++
			}
		}
		return c
	}
	cBefore, eBefore := placement(clothes, cKeys), placement(electronics, eKeys)
	t.Logf("before drain: n2 is home of %d/2000 clothes keys and %d/2000 electronics keys",
		count(cBefore, "n2"), count(eBefore, "n2"))

	if err := r.SetRouteEnabled(context.Background(), "n2", "product", "clothes", false); err != nil {
		t.Fatalf("SetRouteEnabled(n2, product, clothes, false): %v", err)
	}
	if st := status(t, r, "n2"); st.Routes[clothes.Key()] || !st.Routes[electronics.Key()] || st.State != node.StateUp {
		t.Errorf("n2 status after drain: state %v routes %v; want up, clothes off, electronics on", st.State, st.Routes)
	}

	cDrained, eDrained := placement(clothes, cKeys), placement(electronics, eKeys)
	moved := 0
	for _, k := range cKeys {
		switch {
		case cDrained[k] == "n2":
			t.Fatalf("clothes key %s picked drained n2", k)
		case cBefore[k] == "n2":
			moved++
			// Draining moves the key to its next candidate, even with
			// policy fail: draining is a decision, not a failure.
			if want := clothes.Candidates(k)[1].Name(); cDrained[k] != want {
				t.Fatalf("drained clothes key %s went to %s, want next candidate %s", k, cDrained[k], want)
			}
		case cDrained[k] != cBefore[k]:
			t.Fatalf("clothes key %s not homed on n2 moved %s → %s", k, cBefore[k], cDrained[k])
		}
	}
	for _, k := range eKeys {
		if eDrained[k] != eBefore[k] {
			t.Fatalf("electronics key %s moved %s → %s when clothes was drained on n2", k, eBefore[k], eDrained[k])
		}
	}
	onN2 := count(eDrained, "n2")
	t.Logf("after drain: %d clothes keys moved off n2, %d electronics keys still on n2", moved, onN2)
	if moved == 0 || onN2 == 0 {
		t.Fatal("test is vacuous: n2 homes no clothes or no electronics key")
	}

	// Write every clothes key through the router: no SET reaches n2.
	setsBefore := setCalls(t, drained)
	for _, k := range cKeys {
		c, err := r.Client("product", "clothes", k)
		if err != nil {
			t.Fatalf("Client(clothes, %s): %v", k, err)
		}
		if err := c.Set(ctx, k, "x", 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	if got := setCalls(t, drained) - setsBefore; got != 0 {
		t.Errorf("drained n2 received %d SETs of clothes keys, want 0", got)
	}
	if got := countKeys(t, drained, "clothes:*"); got != 0 {
		t.Errorf("drained n2 holds %d clothes keys, want 0", got)
	}
	// Electronics keys still reach n2.
	setsBefore = setCalls(t, drained)
	for _, k := range eKeys {
		c, err := r.Client("product", "electronics", k)
		if err != nil {
			t.Fatalf("Client(electronics, %s): %v", k, err)
		}
		if err := c.Set(ctx, k, "x", 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	if got := setCalls(t, drained) - setsBefore; got != onN2 {
		t.Errorf("n2 received %d SETs of electronics keys, want %d", got, onN2)
	}
	if got := countKeys(t, drained, "electronics:*"); got != onN2 {
		t.Errorf("n2 holds %d electronics keys, want %d", got, onN2)
	}

	// Draining the route on every node leaves it unavailable.
	for _, name := range []string{"n1", "n3"} {
		if err := r.SetRouteEnabled(context.Background(), name, "product", "clothes", false); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Pick("product", "clothes", cKeys[0]); !errors.Is(err, router.ErrUnavailable) {
		t.Errorf("Pick with the route drained everywhere: err = %v, want ErrUnavailable", err)
	}
	for _, name := range all {
		if err := r.SetRouteEnabled(context.Background(), name, "product", "clothes", true); err != nil {
			t.Fatalf("re-enabling clothes on %s: %v", name, err)
		}
	}
	cAfter, eAfter := placement(clothes, cKeys), placement(electronics, eKeys)
	for _, k := range cKeys {
		if cAfter[k] != cBefore[k] {
			t.Fatalf("after re-enable clothes key %s is on %s, originally %s", k, cAfter[k], cBefore[k])
		}
	}
	for _, k := range eKeys {
		if eAfter[k] != eBefore[k] {
			t.Fatalf("after re-enable electronics key %s is on %s, originally %s", k, eAfter[k], eBefore[k])
		}
	}
}

func TestSetRouteEnabledErrors(t *testing.T) {
	t.Parallel()
	srv := redistest.StartN(t, 2, redistest.Options{})
	cfg := newConfig(t,
		map[string]string{"n1": srv[0].Addr(), "n2": srv[1].Addr()},
		map[string]config.Server{
			"order":   server(config.OnNodeDownFail, map[string][]string{"eu": {"n1"}}),
			"product": server(config.OnNodeDownFail, map[string][]string{"clothes": {"n1", "n2"}}),
		}, &quickHealth)
	r, _ := startRouter(t, cfg)
	for _, tc := range []struct {
		node, server, route string
		want                error
	}{
		{"n9", "order", "eu", router.ErrUnknownNode},
		{"n1", "nope", "eu", router.ErrUnknownRoute},
		{"n1", "order", "us", router.ErrUnknownRoute},
		{"n2", "order", "eu", node.ErrUnknownRoute}, // n2 does not serve order/eu
	} {
		if err := r.SetRouteEnabled(context.Background(), tc.node, tc.server, tc.route, false); !errors.Is(err, tc.want) {
			t.Errorf("SetRouteEnabled(%s, %s, %s) = %v, want %v", tc.node, tc.server, tc.route, err, tc.want)
		}
	}
	if _, err := r.Client("order", "us", "k"); !errors.Is(err, router.ErrUnknownRoute) {
		t.Errorf("Client for an unknown route: err = %v, want ErrUnknownRoute", err)
	}
}

// TestPipelinesAndScripts: a TxPipeline and a Lua script run on a routed
// client reach the key's node.
func TestPipelinesAndScripts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.StartN(t, 2, redistest.Options{})
	cfg := newConfig(t,
		map[string]string{"n1": srv[0].Addr(), "n2": srv[1].Addr()},
		map[string]config.Server{"order": server(config.OnNodeDownFail, map[string][]string{"eu": {"n1", "n2"}})},
		&quickHealth)
	r, ev := startRouter(t, cfg)
	waitUp(t, r, ev, "n1", "n2")
	direct := map[string]*redis.Client{"n1": srv[0].Client(t), "n2": srv[1].Client(t)}
	set, _ := r.Set("order", "eu")
	incrBy := redis.NewScript(`
local v = redis.call('INCRBY', KEYS[1], ARGV[1])
redis.call('RPUSH', KEYS[2], v)
return v`)

	for _, name := range []string{"n1", "n2"} {
		key := keysHomedOn(t, set, name, "order", 1)[0]
		// Hash tags keep the key's companions on the same node.
		tag := "{" + key + "}"
		c, err := r.Client("order", "eu", tag)
		if err != nil {
			t.Fatalf("Client(%s): %v", tag, err)
		}
		home, _ := r.Pick("order", "eu", tag+":a")
		if home.Name() != name {
			t.Fatalf("hash-tagged key %s:a picked %s, want %s (home of %s)", tag, home.Name(), name, key)
		}
		var incr *redis.IntCmd
		var get *redis.StringCmd
		_, err = c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, tag+":a", "1", 0)
			incr = p.Incr(ctx, tag+":a")
			get = p.Get(ctx, tag+":a")
			return nil
		})
		if err != nil || incr.Val() != 2 || get.Val() != "2" {
			t.Fatalf("TxPipelined on %s: err %v, INCR %d, GET %q; want nil, 2, \"2\"", home.Name(), err, incr.Val(), get.Val())
		}
		for i, want := range []int64{5, 10} {
			got, err := incrBy.Run(ctx, c, []string{tag + ":n", tag + ":log"}, 5).Int64()
			if err != nil || got != want {
				t.Fatalf("script run %d on %s: %d, %v; want %d", i, home.Name(), got, err, want)
			}
		}
		// The writes landed on the picked node.
		d := direct[home.Name()]
		if v, err := d.Get(ctx, tag+":a").Result(); err != nil || v != "2" {
			t.Errorf("%s:a on %s directly = %q, %v; want 2", tag, home.Name(), v, err)
		}
		if l, err := d.LRange(ctx, tag+":log", 0, -1).Result(); err != nil || len(l) != 2 || l[1] != "10" {
			t.Errorf("%s:log on %s directly = %v, %v; want [5 10]", tag, home.Name(), l, err)
		}
		t.Logf("key %s on %s: TxPipeline and script OK", tag, home.Name())
	}
}

// TestSetSpread: the selection for data spread over every node of a route
// takes the enabled nodes the caller accepts, the given first node at the
// front, the others in the key's candidate order; a drained node and a
// node the caller refuses are left out, whatever the node-down policy.
// SpreadsFirst agrees with Spread's first node for every key, node and
// filter.
func TestSetSpread(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.StartN(t, 3, redistest.Options{})
	all := []string{"n1", "n2", "n3"}
	cfg := newConfig(t,
		nodeAddrs(srv),
		map[string]config.Server{"product": server(config.OnNodeDownFail, map[string][]string{"clothes": all})},
		&quickHealth)
	r, ev := startRouter(t, cfg)
	waitUp(t, r, ev, all...)
	set, _ := r.Set("product", "clothes")
	names := func(ns []*node.Node) []string {
		out := make([]string, len(ns))
		for i, n := range ns {
			out[i] = n.Name()
		}
		return out
	}
	for _, key := range keys("spread", 50) {
		cands := names(set.Candidates(key))
		if got := names(set.Spread(key, nil, nil)); !slices.Equal(got, cands) {
			t.Fatalf("Spread(%q, nil, nil) = %v, want the candidates %v", key, got, cands)
		}
		last := set.Candidates(key)[2]
		want := append([]string{last.Name()}, cands[:2]...)
		if got := names(set.Spread(key, last, nil)); !slices.Equal(got, want) {
			t.Fatalf("Spread(%q, %s, nil) = %v, want %v", key, last.Name(), got, want)
		}
		// AppendSpread leaves what dst held in front and orders its own
		// nodes as Spread does (first moved to the front of them)
		n1, _ := r.Node("n1")
		prefix := []*node.Node{n1, n1}
		got := names(set.AppendSpread(prefix, key, last, nil))
		if wantApp := append([]string{"n1", "n1"}, want...); !slices.Equal(got, wantApp) {
			t.Fatalf("AppendSpread([n1 n1], %q, %s, nil) = %v, want %v", key, last.Name(), got, wantApp)
		}
	}
	if err := r.SetRouteEnabled(ctx, "n2", "product", "clothes", false); err != nil {
		t.Fatal(err)
	}
	notN1 := func(n *node.Node) bool { return n.Name() != "n1" }
	n2, _ := r.Node("n2")
	for _, key := range keys("spread", 50) {
		if got := names(set.Spread(key, n2, notN1)); !slices.Equal(got, []string{"n3"}) {
			t.Fatalf("Spread(%q) with n2 drained and n1 refused = %v, want [n3]", key, got)
		}
	}
	spreadsFirst(t, set, keys("spread", 20), notN1)
	if err := r.SetRouteEnabled(ctx, "n2", "product", "clothes", true); err != nil {
		t.Fatal(err)
	}
	spreadsFirst(t, set, keys("spread", 20), notN1)
}

// spreadsFirst checks set.SpreadsFirst against set.Spread for every node
// of the set and a node outside it, with no filter and with accept.
func spreadsFirst(t *testing.T, set *router.Set, keys []string, accept func(*node.Node) bool) {
	t.Helper()
	outside, err := node.New(node.Options{Name: "outside", Addr: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = outside.Close() }()
	for _, first := range append(slices.Clone(set.Nodes()), outside) {
		for _, acc := range []func(*node.Node) bool{nil, accept} {
			for _, key := range keys {
				s := set.Spread(key, first, acc)
				if want := len(s) > 0 && s[0] == first; set.SpreadsFirst(first, acc) != want {
					t.Fatalf("SpreadsFirst(%s, filter %v) = %v, but Spread(%q) = %v", first.Name(), acc != nil, !want, key, s)
				}
			}
		}
	}
}
