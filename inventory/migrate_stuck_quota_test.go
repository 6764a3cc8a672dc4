package inventory

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/router"
	"github.com/shardis/shardis/topology"
)

// TestApplyKeepsAStuckQuotaPartsCounter: a quota part set aside as stuck
// (stuck.go: "its stock stays reserved until it settles") is still
// pending, and its quota counter counts it; an apply that moves the
// user's quota home must not transfer the counter from under it. If it
// does, the part's later cancel decrements a counter that is no longer
// there (its old node), while the new home keeps the units for good: the
// user is refused below the limit forever.
func TestApplyKeepsAStuckQuotaPartsCounter(t *testing.T) {
	t.Parallel()
	e := newMigrateEnv(t)
	oq, _ := router.NewRing(topology.Of(e.old).Routes["r"])
	nq, _ := router.NewRing(topology.Of(e.new).Routes["r"])
	var user, prev string
	for i := 0; user == ""; i++ {
		u := fmt.Sprintf("v-%d", i)
		if nq.Name(nq.Home("user:"+u)) == "n4" {
			user, prev = u, oq.Name(oq.Home("user:"+u))
		}
	}
	old := e.open(e.old)
	const order = "stuck-quota-order"
	if _, err := old.Reserve(e.ctx, order, []Item{{Route: "r", SKU: "lim", Quantity: 2}}, user, time.Minute); err != nil {
		t.Fatal(err)
	}
	// the user's quota part on its quota node, set aside (as the
	// reconciler does with a part it cannot settle for now)
	keys, err := e.clients[prev].Keys(e.ctx, partKeyPrefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var qpart string
	for _, k := range keys {
		id := strings.TrimPrefix(k, partKeyPrefix)
		if strings.HasPrefix(id, order+"|") && partFieldsOn(t, e.ctx, e.clients[prev], id)["kind"] == "q" {
			qpart = id
		}
	}
	if qpart == "" {
		t.Fatalf("no quota part of %s on %s (%v)", order, prev, keys)
	}
	if _, err := old.SetAside(e.ctx, PendingPart{Node: prev, PartID: qpart, OrderID: order}, "test: unsettleable for now", time.Hour, time.Hour); err != nil {
		t.Fatal(err)
	}
	apply := func() topology.Report {
		rep, err := ApplyTopology(e.ctx, ApplyOptions{To: e.new, Wait: time.Second, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	t.Logf("apply: %+v", apply())
	inv := e.open(e.new)
	// the data is repaired; the order is cancelled and its parts settled
	if _, err := inv.Cancel(e.ctx, order); err != nil {
		t.Fatal(err)
	}
	if rep := apply(); rep.Phase != topology.PhaseStable {
		t.Fatalf("apply after the cancel: %+v, want stable", rep)
	}
	if st := partFieldsOn(t, e.ctx, e.clients[prev], qpart)["state"]; st != "cancelled" {
		t.Fatalf("quota part %s on %s is %q, want cancelled", qpart, prev, st)
	}
	if total := quotaSum(t, e.ctx, e.clients, quotaKey("r", "lim", user)); total != 0 {
		t.Errorf("the user's quota counters sum to %d after its only order was cancelled, want 0", total)
	}
	if _, err := inv.Reserve(e.ctx, "after-"+user, []Item{{Route: "r", SKU: "lim", Quantity: 2}}, user, time.Minute); err != nil {
		t.Errorf("Reserve of the user's limit (2) after its only order was cancelled: %v", err)
	}
}

// quotaSum is the sum of quota counter k over every node of clients,
// logging each node's that is not 0.
func quotaSum(t *testing.T, ctx context.Context, clients map[string]*redis.Client, k string) int64 {
	t.Helper()
	var total int64
	for name, c := range clients {
		v, _ := c.Get(ctx, k).Int64()
		if v != 0 {
			t.Logf("%s on %s = %d", k, name, v)
		}
		total += v
	}
	return total
}
