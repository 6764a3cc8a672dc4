package inventory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/topology"
)

// TestOperatorSettlesAStuckQuotaPartOnALeavingNode: a user's quota node
// leaves the topology (route r over n1..n3 becomes n1, n2) while a part
// of the user's order is set aside there with its order's record gone:
// the order was cancelled, its settle never reached n3, the part was set
// aside, and the record lived out its retention. Only an operator can
// decide such a part (`shardis parts settle NODE PART_ID cancel`,
// SettleStuck), and the apply waits for it: the part is pending on a
// leaving node, and its quota counter (the user's count on n3) cannot
// move while a pending part counts it. Meanwhile every order of the user
// counts the count left on n3 (quotaElsewhere), so the user is refused
// its limit. SettleStuck refused while a topology change migrates, so the
// apply never finished and the user stayed refused: the count of an
// order nobody paid for kept for good, and n3 never left (a deadlock only
// hand edits on the node broke). SettleStuck now moves the order's record
// to its home first (homeFor, as the expiry does) and reads it there.
func TestOperatorSettlesAStuckQuotaPartOnALeavingNode(t *testing.T) {
	t.Parallel()
	e := newLeaveEnv(t, false)
	old := openInv(t, e.old, Options{})
	if _, err := old.LoadStock(e.ctx, "r", "lim", 30, 2); err != nil {
		t.Fatal(err)
	}
	set, err := old.set(e.ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	user := ""
	for i := 0; user == ""; i++ {
		if u := fmt.Sprintf("u%d", i); quotaNode(set, u).Name() == "n3" {
			user = u
		}
	}
	// the order is reserved, then cancelled while n3 takes no settle
	cut := openInv(t, e.old, Options{Faults: &hookFaults{call: func(ctx context.Context, c ScriptCall, send func() (any, error)) (any, error) {
		if c.Script == "settle" && c.Node == "n3" {
			return nil, errors.New("n3 unreachable (injected)")
		}
		return send()
	}}})
	const order = "stuck-on-leaving-quota-node"
	items := []Item{{Route: "r", SKU: "lim", Quantity: 2}}
	if _, err := cut.Reserve(e.ctx, order, items, user, time.Minute); err != nil {
		t.Fatal(err)
	}
	if out, err := cut.Cancel(e.ctx, order); err != nil || out.Status != StatusCancelled {
		t.Fatalf("Cancel = %+v, %v", out, err)
	}
	// its parts still pending on n3 are set aside (as the reconciler does
	// with a part it cannot settle for now), then the order's record
	// lives out its retention
	n3 := e.clients["n3"]
	keys, err := n3.Keys(e.ctx, partKeyPrefix+order+"|*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var stuck []string
	quota := false
	for _, k := range keys {
		id := strings.TrimPrefix(k, partKeyPrefix)
		if f := partFieldsOn(t, e.ctx, n3, id); f["state"] == string(PartPending) {
			stuck = append(stuck, id)
			quota = quota || f["kind"] == string(PartQuota)
			if _, err := old.SetAside(e.ctx, PendingPart{Node: "n3", PartID: id, OrderID: order}, "test: cannot be settled for now", time.Hour, time.Hour); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !quota {
		t.Fatalf("no quota part of %s pending on n3 (pending: %v)", order, stuck)
	}
	home, err := old.orderHome(old.topo.cur.Load(), order)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.clients[home.Name()].Del(e.ctx, orderKey(order)).Err(); err != nil {
		t.Fatal(err)
	}
	qk := quotaKey("r", "lim", user)
	if v, _ := n3.Get(e.ctx, qk).Int64(); v != 2 {
		t.Fatalf("%s on n3 = %d before the apply; want 2", qk, v)
	}

	apply := func() topology.Report {
		t.Helper()
		rep, err := ApplyTopology(e.ctx, ApplyOptions{To: e.new, From: e.old, Wait: 300 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatalf("apply: %v (report %+v)", err, rep)
		}
		return rep
	}
	if rep := apply(); rep.Phase != topology.PhaseMigrating || rep.Waiting == 0 {
		t.Fatalf("apply: phase %s, waiting %d; want migrating, waiting for the parts set aside on n3", rep.Phase, rep.Waiting)
	}
	inv := openInv(t, e.new, Options{})
	// the user's count waits on n3: the user is refused its limit (n3
	// counts it, or cannot be read by an instance that no longer names it)
	if _, err := inv.Reserve(e.ctx, "meanwhile", items, user, time.Minute); err == nil {
		t.Errorf("Reserve of the user's limit while n3 counts the cancelled order succeeded; want it refused")
	}

	// the operator's decision by the system of record (the order was not
	// paid), through an instance whose configuration names n3
	op := openInv(t, e.old, Options{})
	for _, id := range stuck {
		got, err := op.SettleStuck(e.ctx, "n3", id, Cancel)
		if err != nil || got != settleDone {
			t.Fatalf("SettleStuck(n3, %s, cancel) while the apply waits for it = %q, %v; want done", id, got, err)
		}
	}
	if rep := apply(); rep.Phase != topology.PhaseStable {
		t.Fatalf("apply after the operator's settle: phase %s, waiting %d; want stable", rep.Phase, rep.Waiting)
	}
	if total := quotaSum(t, e.ctx, e.clients, qk); total != 0 {
		t.Errorf("the user's quota counters sum to %d once its only order was cancelled; want 0", total)
	}
	if _, err := openInv(t, e.new, Options{}).Reserve(e.ctx, "after", items, user, time.Minute); err != nil {
		t.Errorf("Reserve of the user's limit (2) after its only order was cancelled: %v", err)
	}
}
