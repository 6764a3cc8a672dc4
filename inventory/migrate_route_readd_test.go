package inventory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/topology"
)

// TestApplyReaddedRouteHoldsItsLimitAndStock removes route r (n1, n2)
// from the server, which leaves its counters on n1 and n2, and adds it
// back over n2 and n3. A user who bought r/z up to its per-user limit of 5
// (quota on n1) must not buy again, and the 95 units left must all be
// reservable on r's new nodes: the apply that re-adds r over other nodes
// is refused, naming the node and the keys left there, and the way out
// the error gives (add r back over its old nodes, then move it in a
// second apply, which moves its counters) must keep both.
func TestApplyReaddedRouteHoldsItsLimitAndStock(t *testing.T) {
	_, addrs := startNamed(t, 3)
	first := leaveConfig(t, addrs, map[string][]string{"r": {"n1", "n2"}, "s": {"n3"}})
	gone := leaveConfig(t, addrs, map[string][]string{"s": {"n1", "n2", "n3"}})
	back := leaveConfig(t, addrs, map[string][]string{"r": {"n2", "n3"}, "s": {"n1", "n2", "n3"}})
	same := leaveConfig(t, addrs, map[string][]string{"r": {"n1", "n2"}, "s": {"n1", "n2", "n3"}})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	apply := func(from, to *config.Config) (topology.Report, error) {
		t.Helper()
		rep, err := ApplyTopology(ctx, ApplyOptions{To: to, From: from, Wait: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)})
		for i := 0; err == nil && rep.Phase != topology.PhaseStable; i++ {
			if i == 10 {
				t.Fatalf("apply still %s: %+v", rep.Phase, rep)
			}
			rep, err = ApplyTopology(ctx, ApplyOptions{To: to, From: from, Wait: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)})
		}
		return rep, err
	}

	p1 := openInv(t, first, Options{})
	if _, err := p1.LoadStock(ctx, "r", "z", 100, 5); err != nil {
		t.Fatal(err)
	}
	user := userHomedOn(t, "n1", "n1", "n2")
	if _, err := p1.Reserve(ctx, "bought", []Item{{Route: "r", SKU: "z", Quantity: 5}}, user, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := p1.Confirm(ctx, "bought"); err != nil {
		t.Fatal(err)
	}
	if _, err := apply(first, gone); err != nil {
		t.Fatalf("apply removing r: %v", err)
	}
	final := back
	if _, err := apply(gone, back); err != nil {
		t.Logf("apply re-adding r over n2, n3: %v", err)
		if !errors.Is(err, topology.ErrInvalid) || !strings.Contains(err.Error(), "n1") || !strings.Contains(err.Error(), "inv:stock:r:") {
			t.Fatalf("apply re-adding r over other nodes: %v; want topology.ErrInvalid naming n1 and its stock key of r", err)
		}
		dry, err := ApplyTopology(ctx, ApplyOptions{To: back, From: gone, DryRun: true, Logger: slog.New(slog.DiscardHandler)})
		if !errors.Is(err, topology.ErrInvalid) {
			t.Fatalf("dry run re-adding r over n2, n3: %+v, %v; want the same refusal", dry, err)
		}
		// the way out: r back over its old nodes, then moved
		if _, err := apply(gone, same); err != nil {
			t.Fatalf("apply re-adding r over its old nodes: %v", err)
		}
		if _, err := apply(same, back); err != nil {
			t.Fatalf("apply moving the re-added r: %v", err)
		}
	}
	p2 := openInv(t, final, Options{})
	lvl, err := p2.GetStock(ctx, "r", "z")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("r/z on r's nodes after re-adding it: available %d, loaded %d, limit %d", lvl.Available, lvl.Loaded, lvl.Limit)
	if lvl.Available != 95 {
		t.Errorf("r/z: %d of the 95 unsold units available on r's nodes: the rest is stranded", lvl.Available)
	}
	_, err = p2.Reserve(ctx, "again", []Item{{Route: "r", SKU: "z", Quantity: 1}}, user, time.Minute)
	if !errors.Is(err, ErrLimitExceeded) {
		t.Errorf("user %s, who bought the limit of 5, reserves 1 more after r came back: %v, want ErrLimitExceeded", user, err)
	}
	if _, err := p2.Reserve(ctx, fmt.Sprintf("rest-%s", user), []Item{{Route: "r", SKU: "z", Quantity: 5}}, "another-user", time.Minute); err != nil {
		t.Errorf("Reserve of 5 units by another user after r came back: %v", err)
	}
}
