package tests

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
)

// slowLinkNodes starts three nodes holding their first topology records
// (applied: one route r on all three, with 30 units of SKU s) behind
// latency proxies with no delay yet, and a router over the proxies,
// configured with servers (nil: the applied ones), whose connections to
// every node are open (a new connection reads its node's marks off the
// peers first).
func slowLinkNodes(t *testing.T, ctx context.Context, servers map[string]config.Server) (*router.Router, []*latencyProxy) {
	t.Helper()
	srv := redistest.StartN(t, 3, redistest.Options{})
	routes := map[string]config.Server{"inventory": server(config.OnNodeDownFail, map[string][]string{"r": {"n1", "n2", "n3"}})}
	if servers == nil {
		servers = routes
	}
	inv0 := directInventory(t, srv, routes)
	if _, err := inv0.LoadStock(ctx, "r", "s", 30, 0); err != nil {
		t.Fatal(err)
	}
	inv0.Close()
	var proxies []*latencyProxy
	addrs := map[string]string{}
	for i, s := range srv {
		p := startLatencyProxy(t, s.Addr(), 0)
		proxies = append(proxies, p)
		addrs[fmt.Sprintf("n%d", i+1)] = p.Addr()
	}
	r := slowLinkRouter(t, ctx, addrs, servers)
	for name := range addrs {
		n, _ := r.Node(name)
		waitFor(t, 30*time.Second, name+" UP", func() bool { return n.State() == node.StateUp })
		if err := n.Client().Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	return r, proxies
}

func setDelay(proxies []*latencyProxy, d time.Duration) {
	for _, p := range proxies {
		p.SetDelay(d)
	}
}

// A new instance whose nodes are all 1.5 s away (round trip) is ready
// after New: a not-ready instance's read gets 3 s. It got a second, so an
// instance on a busy host could refuse its first calls ("no inventory
// node could be read": CI runs met it through `shardis serve`).
func TestTopologyFirstReadOutlastsASecond(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, proxies := slowLinkNodes(t, ctx, nil)
	setDelay(proxies, 750*time.Millisecond)
	inv, err := inventory.New(r, inventory.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer inv.Close()
	if st := inv.TopologyStatus(ctx); !st.Ready || st.Epoch != 1 {
		t.Fatalf("TopologyStatus after New with every node 1.5 s away = %+v; want ready at epoch 1", st)
	}
}

// A not-ready instance (every node 4 s away, past its read's 3 s):
//   - a request that waits while another request's read is under way
//     gives up at its own deadline (it waited for the whole read);
//   - a read that a request's short deadline cut short, no node read, is
//     not kept: the next request, nodes now 300 ms away, reads again at
//     once and finds the instance ready (it met the cut read's "no node
//     could be read" until resyncEvery passed).
func TestTopologyNotReadyReadsAreTheirRequests(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, proxies := slowLinkNodes(t, ctx, nil)
	setDelay(proxies, 2*time.Second)
	inv, err := inventory.New(r, inventory.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer inv.Close()
	if st := inv.TopologyStatus(ctx); st.Ready {
		t.Fatalf("TopologyStatus after New with every node 4 s away = %+v; want not ready", st)
	}

	time.Sleep(300 * time.Millisecond) // past resyncEvery: the next request reads
	longReady := make(chan bool, 1)
	go func() { longReady <- inv.TopologyStatus(ctx).Ready }() // reads for its 3 s
	time.Sleep(200 * time.Millisecond)
	sctx, scancel := context.WithTimeout(ctx, 200*time.Millisecond)
	start := time.Now()
	_, err = inv.Reserve(sctx, "waits", []inventory.Item{invItem("r", "s", 1)}, "", time.Minute)
	took := time.Since(start)
	scancel()
	if !errors.Is(err, inventory.ErrUnavailable) {
		t.Fatalf("Reserve with a 200ms deadline on a not-ready instance: %v; want unavailable", err)
	}
	if took > 1500*time.Millisecond {
		t.Fatalf("Reserve with a 200ms deadline returned after %v: it waited for another request's topology read", took)
	}
	if <-longReady {
		t.Fatal("TopologyStatus ready though every node was 4 s away for its whole read")
	}

	setDelay(proxies, 150*time.Millisecond)
	time.Sleep(300 * time.Millisecond) // past resyncEvery: the next request reads
	sctx, scancel = context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = inv.Reserve(sctx, "cut", []inventory.Item{invItem("r", "s", 1)}, "", time.Minute)
	scancel()
	if err == nil {
		t.Fatal("Reserve with a 100ms deadline over links 300 ms away succeeded")
	}
	if st := inv.TopologyStatus(ctx); !st.Ready || st.Epoch != 1 {
		t.Fatalf("TopologyStatus right after a read cut short by a request's deadline = %+v; want ready at epoch 1 (read again)", st)
	}
	setDelay(proxies, 0)
	res, err := inv.Reserve(ctx, "after", []inventory.Item{invItem("r", "s", 1)}, "", time.Minute)
	if err != nil {
		t.Fatalf("Reserve once ready: %v", err)
	}
	if _, err := inv.Confirm(ctx, res.OrderID); err != nil {
		t.Fatalf("Confirm %s: %v", res.OrderID, err)
	}
}
