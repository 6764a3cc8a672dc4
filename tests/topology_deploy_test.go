package tests

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/service"
	"github.com/shardis/shardis/internal/syncbuf"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/rollback"
	"github.com/shardis/shardis/router"
	"github.com/shardis/shardis/topology"
)

// A rolling deploy (inventory/served.go): an instance whose configuration
// differs from the topology applied on the nodes serves and reconciles the
// applied one, reports the difference, and moves when it is applied.

// deployConfig returns a copy of c's configuration whose inventory server
// has the given routes.
func (c *invCluster) deployConfig(routes map[string][]string) *config.Config {
	cfg := *c.cfg
	cfg.Servers = map[string]config.Server{invServer: {OnNodeDown: config.OnNodeDownFail, Routes: routes}}
	if err := cfg.Validate(); err != nil {
		c.t.Fatalf("deploy config: %v", err)
	}
	return &cfg
}

// deployHealth tolerates a loaded machine (the 100 ms probe timeout of
// invFastHealth does not always hold while eight test runs share two
// cores).
var deployHealth = config.Health{
	Heartbeat: 100 * time.Millisecond,
	Timeout:   time.Second,
	Backoff:   []time.Duration{100 * time.Millisecond, 200 * time.Millisecond},
}

const wantPending = "pending topology change: config epoch differs: +n4 (route x)"

