package topology_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/topology"
)

// TestApplyRefusesALostRecordBehindALaterEpoch: at epoch 2, n2's record is
// lost under a stamp of epoch 1 (it went back to an older copy and lost
// the record too) and n3's under the current token. Applying the current
// topology again is refused before any write (ErrInvalid, naming n2 as
// lostElsewhere does; n3's record is not written either), as at a first
// epoch and on a new epoch's path. Before, the check ran at a first epoch
// only: the apply repaired n3, then the driver refused n2 while bringing
// it forward, with inventory.ErrCorrupt and advice (start an instance with
// the current configuration) that restores nothing (found by a review).
func TestApplyRefusesALostRecordBehindALaterEpoch(t *testing.T) {
	srvs := redistest.StartN(t, 3, redistest.Options{})
	two := routeConfig(t, srvs[:2])
	three := routeConfig(t, srvs)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	initNodes(t, ctx, two)
	quiet := slog.New(slog.DiscardHandler)
	if rep, err := inventory.ApplyTopology(ctx, inventory.ApplyOptions{To: three, Logger: quiet}); err != nil || rep.ToEpoch != 2 || rep.Phase != topology.PhaseStable {
		t.Fatalf("apply two → three = %+v, %v", rep, err)
	}
	n2, n3 := srvs[1].Client(t), srvs[2].Client(t)
	old := topology.Token(1, topology.Of(two).Fingerprint())
	if err := n2.HSet(ctx, node.StampKey, "epoch", old).Err(); err != nil {
		t.Fatal(err)
	}
	if err := n2.Del(ctx, node.TopologyKey).Err(); err != nil {
		t.Fatal(err)
	}
	if err := n3.Del(ctx, node.TopologyKey).Err(); err != nil {
		t.Fatal(err)
	}
	for _, dry := range []bool{true, false} {
		_, err := inventory.ApplyTopology(ctx, inventory.ApplyOptions{To: three, DryRun: dry, Logger: quiet})
		t.Logf("apply of the current topology (dry run %v): %v", dry, err)
		if !errors.Is(err, topology.ErrInvalid) || !strings.Contains(err.Error(), "n2 lost its topology record") || !strings.Contains(err.Error(), old) {
			t.Fatalf("apply (dry run %v) = %v; want ErrInvalid naming n2 and its stamp's token", dry, err)
		}
		if errors.Is(err, inventory.ErrCorrupt) {
			t.Errorf("the refusal is also ErrCorrupt: %v", err)
		}
		if n := n3.Exists(ctx, node.TopologyKey).Val(); n != 0 {
			t.Fatalf("the refused apply (dry run %v) wrote n3's record", dry)
		}
		if n := n2.Exists(ctx, node.TopologyKey).Val(); n != 0 {
			t.Fatalf("the refused apply (dry run %v) wrote n2's record", dry)
		}
	}
}
