package inventory

import (
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/topology"
)

// A node leaves the topology (route r over n1..n3 becomes n1, n2) while
// it holds a pending part whose own record is lost (deleted, evicted,
// lost with the node's writes; or a tombstone written over it by a
// settle that knew the part by id only: pending_index.lua, pend_lost):
// the node lists the part, its units stay reserved there, and no
// instance of the new topology reconciles the node, so only the apply's
// settle of the leaving nodes (settleLeaving) meets it once due. It sets
// the part aside, as the reconciler's expiry does; the apply waits for
// it (the node's stock cannot move while units are reserved on it) and
// names it in its report, with what the operator runs; the operator's
// SettleStuckLost (through an instance whose configuration names the
// node) gives its units back, and the apply run again finishes: every
// unit loaded reservable on the route's nodes once the order's other
// parts settle. Before, settleLeaving returned ResolveExpired's error for
// the part on every pass, so the apply failed each time, and nothing set
// the part aside, so SettleStuckLost refused it: the apply could never
// finish without editing the node by hand.
func TestApplyRemovingANodeSetsAsideItsLostPartForTheOperator(t *testing.T) {
	t.Parallel() // its cases have nodes of their own; they mostly wait a deadline out
	for _, tomb := range []bool{false, true} {
		name := "record deleted"
		if tomb {
			name = "tombstone over the record"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel() // it mostly waits a deadline out
			e := newLeaveEnv(t, false)
			old := openInv(t, e.old, Options{})
			const order = "lost-on-leaving"
			const hold = 700 * time.Millisecond
			res, err := old.Reserve(e.ctx, order, []Item{{Route: "r", SKU: "z", Quantity: 300}}, "", hold)
			if err != nil {
				t.Fatal(err)
			}
			i := slices.IndexFunc(res.Receipts, func(r Receipt) bool { return r.Node == "n3" })
			if i < 0 {
				t.Fatalf("receipts %+v; want a part on n3", res.Receipts)
			}
			r := res.Receipts[i]
			home, _ := old.orderHome(old.topo.cur.Load(), order)
			for deadline := time.Now().Add(10 * time.Second); orderFieldsOn(t, e.ctx, e.clients[home.Name()], order)["status"] != "reserved"; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the commit of %s did not land in 10s", order)
				}
			}
			en, err := old.ReadRedoLog(e.ctx, "n3", invQueue(t, r.RedoLog), r.Offset-1, 1)
			if err != nil || len(en) != 1 {
				t.Fatal(en, err)
			}
			id, n3 := en[0].PartID, e.clients["n3"]
			if n, err := n3.Exists(e.ctx, partKey(id)).Result(); err != nil || n != 1 {
				t.Fatalf("part %s has no record of its own on n3 (%d, %v)", id, n, err)
			}
			n3.Del(e.ctx, partKey(id))
			if tomb {
				// a settle knowing the part by id only writes the tombstone
				if got, err := old.SettleNow(e.ctx, Settle{Node: "n3", Action: Cancel, OrderID: order, PartIDs: []string{id}}); err != nil {
					t.Fatalf("SettleNow = %v, %v", got, err)
				}
				if f := partFieldsOn(t, e.ctx, n3, id); f["tombstone"] != "1" {
					t.Fatalf("record of the part after a settle by id: %v; want its tombstone", f)
				}
			}
			reservedOnN3 := func(want int64, when string) {
				t.Helper()
				if got := e.counters()["z"]["n3"]["reserved"]; got != want {
					t.Errorf("%s: r/z reserved on n3 %d, want %d", when, got, want)
				}
			}
			reservedOnN3(r.Quantity, "before the apply")
			time.Sleep(hold + partGrace + 500*time.Millisecond) // the part comes due

			apply := func() topology.Report {
				t.Helper()
				rep, err := ApplyTopology(e.ctx, ApplyOptions{To: e.new, From: e.old, Wait: time.Second, Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					t.Fatalf("apply: %v (report %+v)", err, rep)
				}
				return rep
			}
			for run := 1; run <= 2; run++ { // a rerun before the operator acts changes nothing
				rep := apply()
				if rep.Phase != topology.PhaseMigrating || rep.Waiting == 0 {
					t.Fatalf("apply %d: phase %s, waiting %d; want migrating, waiting for the part", run, rep.Phase, rep.Waiting)
				}
				if len(rep.SetAside) != 1 || rep.SetAside[0].Node != "n3" || rep.SetAside[0].PartID != id ||
					!strings.Contains(rep.SetAside[0].Reason, "record") {
					t.Fatalf("apply %d: set aside %+v; want part %s on n3, its reason naming its record", run, rep.SetAside, id)
				}
				reservedOnN3(r.Quantity, "apply")
			}
			// the operator's way out, by the system of record's values,
			// through an instance whose configuration names n3 (the
			// --from one's), started after the bump
			old = openInv(t, e.old, Options{})
			got, err := old.SettleStuckLost(e.ctx, "n3", id, Cancel, StuckUnits{Route: "r", SKU: "z", Quantity: r.Quantity})
			if err != nil || got != settleDone {
				t.Fatalf("SettleStuckLost = %q, %v; want done", got, err)
			}
			if _, err := old.SettleStuckLost(e.ctx, "n3", id, Cancel, StuckUnits{Route: "r", SKU: "z", Quantity: r.Quantity}); !errors.Is(err, ErrPrecondition) {
				t.Errorf("SettleStuckLost again = %v; want ErrPrecondition (settled once)", err)
			}
			rep := apply()
			if rep.Phase != topology.PhaseStable || len(rep.SetAside) != 0 {
				t.Fatalf("apply after the settle: phase %s, set aside %+v; want stable, none", rep.Phase, rep.SetAside)
			}
			if c := e.counters()["z"]["n3"]; c["available"]+c["reserved"] != 0 {
				t.Errorf("r/z left on n3 after the apply: %v", c)
			}
			// the order's parts on n1 and n2 settle by the new topology's expiry
			inv := openInv(t, e.new, Options{})
			for _, name := range []string{"n1", "n2"} {
				nd, _ := inv.r.Node(name)
				due, err := inv.DueParts(e.ctx, nd, 100)
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range due {
					if res, err := inv.ResolveExpired(e.ctx, p); err != nil || res != Cancelled {
						t.Errorf("ResolveExpired(%+v) = %v, %v; want cancelled", p, res, err)
					}
				}
			}
			if lv, err := inv.GetStock(e.ctx, "r", "z"); err != nil || lv.Available != 300 || lv.Reserved != 0 {
				t.Errorf("r/z on the route's nodes after the apply: %+v, %v; want 300 available, none reserved", lv, err)
			}
		})
	}
}
