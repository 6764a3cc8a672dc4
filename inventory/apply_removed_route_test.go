package inventory

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/topology"
)

// A node that leaves in the apply that removes its route keeps no pending
// part: the apply waits for them (settling them past their deadlines) as
// for any leaving node's, and finishes once they are settled. The route's
// removal moved no counter, so nothing was waited for: the apply wrote
// stable at once, no instance reached the node again, and its parts
// stayed pending, their units reserved for good (found by a review).
func TestLeavingNodeOfARemovedRouteSettlesItsParts(t *testing.T) {
	t.Parallel() // its own nodes; it mostly waits
	_, addrs := startNamed(t, 3)
	old := leaveConfig(t, addrs, map[string][]string{"r": {"n1", "n2", "n3"}, "s": {"n1", "n2"}})
	next := leaveConfig(t, addrs, map[string][]string{"s": {"n1", "n2"}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	inv := openInv(t, old, Options{})
	if _, err := inv.LoadStock(ctx, "r", "z", 300, 0); err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		if _, err := inv.Reserve(ctx, fmt.Sprintf("o-%d", i), []Item{{Route: "r", SKU: "z", Quantity: 1}}, "", 2*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(2*time.Second + partGrace)
	inv.Close()
	n3 := redis.NewClient(&redis.Options{Addr: addrs["n3"]})
	defer n3.Close()
	if n, err := n3.ZCard(ctx, PendingKey).Result(); err != nil || n == 0 {
		t.Fatalf("n3 holds %d pending parts (%v): the test needs some there", n, err)
	}
	log := slog.New(slog.DiscardHandler)
	rep, err := ApplyTopology(ctx, ApplyOptions{To: next, From: old, Wait: 300 * time.Millisecond, Logger: log})
	if err != nil || rep.Phase != topology.PhaseMigrating || rep.Waiting == 0 {
		t.Fatalf("apply while n3's parts are pending: phase %s, waiting %d, %v; want migrating, waiting for them", rep.Phase, rep.Waiting, err)
	}
	time.Sleep(time.Until(deadline) + 200*time.Millisecond)
	rep, err = ApplyTopology(ctx, ApplyOptions{To: next, From: old, Wait: 10 * time.Second, Logger: log})
	if err != nil || rep.Phase != topology.PhaseStable {
		t.Fatalf("apply after the parts' deadlines: phase %s, %v; want stable", rep.Phase, err)
	}
	pend, _ := n3.ZCard(ctx, PendingKey).Result()
	reserved, _ := n3.HGet(ctx, stockKey("r", "z"), "reserved").Int64()
	if pend != 0 || reserved != 0 {
		t.Errorf("n3 left with %d pending parts and %d units reserved, want none", pend, reserved)
	}
}
