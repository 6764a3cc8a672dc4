package tests

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/internal/stack"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/topology"
)

// With durability replica, what `shardis topology apply` writes on a
// joining node must survive a failover of that node once the apply
// acknowledged it, as every other acknowledged write does. The apply
// copies the route's per-user limits to the joining node (CopyLimits),
// then moves it to the new epoch. Here the joining node n2 is a Sentinel
// group whose only replica is cut off during the apply, then its master is
// killed and the stale replica promoted. An apply that answered success
// while no replica had the copied limits leaves n2 without them: the users
// whose quota counter lives on n2 buy past the per-user limit.
func TestSentinelTopologyApplyLimitsSurviveFailover(t *testing.T) {
	t.Parallel()
	const pw = "grouppw"
	// n1: a standalone master with a plain replica (WAIT 1 is answered).
	s1 := redistest.Start(t, redistest.Options{})
	s1r := redistest.Start(t, redistest.Options{})
	host, port, _ := strings.Cut(s1.Addr(), ":")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := s1r.Client(t).ReplicaOf(ctx, host, port).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "n1's replica in sync", func() bool {
		info, _ := s1.Client(t).Info(ctx, "replication").Result()
		return strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online")
	})
	// n2: the joining node, a Sentinel group.
	g := redistest.StartGroup(t, redistest.GroupOptions{Name: "topo-durable", Password: pw})
	n2cfg := sentinelNode(g, "")
	n2cfg.Password = pw

	base := config.Default()
	base.Nodes = map[string]config.Node{"n1": {Addr: s1.Addr(), Weight: 1}, "n2": n2cfg}
	base.Health = sentinelHealth
	base.Inventory.ReconcileInterval = 100 * time.Millisecond
	base.Inventory.ReservationTTL = time.Minute
	base.Inventory.Durability = config.DurabilityReplica
	base.Inventory.DurabilityTimeout = 300 * time.Millisecond
	withRoute := func(members ...string) *config.Config {
		c := base
		c.Servers = map[string]config.Server{invServer: server(config.OnNodeDownFail, map[string][]string{"r": members})}
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		return &c
	}
	from, to := withRoute("n1"), withRoute("n1", "n2")

	logger := slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelError}))
	// An instance of the current configuration initialises epoch 1 (n1
	// alone) and loads the stock, limited to 2 units per user.
	st0, err := stack.Open(ctx, from, stack.Options{Logger: logger})
	if err != nil {
		t.Fatalf("stack.Open: %v", err)
	}
	t.Cleanup(func() { _ = st0.Close() })
	waitFor(t, 10*time.Second, "epoch 1 initialised", func() bool {
		s := st0.Inventory.TopologyStatus(ctx)
		return s.Ready && s.Epoch == 1
	})
	if _, err := st0.Inventory.LoadStock(ctx, "r", "lim", 1000, 2); err != nil {
		t.Fatalf("LoadStock: %v", err)
	}
	// An instance of the new configuration: it serves the applied
	// topology (n1 alone) until the apply, and stamps n2.
	st, err := stack.Open(ctx, to, stack.Options{Logger: logger})
	if err != nil {
		t.Fatalf("stack.Open: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	inv := st.Inventory
	n2, _ := st.Router.Node("n2")
	waitFor(t, 20*time.Second, "n2 usable", func() bool { return n2.Usable() })
	waitReady(t, inv)
	if s := inv.TopologyStatus(ctx); !s.Ready || s.Epoch != 1 {
		t.Fatalf("new instance before the apply: %+v, want ready at epoch 1", s)
	}

	// Everything n2 holds so far (its stamp) is on its replica; then the
	// replica is cut off: it cannot authenticate again.
	master := g.Master()
	mc := g.Client(t, master)
	if err := mc.Set(ctx, "sync-marker", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := mc.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n < 1 {
		t.Fatalf("n2's replica not in sync: %d, %v", n, err)
	}
	rc := cutReplica(t, ctx, g)

	apply := func() (topology.Report, error) {
		actx, acancel := context.WithTimeout(ctx, 30*time.Second)
		defer acancel()
		return inventory.ApplyTopology(actx, inventory.ApplyOptions{To: to, From: from, Logger: logger, Wait: 5 * time.Second})
	}
	rep, err := apply()
	t.Logf("apply while n2's replica is cut off: phase %q, limits copied %d, err %v", rep.Phase, rep.LimitsCopied, err)
	limitOnMaster, _ := mc.HGet(ctx, "inv:stock:r:lim", "limit").Result()
	t.Logf("limit field of n2's stock hash on its master before the failover: %q", limitOnMaster)

	// n2's master dies; the replica, which never received what the apply
	// wrote, is promoted.
	failOverToCutReplica(t, ctx, g, rc, pw, n2, 30*time.Second)

	// The operator runs the apply again until it reports the topology
	// applied (a no-op, or it brings n2 forward, or it applies it).
	var final topology.Report
	waitFor(t, 30*time.Second, "the topology applied", func() bool {
		final, err = apply()
		if err != nil {
			t.Logf("apply after the failover: %v", err)
			time.Sleep(200 * time.Millisecond)
		}
		return err == nil && final.Phase == topology.PhaseStable
	})
	t.Logf("apply after the failover: %+v", final)
	waitFor(t, 10*time.Second, "the instance ready at epoch 2", func() bool {
		s := inv.TopologyStatus(ctx)
		return s.Ready && s.Epoch == 2
	})
	pc := g.Client(t, g.Master())
	limitAfter, _ := pc.HGet(ctx, "inv:stock:r:lim", "limit").Result()
	t.Logf("limit field of n2's stock hash after the failover: %q", limitAfter)

	// Every user asks for 3 units of a SKU limited to 2 per user.
	var over []string
	for i := 0; i < 30; i++ {
		user := fmt.Sprintf("u-%d", i)
		var rerr error
		waitFor(t, 20*time.Second, "a definite answer to "+user+"'s Reserve", func() bool {
			_, rerr = inv.Reserve(ctx, "o-"+user, []inventory.Item{invItem("r", "lim", 3)}, user, time.Minute)
			return !errors.Is(rerr, inventory.ErrUnavailable)
		})
		switch {
		case errors.Is(rerr, inventory.ErrLimitExceeded):
		case rerr == nil:
			over = append(over, user)
		default:
			t.Fatalf("Reserve for %s: %v", user, rerr)
		}
	}
	if len(over) > 0 {
		t.Errorf("%d of 30 users reserved 3 units of a SKU limited to 2 per user after the failover: %v "+
			"(the apply acknowledged the per-user limits it copied to n2 though no replica had them)", len(over), over)
	}
}
