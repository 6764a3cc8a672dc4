package drill

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/inventory"
)

// TestOutcomeChecks writes order records on a real node and holds the
// checks to them: an acknowledged Confirm whose record says reserved is a
// loss, an acknowledged Cancel that is cancelled is not, a confirmed order
// nobody acknowledged is a problem, and confirmed units are summed from
// the acknowledged Reserves.
func TestOutcomeChecks(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	c := s.Client(t)
	ctx := context.Background()
	cfg := config.Default()
	cfg.Nodes = map[string]config.Node{"n1": {Addr: s.Addr(), Weight: 1}}
	cfg.Servers = map[string]config.Server{"inventory": {OnNodeDown: config.OnNodeDownFail, Routes: map[string][]string{"r": {"n1"}}}}
	homes, err := inventory.NewHomes(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	for id, status := range map[string]inventory.OrderState{
		"lost-confirm": inventory.OrderReserved, "kept-cancel": inventory.OrderCancelled,
		"ok-confirm": inventory.OrderConfirmed, "stray": inventory.OrderConfirmed,
	} {
		if err := c.HSet(ctx, inventory.OrderKey(id), "status", string(status)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	masters := map[string]*redis.Client{"n1": c}
	a := Acked{
		Reserved:  map[string]int64{"lost-confirm": 1, "kept-cancel": 2, "ok-confirm": 3},
		Confirmed: map[string]bool{"lost-confirm": true, "ok-confirm": true},
		Cancelled: map[string]bool{"kept-cancel": true},
	}
	lost := LostOutcomes(ctx, masters, homes, a)
	if len(lost) != 1 || !strings.Contains(lost[0], "lost-confirm") {
		t.Errorf("lost outcomes %q, want only lost-confirm's", lost)
	}
	units, problems := ConfirmedOrderUnits(ctx, masters, a.Reserved)
	if units != 3 || len(problems) != 1 || !strings.Contains(problems[0], "stray") {
		t.Errorf("confirmed units %d, problems %q; want 3 and stray's", units, problems)
	}
}
