package tests

import (
	"context"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
)

// An instance reads the nodes' topology records at once. Two of three
// nodes answer only after 1.5 s (UP: their probe timeout is 5 s), the
// third at once: the instance is ready, serving the topology the third
// holds. Read one after another (when a read had a second), the first
// slow node used the whole second and the others were left unread, so
// the instance refused every call ("no inventory node could be read": a
// CI run on a loaded machine met it through `shardis serve`).
func TestTopologyReadyWithTwoSlowNodes(t *testing.T) {
	t.Parallel()
	srv := redistest.StartN(t, 3, redistest.Options{})
	routes := map[string]config.Server{"inventory": server(config.OnNodeDownFail, map[string][]string{"r": {"n1", "n2", "n3"}})}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// The nodes' first records, written by an instance that reads them
	// directly.
	directInventory(t, srv, routes).Close()

	p1 := startLatencyProxy(t, srv[0].Addr(), 750*time.Millisecond)
	p2 := startLatencyProxy(t, srv[1].Addr(), 750*time.Millisecond)
	r := slowLinkRouter(t, ctx, map[string]string{"n1": p1.Addr(), "n2": p2.Addr(), "n3": srv[2].Addr()}, routes)
	for _, name := range []string{"n1", "n2", "n3"} {
		n, _ := r.Node(name)
		waitFor(t, 30*time.Second, name+" UP", func() bool { return n.State() == node.StateUp })
	}
	// A new command connection of n3 first reads n3's marks off its
	// peers (node/witness.go, dialcheck.go), 1.5 s away: open one now.
	n3, _ := r.Node("n3")
	if err := n3.Client().Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	inv, err := inventory.New(r, inventory.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer inv.Close()
	st := inv.TopologyStatus(ctx) // the first read
	if !st.Ready || st.Epoch != 1 {
		t.Fatalf("TopologyStatus with n1 and n2 1.5 s away, n3 at once = %+v; want ready at epoch 1", st)
	}
}

// An instance that rereads the nodes (here: its configuration differs
// from the applied topology, so it rereads every 250 ms to notice the
// apply) keeps acting on its last view when a reread reads no node at all
// (all three 1.5 s away, past the reread's second, none of them DOWN).
// It used to drop to not ready on every such reread ("no inventory node
// could be read") and refuse calls the nodes still served, only slowly.
func TestTopologyRereadKeepsLastViewWhenNoNodeAnswers(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A route more: a change not applied (pending).
	pending := map[string]config.Server{"inventory": server(config.OnNodeDownFail, map[string][]string{"r": {"n1", "n2", "n3"}, "r2": {"n1"}})}
	r, proxies := slowLinkNodes(t, ctx, pending)
	inv, err := inventory.New(r, inventory.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer inv.Close()
	waitReady(t, inv)
	if st := inv.TopologyStatus(ctx); st.Pending == "" || st.Epoch != 1 {
		t.Fatalf("TopologyStatus = %+v; want ready at epoch 1 with a change pending", st)
	}
	// Warm the connections a reserve's scripts use while the links are fast.
	if _, err := inv.Reserve(ctx, "warm", []inventory.Item{invItem("r", "s", 1)}, "", time.Minute); err != nil {
		t.Fatalf("Reserve before the links slow down: %v", err)
	}

	setDelay(proxies, 750*time.Millisecond)
	time.Sleep(300 * time.Millisecond) // past resyncEvery: the next call rereads
	if st := inv.TopologyStatus(ctx); !st.Ready || st.Epoch != 1 {
		t.Fatalf("TopologyStatus after a reread that read no node = %+v; want still ready at epoch 1", st)
	}
	time.Sleep(300 * time.Millisecond)
	res, err := inv.Reserve(ctx, "slow", []inventory.Item{invItem("r", "s", 1)}, "", time.Minute)
	if err != nil {
		t.Fatalf("Reserve over links 1.5 s slow, after rereads that read no node: %v", err)
	}
	setDelay(proxies, 0)
	if out, err := inv.Confirm(ctx, res.OrderID); err != nil {
		t.Fatalf("Confirm %s: %v (%+v)", res.OrderID, err, out)
	}
}

// directInventory is a ready inventory over srv (n1, n2, ...) reached
// directly, serving servers: it writes the nodes' first topology records.
// The caller closes it.
func directInventory(t *testing.T, srv []*redistest.Server, servers map[string]config.Server) *inventory.Inventory {
	t.Helper()
	r, _ := startRouter(t, newConfig(t, nodeAddrs(srv), servers, nil))
	inv, err := inventory.New(r, inventory.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	waitReady(t, inv)
	return inv
}

// slowLinkRouter is a router over the nodes at addrs (name → address)
// that tolerates links seconds slow: probes time out after 5 s, commands
// after 10 s. It is closed when the test ends.
func slowLinkRouter(t *testing.T, ctx context.Context, addrs map[string]string, servers map[string]config.Server) *router.Router {
	t.Helper()
	h := config.Health{Heartbeat: time.Second, Timeout: 5 * time.Second, Backoff: []time.Duration{time.Second}}
	cfg := newConfig(t, addrs, servers, &h)
	cfg.Client.CommandTimeout = 10 * time.Second
	r, err := router.New(ctx, cfg, router.Options{KeepData: cfg.KeepData(), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}
