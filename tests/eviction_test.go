package tests

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/router"
)

// A node whose maxmemory-policy can evict keys is not used for inventory
// data: its share of a SKU is skipped, orders homed on it are refused with
// the reason, and its status carries a warning; its cache routes still
// serve. A node without AOF always is warned about (issue 9, items 2-3).
func TestEvictingNodeRefusedForInventory(t *testing.T) {
	t.Parallel()
	safe := redistest.StartN(t, 2, redistest.Options{AOF: true})
	lru := redistest.Start(t, redistest.Options{AOF: true, Args: []string{"--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"}})
	nodes := map[string]string{"n1": safe[0].Addr(), "n2": safe[1].Addr(), "n3": lru.Addr()}
	all := []string{"n1", "n2", "n3"}
	cfg := newConfig(t, nodes, map[string]config.Server{
		"inventory": server(config.OnNodeDownFail, map[string][]string{"r": all}),
		"cache":     server(config.OnNodeDownFail, map[string][]string{"s": all}),
	}, &quickHealth)
	r, _ := startRouter(t, cfg)
	inv, err := inventory.New(r, inventory.Options{Logger: invDiscard})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	lvl, err := inv.LoadStock(ctx, "r", "ev", 90, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range lvl.Nodes {
		if ns.Node == "n3" && ns.Loaded != 0 {
			t.Errorf("the evicting node n3 got %d units of stock", ns.Loaded)
		}
	}
	// Orders whose record would live on n3 are refused, naming the policy;
	// the others succeed and take nothing from n3.
	var refused, ok int
	for i := 0; i < 40; i++ {
		id := "ev-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		res, err := inv.Reserve(ctx, id, []inventory.Item{invItem("r", "ev", 1)}, "", 0)
		switch {
		case err == nil:
			ok++
			for _, rc := range res.Receipts {
				if rc.Node == "n3" {
					t.Errorf("order %s took stock on the evicting node n3", id)
				}
			}
		case errors.Is(err, router.ErrUnavailable) && strings.Contains(err.Error(), "allkeys-lru"):
			refused++
		default:
			t.Fatalf("Reserve %s: %v", id, err)
		}
	}
	if ok == 0 || refused == 0 {
		t.Errorf("of 40 orders %d succeeded and %d were refused for n3's eviction policy; want both", ok, refused)
	}

	// The cache route still uses n3.
	var onN3 bool
	set, _ := r.Set("cache", "s")
	for i := 0; i < 50 && !onN3; i++ {
		n, err := set.Pick("k" + string(rune('a'+i)))
		if err != nil {
			t.Fatal(err)
		}
		onN3 = n.Name() == "n3"
	}
	if !onN3 {
		t.Error("no cache key went to n3: an evicting node must still serve cache routes")
	}
	for _, st := range r.Status() {
		switch st.Name {
		case "n3":
			if st.Settings.MaxmemoryPolicy != "allkeys-lru" || !strings.Contains(st.Warning, "can evict keys") {
				t.Errorf("n3 status: settings %+v warning %q; want allkeys-lru and an eviction warning", st.Settings, st.Warning)
			}
		default:
			if !st.Settings.Safe() || st.Warning != "" {
				t.Errorf("%s status: settings %+v warning %q; want AOF always, aof-load-truncated no and no warning", st.Name, st.Settings, st.Warning)
			}
		}
	}
}

// A node without AOF is warned about in its status (inventory data).
func TestNonDurableNodeWarned(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{}) // no AOF
	cfg := newConfig(t, map[string]string{"n1": srv.Addr()},
		map[string]config.Server{"inventory": server(config.OnNodeDownFail, map[string][]string{"r": {"n1"}})}, &quickHealth)
	r, _ := startRouter(t, cfg)
	st := r.Status()[0]
	if st.Settings.Durable() || !strings.Contains(st.Warning, "appendonly no") {
		t.Errorf("status of a node without AOF: settings %+v warning %q; want a persistence warning", st.Settings, st.Warning)
	}
}

// A node with AOF always that would load an AOF cut inside a script's
// writes (aof-load-truncated yes, Redis's default) is warned about: a
// later restart could apply half a script (node.Settings.LoadsTornScripts).
func TestTornScriptLoaderWarned(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{AOF: true, Args: []string{"--aof-load-truncated", "yes"}})
	cfg := newConfig(t, map[string]string{"n1": srv.Addr()},
		map[string]config.Server{"inventory": server(config.OnNodeDownFail, map[string][]string{"r": {"n1"}})}, &quickHealth)
	r, _ := startRouter(t, cfg)
	st := r.Status()[0]
	if !st.Settings.Durable() || st.Settings.Safe() || !strings.Contains(st.Warning, "aof-load-truncated yes") {
		t.Errorf("status of a node with aof-load-truncated yes: settings %+v warning %q; want durable, not safe, and a warning naming the setting", st.Settings, st.Warning)
	}
}

// LoadStock on a route none of whose nodes may hold inventory data names
// every node and why it is not used (the eviction policy, a drained
// route), instead of a bare "no enabled, usable node" (safety issue B12).
func TestLoadStockRefusalNamesNodes(t *testing.T) {
	t.Parallel()
	safe := redistest.Start(t, redistest.Options{AOF: true})
	lru := redistest.Start(t, redistest.Options{AOF: true, Args: []string{"--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"}})
	cfg := newConfig(t, map[string]string{"n1": lru.Addr(), "n2": safe.Addr()}, map[string]config.Server{
		"inventory": server(config.OnNodeDownFail, map[string][]string{"r": {"n1"}, "both": {"n1", "n2"}}),
	}, &quickHealth)
	r, _ := startRouter(t, cfg)
	inv, err := inventory.New(r, inventory.Options{Logger: invDiscard})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = inv.LoadStock(ctx, "r", "ev", 10, 0)
	want := `route "r" has no usable node: n1: maxmemory-policy allkeys-lru evicts keys: not used for inventory data (set noeviction)`
	if !errors.Is(err, router.ErrUnavailable) || err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("LoadStock on a route of one evicting node: %v; want ErrUnavailable with %q", err, want)
	}
	if err := r.SetRouteEnabled(ctx, "n2", "inventory", "both", false); err != nil {
		t.Fatal(err)
	}
	_, err = inv.LoadStock(ctx, "both", "ev", 10, 0)
	for _, w := range []string{"n1: maxmemory-policy allkeys-lru evicts keys", "n2: drained"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Fatalf("LoadStock on a route of an evicting node and a drained one: %v; want it to say %q", err, w)
		}
	}
}
