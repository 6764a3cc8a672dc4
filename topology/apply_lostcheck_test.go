package topology_test

import (
	"context"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
)

// TestLostRecordRefusalLeadsOut: a node whose topology record was lost
// under its stamp (Record.Lost) makes a new apply refuse, naming the
// record lost; its advice (apply the current configuration) writes the
// record again, and the new apply then goes through. Before, check took
// the lost record (Epoch 0, no phase) for an apply still in progress:
// "n2 is still  at epoch 0 ...: finish that apply first (run `shardis
// topology apply` with its configuration until it reports stable)", and
// following that at a first epoch reported AlreadyApplied and wrote
// nothing, so the new apply was refused again, forever (found by a
// review).
func TestLostRecordRefusalLeadsOut(t *testing.T) {
	srvs := redistest.StartN(t, 3, redistest.Options{})
	cur := routeConfig(t, srvs[:2])
	next := routeConfig(t, srvs)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	initNodes(t, ctx, cur)
	if err := srvs[1].Client(t).Del(ctx, node.TopologyKey).Err(); err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	_, err := inventory.ApplyTopology(ctx, inventory.ApplyOptions{To: next, Logger: quiet})
	if err == nil {
		t.Fatal("apply over a lost record went through")
	}
	t.Logf("first refusal: %v", err)
	if !strings.Contains(err.Error(), "n2 lost its topology record") {
		t.Errorf("the refusal does not name n2's record lost: %v", err)
	}
	// the advice: apply the current configuration
	rep, err2 := inventory.ApplyTopology(ctx, inventory.ApplyOptions{To: cur, Logger: quiet})
	t.Logf("apply of the current configuration: phase %s, already applied %v, repaired %v, err %v", rep.Phase, rep.AlreadyApplied, rep.Repaired, err2)
	if err2 != nil || !reflect.DeepEqual(rep.Repaired, []string{"n2"}) {
		t.Errorf("apply of the current configuration: repaired %v, err %v; want n2 repaired", rep.Repaired, err2)
	}
	rep, err3 := inventory.ApplyTopology(ctx, inventory.ApplyOptions{To: next, Logger: quiet})
	if err3 != nil && !strings.Contains(strings.ToLower(err3.Error()), "lost") {
		t.Errorf("after following the advice the apply is still refused, and the message does not say the record is lost: %v", err3)
	}
	if err3 != nil || rep.ToEpoch != 2 || rep.Phase != "stable" {
		t.Errorf("the new apply after the advice = epoch %d %s, %v; want epoch 2 stable", rep.ToEpoch, rep.Phase, err3)
	}
}

// TestFromIsToRefusesALostRecordElsewhere: an apply of the topology given
// as From (`--from` equal to the configuration) over nodes that have no
// record, but one whose record is lost under another token's stamp, is
// refused naming that node, and writes nothing: epoch 1 is not given to
// the others either. Before, the others got epoch 1 and the apply
// reported AlreadyApplied, leaving the node behind a token no instance
// serves (every script refused there), unreported.
func TestFromIsToRefusesALostRecordElsewhere(t *testing.T) {
	srvs := redistest.StartN(t, 2, redistest.Options{})
	old := routeConfig(t, srvs)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	initNodes(t, ctx, old) // epoch 1 of old on n1 and n2
	c1, c2 := srvs[0].Client(t), srvs[1].Client(t)
	// n1: no record at all; n2: its record lost, its stamp at old's token
	if err := c1.Del(ctx, node.TopologyKey).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c1.HDel(ctx, node.StampKey, "epoch").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c2.Del(ctx, node.TopologyKey).Err(); err != nil {
		t.Fatal(err)
	}
	next := routeConfig(t, srvs)
	next.Nodes["n2"] = config.Node{Addr: srvs[1].Addr(), Weight: 2} // another fingerprint
	rep, err := inventory.ApplyTopology(ctx, inventory.ApplyOptions{To: next, From: next, Logger: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), "n2 lost its topology record") {
		t.Fatalf("apply = %+v, %v; want a refusal naming n2's record lost", rep, err)
	}
	if rec := c1.HGetAll(ctx, node.TopologyKey).Val(); len(rec) != 0 {
		t.Errorf("n1 after the refused apply: %s = %v; want nothing written", node.TopologyKey, rec)
	}
}
