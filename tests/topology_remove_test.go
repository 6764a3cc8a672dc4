package tests

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/rollback"
	"github.com/shardis/shardis/router"
	"github.com/shardis/shardis/topology"
)

// Removing an inventory node that holds what is easy to strand: stock with
// a zero counter, and promised parts of one-round reservations whose
// attempt died before taking them (safety issue items A2 and A3).

// topoRemoveHealth gives probes time on a loaded machine: these tests
// need no fast failure detection.
var topoRemoveHealth = config.Health{
	Heartbeat: 200 * time.Millisecond,
	Timeout:   2 * time.Second,
	Backoff:   []time.Duration{100 * time.Millisecond, 200 * time.Millisecond},
}

// stopAt is an inventory.Faults that stops every actor at one crash point.
type stopAt string

func (stopAt) Call(_ context.Context, _ inventory.ScriptCall, send func() (any, error)) (any, error) {
	return send()
}

func (s stopAt) Crash(_ context.Context, point string) bool { return point == string(s) }

// withoutNode returns cfg with routes and without the node gone, so an
// instance of it does not know that node.
func withoutNode(t *testing.T, cfg *config.Config, gone string, routes map[string][]string) *config.Config {
	t.Helper()
	out := *cfg
	out.Nodes = map[string]config.Node{}
	for name, n := range cfg.Nodes {
		if name != gone {
			out.Nodes[name] = n
		}
	}
	out.Servers = map[string]config.Server{invServer: {OnNodeDown: config.OnNodeDownFail, Routes: routes}}
	if err := out.Validate(); err != nil {
		t.Fatalf("topology config: %v", err)
	}
	return &out
}

// A node whose stock has nothing sold (confirmed 0) leaves: the apply
// finishes in one run, and the stock over the remaining nodes adds up.
func TestTopologyRemoveNodeNothingSold(t *testing.T) {
	c := newInvCluster(t, invOpts{nodes: 4, health: &topoRemoveHealth})
	c.load("r", "z", 400, 0)
	to := withoutNode(t, c.cfg, "n4", map[string][]string{"r": {"n1", "n2", "n3"}})
	rep := applyTopology(t, to, c.cfg, 5*time.Second, topology.PhaseStable)
	if rep.StockMoved != 1 {
		t.Fatalf("report = %+v, want n4's stock of z moved", rep)
	}
	if rep := applyTopology(t, to, c.cfg, time.Second, topology.PhaseStable); !rep.AlreadyApplied {
		t.Fatalf("rerun = %+v, want already applied", rep)
	}
	_, inv := c.newInventoryFor(t, to, nil)
	ctx := invCtx(t, 10*time.Second)
	lvl, err := inv.GetStock(ctx, "r", "z")
	if err != nil {
		t.Fatal(err)
	}
	if lvl.Loaded != 400 || lvl.Available != 400 || lvl.Reserved != 0 || lvl.Confirmed != 0 {
		t.Fatalf("z over n1..n3 = %+v, want all 400 available", lvl)
	}
	v, _ := c.clients["n4"].HGetAll(ctx, "inv:stock:r:z").Result()
	if v["available"] != "0" || v["confirmed"] != "0" || v["loaded"] != "0" {
		t.Fatalf("n4 still counts z: %v", v)
	}
}

// One-round reservations homed on n1 stop after their stage: n1's part
// taken, the promised parts on n2 and n3 never. The apply removes n3.
// Afterwards Confirm, Cancel, a retry and the reconciler of the new
// topology each finish an order, nothing stays reserved, and the stock adds
// up.
func TestTopologyRemoveNodeStagedOrders(t *testing.T) {
	c := newInvCluster(t, invOpts{health: &topoRemoveHealth, routes: map[string][]string{"a": {"n1"}, "b": {"n2"}, "c": {"n3"}}})
	for _, rt := range []string{"a", "b", "c"} {
		c.load(rt, "s", 100, 0)
	}
	ctx := invCtx(t, 30*time.Second)
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	r, err := router.New(rctx, c.cfg, router.Options{KeepData: c.cfg.KeepData(), Logger: invDiscard})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	crashing, err := inventory.New(r, inventory.Options{Logger: invDiscard, AttemptLease: c.lease, Faults: stopAt("staged:stage-only")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(crashing.Close)
	items := []inventory.Item{invItem("a", "s", 1), invItem("b", "s", 2), invItem("c", "s", 3)}
	ids := map[string]string{}
	for _, role := range []string{"confirm", "cancel", "retry", "reconcile"} {
		ids[role] = c.orderIDWith(role, func(id string) bool { return c.home(id) == "n1" })
		if _, err := crashing.Reserve(ctx, ids[role], items, "", time.Second); !errors.Is(err, inventory.ErrCrashed) {
			t.Fatalf("Reserve %s stopped after its stage: %v", ids[role], err)
		}
	}

	to := withoutNode(t, c.cfg, "n3", map[string][]string{"a": {"n1"}, "b": {"n2"}, "c": {"n2"}})
	applyTopology(t, to, c.cfg, 10*time.Second, topology.PhaseStable)
	q := rollback.NewQueue()
	_, inv := c.newInventoryFor(t, to, q)
	rec := c.reconciler(inv, q, rollback.Settings{Interval: 100 * time.Millisecond})
	rec.Start()

	if _, err := inv.Confirm(ctx, ids["confirm"]); !errors.Is(err, inventory.ErrNotFound) {
		t.Errorf("Confirm after the apply = %v, want ErrNotFound (its attempt failed)", err)
	}
	if out, err := inv.Cancel(ctx, ids["cancel"]); err != nil || out.Status != inventory.StatusCancelled {
		t.Errorf("Cancel after the apply = %+v, %v; want cancelled", out, err)
	}
	if res, err := inv.Reserve(ctx, ids["retry"], items, "", time.Minute); err != nil || len(res.Receipts) != 3 {
		t.Errorf("retry after the apply = %+v, %v; want reserved", res, err)
	} else if out, err := inv.Confirm(ctx, ids["retry"]); err != nil || out.Status != inventory.StatusConfirmed {
		t.Errorf("Confirm of the retry = %+v, %v", out, err)
	}
	// The reconciler leaves nothing pending (the crashed attempts' parts
	// fall due 2 s after their reserve at the latest).
	deadline := time.Now().Add(10 * time.Second)
	for {
		var pending int64
		for _, n := range []string{"n1", "n2"} {
			p, _ := c.clients[n].ZCard(ctx, inventory.PendingKey).Result()
			pending += p
		}
		if pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d parts still pending on n1, n2 10 s after the apply (reconciler %+v)", pending, rec.Stats())
		}
		time.Sleep(100 * time.Millisecond)
	}
	for role, id := range ids {
		f, _ := inventory.ReadOrder(ctx, c.clients["n1"], id).Fields()
		st := f["status"]
		if st == "staging" {
			t.Errorf("order %s (%s) is still staging after the apply", id, role)
		}
	}
	for rt, confirmed := range map[string]int64{"a": 1, "b": 2, "c": 3} {
		lvl, err := inv.GetStock(ctx, rt, "s")
		if err != nil {
			t.Fatal(err)
		}
		if lvl.Loaded != 100 || lvl.Reserved != 0 || lvl.Confirmed != confirmed || lvl.Available != 100-confirmed {
			t.Errorf("route %s after the apply = %+v, want %d of 100 confirmed (the retry), none reserved", rt, lvl, confirmed)
		}
	}
}
