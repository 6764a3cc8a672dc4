package tests

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
)

// A node without persistence that restarts empty while no instance was
// running is caught by the next instance, even when the instance that
// wrote to it never reached its first heartbeat: the first acknowledged
// write of an incarnation is witnessed on a peer before it is acknowledged
// (node/witness.go). Before, the new instance found no stamp and no
// witness, stamped the node as new, and acknowledged reservations whose
// records were on it answered ErrNotFound (issue B10).
func TestEmptyRestartWhileEveryInstanceDownIsCaught(t *testing.T) {
	t.Parallel()
	srv := redistest.StartN(t, 3, redistest.Options{}) // no persistence
	servers := map[string]config.Server{"inventory": server(config.OnNodeDownFail, map[string][]string{"r": {"n1", "n2", "n3"}})}
	// The first instance never reaches a heartbeat: it writes no mark in
	// the background before it closes.
	slow := quickHealth
	slow.Heartbeat = time.Minute
	r1, _ := startRouter(t, newConfig(t, nodeAddrs(srv), servers, &slow))
	inv1, err := inventory.New(r1, inventory.Options{Logger: invDiscard})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := inv1.LoadStock(ctx, "r", "eb", 120, 0); err != nil {
		t.Fatal(err)
	}
	var orders []string
	for i := 0; i < 12; i++ {
		id := "empty-" + string(rune('a'+i))
		if _, err := inv1.Reserve(ctx, id, []inventory.Item{invItem("r", "eb", 1)}, "", 0); err != nil {
			t.Fatalf("Reserve %s: %v", id, err)
		}
		orders = append(orders, id)
	}
	inv1.Close()
	if err := r1.Close(); err != nil {
		t.Fatal(err)
	}

	srv[0].Kill() // kill -9: everything n1 held is gone
	srv[0].Restart()

	r2, _ := startRouter(t, newConfig(t, nodeAddrs(srv), servers, &quickHealth))
	inv2, err := inventory.New(r2, inventory.Options{Logger: invDiscard})
	if err != nil {
		t.Fatal(err)
	}
	defer inv2.Close()
	n1, _ := r2.Node("n1")
	waitFor(t, 10*time.Second, "n1 probed by the new instance", func() bool {
		return n1.State() == node.StateUp || errors.Is(n1.DownReason(), node.ErrDataLost)
	})
	for _, id := range orders {
		_, err := inv2.Confirm(ctx, id)
		if errors.Is(err, inventory.ErrNotFound) {
			t.Errorf("Confirm %s (acknowledged before n1 restarted empty): %v; want data loss or n1 refused, not ErrNotFound", id, err)
		}
	}
	waitRefused(t, r2, "n1", node.ErrDataLost)
}
