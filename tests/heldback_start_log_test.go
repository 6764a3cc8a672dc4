package tests

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/internal/syncbuf"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/router"
)

// A stack started right after its nodes restarted (make run, a host
// reboot) finds every node held back for a moment: that is logged as a
// wait (INFO), not as nodes down and an inventory refusing to act
// (WARN "node down at start", ERROR "not acting on the nodes"), which
// told a new user something was broken. The inventory serves once the
// hold ends.
func TestHeldBackAtStartIsNotAnError(t *testing.T) {
	t.Parallel()
	srv := redistest.StartN(t, 2, redistest.Options{AOF: true})
	servers := map[string]config.Server{"inventory": server(config.OnNodeDownFail, map[string][]string{"r": {"n1", "n2"}})}
	h := quickHealth
	h.HoldBack = 700 * time.Millisecond
	cfg := newConfig(t, nodeAddrs(srv), servers, &h)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	r1, _ := startRouter(t, cfg)
	inv1, err := inventory.New(r1, inventory.Options{Logger: invDiscard})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inv1.LoadStock(ctx, "r", "held", 10, 0); err != nil {
		t.Fatal(err)
	}
	inv1.Close()
	if err := r1.Close(); err != nil {
		t.Fatal(err)
	}
	for _, s := range srv {
		s.Restart() // a new server process, its data kept (AOF)
	}

	var logs syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	r2, err := router.New(ctx, cfg, router.Options{KeepData: cfg.KeepData(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	inv2, err := inventory.New(r2, inventory.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer inv2.Close()
	waitFor(t, 10*time.Second, "the inventory serving after the hold", func() bool {
		_, err := inv2.GetStock(ctx, "r", "held")
		return err == nil
	})
	out := logs.String()
	if !strings.Contains(out, "held back") {
		t.Fatalf("no node was held back at start (the test's premise); logs:\n%s", out)
	}
	if n := strings.Count(out, "waiting for the nodes held back"); n > 1 {
		t.Errorf("the wait for held-back nodes logged %d times, want once (not at each countdown); logs:\n%s", n, out)
	}
	for _, bad := range []string{`level=ERROR msg="inventory: not acting on the nodes"`, `level=WARN msg="node down at start"`} {
		if strings.Contains(out, bad) {
			t.Errorf("a start with every node held back logged %s; logs:\n%s", bad, out)
		}
	}
}