// TestTopologyRollingDeployServesApplied: instance A serves route r on
// n1..n3 and leaves parts pending; instance B starts with a configuration
// that adds n4 for a new route x; A stops. B must serve r, settle A's
// expired parts, report the pending change, refuse x until the apply, and
// serve x after it.
func TestTopologyRollingDeployServesApplied(t *testing.T) {
	t.Parallel()
	c := newInvCluster(t, invOpts{nodes: 4, routes: map[string][]string{"r": {"n1", "n2", "n3"}}, health: &deployHealth})
	ctx := invCtx(t, 30*time.Second)
	c.load("r", "s", 300, 0)
	// A (c.inv) reserves and never settles: its parts expire after 1 s.
	const heldByA = 20
	for i := 0; i < heldByA; i++ {
		if _, err := c.inv.Reserve(ctx, fmt.Sprintf("a-%d", i), []inventory.Item{invItem("r", "s", 1)}, "", time.Second); err != nil {
			t.Fatalf("Reserve through A: %v", err)
		}
	}

	cfgB := c.deployConfig(map[string][]string{"r": {"n1", "n2", "n3"}, "x": {"n4"}})
	qB := rollback.NewQueue()
	_, b := c.newInventoryFor(t, cfgB, qB)
	c.reconciler(b, qB, rollback.Settings{Interval: 100 * time.Millisecond}).Start()
	// A stops: only B can settle its parts now.
	c.inv.Close()
	if err := c.r.Close(); err != nil {
		t.Fatal(err)
	}

	waitReady(t, b)
	st := b.TopologyStatus(ctx)
	if !st.Ready || st.Epoch != 1 || st.Pending != wantPending {
		t.Fatalf("B's TopologyStatus = %+v, want ready at epoch 1 with Pending %q", st, wantPending)
	}
	if _, err := b.Reserve(ctx, "b-1", []inventory.Item{invItem("r", "s", 2)}, "u", time.Minute); err != nil {
		t.Fatalf("Reserve on route r through B: %v", err)
	}
	if out, err := b.Confirm(ctx, "b-1"); err != nil || out.Status != inventory.StatusConfirmed {
		t.Fatalf("Confirm through B = %+v, %v", out, err)
	}
	_, err := b.Reserve(ctx, "b-x", []inventory.Item{invItem("x", "s", 1)}, "", time.Minute)
	if !errors.Is(err, inventory.ErrNotApplied) || !errors.Is(err, inventory.ErrInvalid) ||
		!strings.Contains(err.Error(), `route "x" is not in the applied topology`) || !strings.Contains(err.Error(), "shardis topology apply") {
		t.Fatalf("Reserve on route x before the apply = %v, want ErrNotApplied naming the route and `shardis topology apply`", err)
	}

	// B's reconciler returns every unit A left pending.
	deadline := time.Now().Add(10 * time.Second)
	for {
		lvl, err := b.GetStock(ctx, "r", "s")
		if err != nil {
			t.Fatalf("GetStock through B: %v", err)
		}
		if lvl.Reserved == 0 && lvl.Confirmed == 2 && lvl.Available == 298 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stock 10s after A's reservations expired = %+v, want 298 available, 2 confirmed, none reserved", lvl)
		}
		time.Sleep(50 * time.Millisecond)
	}

	rep := applyTopology(t, cfgB, nil, 5*time.Second, topology.PhaseStable)
	if rep.ToEpoch != 2 || len(rep.Joined) != 1 || rep.Joined[0] != "n4" {
		t.Fatalf("apply = %+v, want epoch 2 with n4 joining", rep)
	}
	deadline = time.Now().Add(5 * time.Second)
	for {
		st := b.TopologyStatus(ctx)
		if st.Ready && st.Epoch == 2 && st.Pending == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("B 5s after the apply: %+v, want ready at epoch 2 with nothing pending", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := b.LoadStock(ctx, "x", "s", 10, 0); err != nil {
		t.Fatalf("LoadStock on route x after the apply: %v", err)
	}
	if res, err := b.Reserve(ctx, "b-x", []inventory.Item{invItem("x", "s", 1)}, "", time.Minute); err != nil || res.Receipts[0].Node != "n4" {
		t.Fatalf("Reserve on route x after the apply = %+v, %v; want its part on n4", res, err)
	}
	// A's configuration does not give n4 to the inventory: restarted
	// now, it is refused, naming n4.
	r, err := router.New(ctx, c.cfg, router.Options{KeepData: c.cfg.KeepData(), Logger: invDiscard})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var missing *inventory.MissingNodeError
	if _, err := inventory.New(r, inventory.Options{Logger: invDiscard}); !errors.As(err, &missing) || missing.Node != "n4" {
		t.Fatalf("inventory.New with A's configuration after the apply = %v, want a MissingNodeError naming n4", err)
	}
}

// TestTopologyConfigMissingNodeRefused: a configuration that lacks a node
// of the applied topology (not an inventory node, or not named at all) is
// refused at start, naming the node.
func TestTopologyConfigMissingNodeRefused(t *testing.T) {
	c := newInvCluster(t, invOpts{health: &deployHealth})
	ctx := invCtx(t, 10*time.Second)
	notInv := c.deployConfig(map[string][]string{"r": {"n1", "n2"}})
	unnamed := *notInv
	unnamed.Nodes = map[string]config.Node{"n1": c.cfg.Nodes["n1"], "n2": c.cfg.Nodes["n2"]}
	for what, cfg := range map[string]*config.Config{"n3 not an inventory node": notInv, "n3 not named": &unnamed} {
		r, err := router.New(ctx, cfg, router.Options{KeepData: cfg.KeepData(), Logger: invDiscard})
		if err != nil {
			t.Fatal(err)
		}
		_, err = inventory.New(r, inventory.Options{Logger: invDiscard})
		_ = r.Close()
		var missing *inventory.MissingNodeError
		if !errors.As(err, &missing) || missing.Node != "n3" || !errors.Is(err, inventory.ErrTopology) || !strings.Contains(err.Error(), "needs node n3") {
			t.Fatalf("%s: inventory.New = %v, want a MissingNodeError naming n3", what, err)
		}
	}
	if _, err := service.Start(ctx, withListen(notInv), invDiscard); err == nil || !strings.Contains(err.Error(), "needs node n3") {
		t.Fatalf("service.Start with a configuration lacking n3 = %v, want refused naming n3", err)
	}
}

// TestTopologyPendingLoggedOnce: an instance with a pending change logs it
// once, not at every reread.
func TestTopologyPendingLoggedOnce(t *testing.T) {
	c := newInvCluster(t, invOpts{health: &deployHealth})
	ctx := invCtx(t, 10*time.Second)
	cfg := c.deployConfig(map[string][]string{"r": {"n1", "n2", "n3"}, "x": {"n3"}})
	r, err := router.New(ctx, cfg, router.Options{KeepData: cfg.KeepData(), Logger: invDiscard})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var logged syncbuf.Buffer
	inv, err := inventory.New(r, inventory.Options{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	waitReady(t, inv)
	for i := 0; i < 3; i++ {
		if st := inv.TopologyStatus(ctx); !st.Ready || st.Pending != "pending topology change: config epoch differs: n3 +route x" {
			t.Fatalf("TopologyStatus = %+v, want ready with n3 +route x pending", st)
		}
		time.Sleep(300 * time.Millisecond) // past the reread interval: each status rereads the nodes
	}
	if n := strings.Count(logged.String(), "pending topology change"); n != 1 {
		t.Fatalf("the pending change was logged %d times, want once:\n%s", n, logged.String())
	}
}

// withListen returns a copy of cfg listening on a free loopback port.
func withListen(cfg *config.Config) *config.Config {
	c := *cfg
	c.Service.Listen = "127.0.0.1:0"
	return &c
}

// TestTopologySvcPendingReady: a service whose configuration adds a route
// on a new node is ready, says what is pending in /readyz, and exports
// shardis_topology_config_pending 1; the service at the applied topology
// exports 0.
func TestTopologySvcPendingReady(t *testing.T) {
	e := newSvcEnv(t, svcOpts{routes: map[string][]string{"clothes": {"n1", "n2"}}})
	other := *e.cfg
	other.Service.Listen = "127.0.0.1:0"
	other.Servers = map[string]config.Server{invServer: {OnNodeDown: config.OnNodeDownFail,
		Routes: map[string][]string{"clothes": {"n1", "n2"}, "x": {"n3"}}}}
	srv := svcStart(t, &other)
	code, body := svcGet(t, "http://"+srv.Addr()+"/readyz")
	want := "pending topology change: config epoch differs: +n3 (route x)"
	if code != http.StatusOK || !strings.Contains(body, want) {
		t.Fatalf("/readyz of a service with a pending change: %d %q, want 200 with %q", code, body, want)
	}
	code, body = svcGet(t, "http://"+srv.Addr()+"/metrics")
	if code != http.StatusOK || !strings.Contains(body, "\nshardis_topology_config_pending 1\n") {
		t.Fatalf("/metrics of a service with a pending change lacks shardis_topology_config_pending 1 (HTTP %d)", code)
	}
	if m := e.svcMetrics(); m["shardis_topology_config_pending"] != 0 {
		t.Fatalf("shardis_topology_config_pending of the service at the applied topology = %v, want 0", m["shardis_topology_config_pending"])
	}
	if code, body := svcGet(t, e.base+"/readyz"); code != http.StatusOK || strings.Contains(body, "pending") {
		t.Fatalf("/readyz of the service at the applied topology: %d %q", code, body)
	}
}
