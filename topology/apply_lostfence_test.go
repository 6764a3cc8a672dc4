package topology_test

import (
	"context"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/topology"
)

// TestApplyLostAndFencedAtFirstEpoch: at the first epoch, one node
// fenced (accepted behind a peer it could not read) and another whose
// record was lost under its stamp (Record.Lost). Applying the current
// topology again brings the fenced node forward and writes the lost
// record again (a dry run first only reports both), and a rerun finds it
// applied. Before, the lost record (no phase) made the apply take the
// epoch as still migrating and resume it, and run() dereferenced
// cur.Prev, which a first epoch's record has not: a nil-pointer panic
// (apply.go:140; found by a review).
func TestApplyLostAndFencedAtFirstEpoch(t *testing.T) {
	srvs := redistest.StartN(t, 3, redistest.Options{})
	cfg := routeConfig(t, srvs)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	initNodes(t, ctx, cfg)

	tok := topology.Token(1, topology.Of(cfg).Fingerprint())
	n2, n3 := srvs[1].Client(t), srvs[2].Client(t)
	if got := n2.HGet(ctx, node.StampKey, "epoch").Val(); got != tok {
		t.Fatalf("n2's stamp epoch = %q, want %q", got, tok)
	}
	// n2 accepted behind its peers: fenced at the same token.
	if err := n2.HSet(ctx, node.StampKey, "epoch", node.FencePrefix+tok).Err(); err != nil {
		t.Fatal(err)
	}
	// n3's record lost under its stamp.
	if err := n3.Del(ctx, node.TopologyKey).Err(); err != nil {
		t.Fatal(err)
	}

	quiet := slog.New(slog.DiscardHandler)
	apply := func(dry bool) (rep topology.Report, err error) {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("ApplyTopology of the current topology (dry run %v) panicked: %v\n%s", dry, p, stackLine())
			}
		}()
		return inventory.ApplyTopology(ctx, inventory.ApplyOptions{To: cfg, DryRun: dry, Logger: quiet})
	}
	rep, err := apply(true)
	t.Logf("dry run: report %+v, err %v", rep, err)
	if err != nil || !reflect.DeepEqual(rep.Forward, []string{"n2"}) || !reflect.DeepEqual(rep.Repaired, []string{"n3"}) {
		t.Fatalf("dry run = forward %v, repaired %v, err %v; want n2 forward, n3 repaired", rep.Forward, rep.Repaired, err)
	}
	if n := n3.Exists(ctx, node.TopologyKey).Val(); n != 0 || n2.HGet(ctx, node.StampKey, "epoch").Val() != node.FencePrefix+tok {
		t.Fatal("the dry run wrote n2 or n3")
	}
	rep, err = apply(false)
	t.Logf("report %+v, err %v", rep, err)
	if err != nil || rep.Phase != topology.PhaseStable || !reflect.DeepEqual(rep.Forward, []string{"n2"}) || !reflect.DeepEqual(rep.Repaired, []string{"n3"}) {
		t.Fatalf("apply = phase %s, forward %v, repaired %v, err %v; want stable, n2 forward, n3 repaired", rep.Phase, rep.Forward, rep.Repaired, err)
	}
	for i, s := range srvs {
		c := s.Client(t)
		rec := c.HGetAll(ctx, node.TopologyKey).Val()
		if st := c.HGet(ctx, node.StampKey, "epoch").Val(); st != tok || rec["token"] != tok || rec["phase"] != string(topology.PhaseStable) {
			t.Errorf("n%d after the apply: stamp %q, record %v; want %s stable", i+1, st, rec, tok)
		}
	}
	if rep, err = apply(false); err != nil || !rep.AlreadyApplied || len(rep.Repaired) != 0 {
		t.Fatalf("rerun = %+v, %v; want already applied", rep, err)
	}
}
