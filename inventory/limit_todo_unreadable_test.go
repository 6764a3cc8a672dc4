package inventory

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/internal/syncbuf"
	"github.com/shardis/shardis/router"
)

// ConvergeLimits drops, with a warning naming the node, the field and the
// value, every pending limit change it cannot finish, and finishes the
// others: a value that is not three ':'-separated parts is one of them.
// Found by a review: such a value was skipped on every pass, never
// dropped, logged or counted among the changes still incomplete, while a
// value of three parts that did not parse was dropped with a warning.
func TestConvergeLimitsDropsUnreadableTodo(t *testing.T) {
	srv := redistest.StartN(t, 1, redistest.Options{})[0]
	c := srv.Client(t)
	ctx := t.Context()
	cfg := config.Default()
	cfg.Nodes = map[string]config.Node{"n1": {Addr: srv.Addr(), Weight: 1}}
	cfg.Servers = map[string]config.Server{"inventory": {OnNodeDown: config.OnNodeDownFail, Routes: map[string][]string{"a": {"n1"}}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	r, err := router.New(ctx, &cfg, router.Options{KeepData: cfg.KeepData(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	inv, err := New(r, Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(inv.Close)
	if _, err := inv.LoadStock(ctx, "a", "s", 10, 0); err != nil {
		t.Fatal(err)
	}
	bad := map[string]string{
		stockKey("a", "one"):   "garbage", // one part
		stockKey("a", "two"):   "5:7",     // two parts
		stockKey("a", "three"): "x:7:a",   // three parts, limit not an integer
		stockKey("z", "gone"):  "5:7:z",   // a route not configured
	}
	// readable, newer than the load's: finished
	todo := map[string]any{stockKey("a", "s"): fmt.Sprintf("4:%d:a", time.Now().UnixMilli()+time.Hour.Milliseconds())}
	for k, v := range bad {
		todo[k] = v
	}
	if err := c.HSet(ctx, keyLimitsTodo, todo).Err(); err != nil {
		t.Fatal(err)
	}
	left, err := inv.ConvergeLimits(ctx, "n1")
	if err != nil || left != 0 {
		t.Fatalf("ConvergeLimits = %d, %v; want 0 left, no error", left, err)
	}
	if got := c.HGetAll(ctx, keyLimitsTodo).Val(); len(got) != 0 {
		t.Errorf("%s after ConvergeLimits: %v, want every change dropped (finished, or one that cannot be)", keyLimitsTodo, got)
	}
	if l := c.HGet(ctx, stockKey("a", "s"), "limit").Val(); l != "4" {
		t.Errorf("the readable change's limit on n1: %q, want 4", l)
	}
	out := logs.String()
	for k, v := range bad {
		if !strings.Contains(out, keyLimitsTodo+" "+k) || !strings.Contains(out, "value="+v) {
			t.Errorf("no warning names %s %s and its value %q; logs:\n%s", keyLimitsTodo, k, v, out)
		}
	}
}
