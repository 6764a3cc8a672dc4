package topology_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
)

// TestDryRunWritesNothing: Options.DryRun "checks and reports what would
// change without writing", --from over nodes that have no topology
// record yet included; the apply itself then writes From as epoch 1 and
// moves on. Before, current() wrote From as epoch 1 on every From node
// before any DryRun check (or any refusal), so a dry run with a wrong
// --from left the nodes at that topology (found by a review).
func TestDryRunWritesNothing(t *testing.T) {
	srvs := redistest.StartN(t, 3, redistest.Options{})
	from := routeConfig(t, srvs[:2])
	to := routeConfig(t, srvs)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)
	rep, err := inventory.ApplyTopology(ctx, inventory.ApplyOptions{To: to, From: from, DryRun: true, Logger: quiet})
	if err != nil {
		t.Fatalf("dry run: %v", err)
	}
	t.Logf("dry run report: from epoch %d to %d, joined %v", rep.FromEpoch, rep.ToEpoch, rep.Joined)
	if rep.FromEpoch != 1 || rep.ToEpoch != 2 || len(rep.Joined) != 1 || rep.Joined[0] != "n3" {
		t.Errorf("dry run report: from epoch %d to %d, joined %v; want 1 to 2, n3 joined", rep.FromEpoch, rep.ToEpoch, rep.Joined)
	}
	for i, s := range srvs {
		c := s.Client(t)
		if rec := c.HGetAll(ctx, node.TopologyKey).Val(); len(rec) != 0 {
			t.Errorf("n%d after a dry run: %s = %v (stamp epoch %q); want nothing written",
				i+1, node.TopologyKey, rec, c.HGet(ctx, node.StampKey, "epoch").Val())
		}
	}
	rep, err = inventory.ApplyTopology(ctx, inventory.ApplyOptions{To: to, From: from, Logger: quiet})
	if err != nil || rep.FromEpoch != 1 || rep.ToEpoch != 2 || rep.Phase != "stable" {
		t.Fatalf("apply after the dry run = %+v, %v; want epoch 1 to 2, stable", rep, err)
	}
}
