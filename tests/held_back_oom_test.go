package tests

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
)

// A full node (maxmemory, noeviction) that restarts with its data is
// still full. SECURITY.md's out-of-memory row: "the node stays UP, its
// breaker closed, reads (GetStock, probes) work", and what only settles
// what the node holds (confirm, cancel, expiry) runs on it, "so held
// stock goes back by the usual deadlines while it is full". The stamp
// script writes the stamp's run and run_at on its first read on a new
// server process (the hold-back); its HSET, a denyoom write as the
// script's first write, was refused on a node over its maxmemory, so every
// probe and dial check failed with OOM and the units its reservations hold
// could not be released (Cancel failed) until someone freed memory by
// hand. A write that takes no memory goes first now (found by a review).
func TestFullNodeComesBackAfterARestart(t *testing.T) {
	t.Parallel()
	// n1 starts with a maxmemory its data will exceed once filled below
	srv := []*redistest.Server{
		redistest.Start(t, redistest.Options{Args: []string{"--maxmemory", "24mb", "--maxmemory-policy", "noeviction"}}),
		redistest.Start(t, redistest.Options{}),
		redistest.Start(t, redistest.Options{}),
	}
	cfg := newConfig(t, nodeAddrs(srv),
		map[string]config.Server{"inventory": server(config.OnNodeDownFail, map[string][]string{"a": {"n1"}, "r": {"n1", "n2", "n3"}})},
		&quickHealth)
	r, _ := startRouter(t, cfg)
	inv, err := inventory.New(r, inventory.Options{Logger: invDiscard})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := inv.LoadStock(ctx, "a", "s", 10, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := inv.Reserve(ctx, "held-1", []inventory.Item{invItem("a", "s", 3)}, "", time.Hour); err != nil {
		t.Fatal(err)
	}
	// fill n1 past its configured maxmemory (lifted meanwhile), snapshot
	// and restart it: it comes back over its limit
	c := srv[0].Client(t)
	if err := c.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Eval(ctx, "for i = 1, 512 do redis.call('SET', 'fill:' .. i, string.rep('x', 64 * 1024)) end return 1", nil).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	srv[0].Kill()
	srv[0].Restart()
	if err := srv[0].Client(t).Set(ctx, "probe:oom", "x", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "OOM") {
		t.Fatalf("a write on the restarted n1: %v, want OOM (the node must come back full)", err)
	}
	n1, _ := r.Node("n1")
	// UP on the new server process: n1 may still read UP from before the
	// kill until a probe meets the restart (a loaded machine's Cancel then
	// met the hold-back)
	run := srv[0].Client(t).InfoMap(ctx, "server").Item("Server", "run_id")
	settle := 2*cfg.Health.Heartbeat + cfg.Client.CommandTimeout + cfg.Health.Timeout
	deadline := time.Now().Add(settle + 5*time.Second)
	for time.Now().Before(deadline) && (n1.State() != node.StateUp || n1.ServerRun() != run) {
		time.Sleep(50 * time.Millisecond)
	}
	if run == "" {
		t.Fatal("no run_id in the restarted n1's INFO server")
	}
	if n1.State() != node.StateUp || n1.ServerRun() != run {
		t.Errorf("n1 is %v %v on run %q after %v (hold %v): a full node that restarted never comes UP", n1.State(), n1.DownReason(), n1.ServerRun(),
			settle+5*time.Second, settle)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := inv.Cancel(cctx, "held-1"); err != nil {
		t.Errorf("Cancel of a reservation on the full n1: %v; its 3 units stay held while n1 is full", err)
	}
	st, err := inv.GetStock(cctx, "a", "s")
	t.Logf("stock a/s after the cancel: %+v, %v", st, err)
}
