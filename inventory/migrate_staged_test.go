package inventory

import (
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/topology"
)

// One-round reservations stopped after their stage (crash point
// "staged:stage-only": the home node's parts taken, the others never),
// then a topology apply that removes n3, which holds a promised part that
// was never taken (safety issue item A2). After the apply every actor of
// the new topology must be able to finish each order.

// stagedLeave is a stagedEnv (routes a, b, c on n1, n2, n3) with one
// attempt per role stopped after its stage, and the configurations of the
// apply: n3 leaves, route c moves to n2.
type stagedLeave struct {
	e        *stagedEnv
	old, new *config.Config
	ids      map[string]string // role → order id
}

// Roles: who meets the order after the apply. "moved" is homed on n3, so
// its record moves too; the others are homed on n1 in both topologies.
var stagedLeaveRoles = []string{"confirm", "cancel", "retry", "reconcile", "moved"}

func newStagedLeave(t *testing.T) *stagedLeave {
	e := newStagedEnv(t)
	addrs := map[string]string{}
	for i, s := range e.srvs {
		addrs[fmt.Sprintf("n%d", i+1)] = s.Addr()
	}
	s := &stagedLeave{e: e, ids: map[string]string{},
		old: leaveConfig(t, addrs, map[string][]string{"a": {"n1"}, "b": {"n2"}, "c": {"n3"}}),
		new: leaveConfig(t, addrs, map[string][]string{"a": {"n1"}, "b": {"n2"}, "c": {"n2"}})}
	newHomes, err := NewHomes(s.new)
	if err != nil {
		t.Fatal(err)
	}
	for _, role := range stagedLeaveRoles {
		want := "n1"
		if role == "moved" {
			want = "n3"
		}
		for i := 0; s.ids[role] == ""; i++ {
			id := fmt.Sprintf("%s-%d", role, i)
			if e.inv.topo.cur.Load().homes.Home(id) == want && (role == "moved" || newHomes.Home(id) == "n1") {
				s.ids[role] = id
			}
		}
		if _, err := e.reserveAt("staged:stage-only", s.ids[role]); !errors.Is(err, errCrashed) {
			t.Fatalf("Reserve %s stopped after its stage: %v", s.ids[role], err)
		}
	}
	return s
}

// apply removes n3 with faults f and wants it to end stable.
func (s *stagedLeave) apply(f Faults) topology.Report {
	s.e.t.Helper()
	rep, err := ApplyTopology(s.e.ctx, ApplyOptions{To: s.new, From: s.old, Wait: 10 * time.Second, Logger: slog.New(slog.DiscardHandler), Faults: f})
	if err != nil || rep.Phase != topology.PhaseStable {
		s.e.t.Fatalf("apply removing n3 = %+v, %v; want stable", rep, err)
	}
	return rep
}

// status reads order id's record status at its home in the new topology.
func (s *stagedLeave) status(inv *Inventory, id string) string {
	home, err := inv.orderHome(inv.topology(s.e.ctx), id)
	if err != nil {
		s.e.t.Fatal(err)
	}
	return orderFieldsOn(s.e.t, s.e.ctx, s.e.clients[home.Name()], id)["status"]
}

func TestTopologyRemoveNodeStagedPart(t *testing.T) {
	s := newStagedLeave(t)
	e := s.e
	rep := s.apply(nil)
	t.Logf("apply: %d staging records decided, %d orders moved, %d stock hashes moved", rep.StagedDecided, rep.OrdersMoved, rep.StockMoved)
	inv := openInv(t, s.new, Options{AttemptLease: stagedLease})

	if _, err := inv.Confirm(e.ctx, s.ids["confirm"]); !errors.Is(err, ErrNotFound) {
		t.Errorf("Confirm after the apply = %v, want ErrNotFound (the attempt failed)", err)
	}
	if _, err := inv.Confirm(e.ctx, s.ids["moved"]); !errors.Is(err, ErrNotFound) {
		t.Errorf("Confirm of the moved order after the apply = %v, want ErrNotFound (the attempt failed)", err)
	}
	if out, err := inv.Cancel(e.ctx, s.ids["cancel"]); err != nil || out.Status != StatusCancelled {
		t.Errorf("Cancel after the apply = %+v, %v; want cancelled", out, err)
	}
	if res, err := inv.Reserve(e.ctx, s.ids["retry"], stagedItems(), "", time.Minute); err != nil || len(res.Receipts) != 3 {
		t.Errorf("retry of the order id after the apply = %+v, %v; want reserved", res, err)
	} else if out, err := inv.Confirm(e.ctx, s.ids["retry"]); err != nil || out.Status != StatusConfirmed {
		t.Errorf("Confirm of the retry = %+v, %v", out, err)
	}
	// The reconciler: every due part of the new topology's nodes settles
	// without an error, until nothing is pending (the stage-only parts
	// fall due 1.7 s after the reserve).
	deadline := time.Now().Add(10 * time.Second)
	for done := false; !done; {
		pending := int64(0)
		for _, n := range inv.Nodes() {
			due, err := inv.DueParts(e.ctx, n, 100)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range due {
				if res, err := inv.ResolveExpired(e.ctx, p); err != nil {
					t.Fatalf("reconciler after the apply: part %s of %s on %s: %s, %v", p.PartID, p.OrderID, p.Node, res, err)
				}
			}
			c, _ := e.clients[n.Name()].ZCard(e.ctx, PendingKey).Result()
			pending += c
		}
		if done = pending == 0; !done && time.Now().After(deadline) {
			t.Fatalf("%d parts still pending on n1, n2 10 s after the apply", pending)
		}
		if !done {
			time.Sleep(100 * time.Millisecond)
		}
	}

	want := map[string]string{"confirm": "failed", "cancel": "cancelled", "retry": "confirmed", "reconcile": "failed", "moved": "failed"}
	for _, role := range stagedLeaveRoles {
		if st := s.status(inv, s.ids[role]); st != want[role] {
			t.Errorf("order %s (%s) is %q after the apply, want %q", s.ids[role], role, st, want[role])
		}
	}
	if c, _ := e.clients["n3"].ZCard(e.ctx, PendingKey).Result(); c != 0 {
		t.Errorf("%d parts still pending on the removed n3", c)
	}
	confirmed := map[string]int64{"a": 1, "b": 2, "c": 3} // the retry's
	for _, rt := range []string{"a", "b", "c"} {
		lvl, err := inv.GetStock(e.ctx, rt, "s")
		if err != nil {
			t.Fatal(err)
		}
		if lvl.Loaded != stagedStock || lvl.Reserved != 0 || lvl.Confirmed != confirmed[rt] || lvl.Available != stagedStock-confirmed[rt] {
			t.Errorf("route %s after the apply = %+v, want %d confirmed of %d, none reserved", rt, lvl, confirmed[rt], stagedStock)
		}
	}
	if v, _ := e.clients["n3"].HGetAll(e.ctx, stockKey("c", "s")).Result(); v["available"] != "0" || v["reserved"] != "0" || v["loaded"] != "0" {
		t.Errorf("n3 still holds stock of c: %v", v)
	}
}

// TestTopologyMutationApplyLeavesStaging checks the explorer's mutation:
// with MutationApplyLeavesStaging the apply writes stable with a staging
// record undecided, whose promised part is on the removed node, as before
// the fix. Whoever meets such a record (here a Confirm, and a Cancel of
// another one) reads that part as gone (staged.go, "Parts on a node that
// left") and decides the record failed, cancelling its other parts;
// before that rule it could never be decided, and its home's parts held
// their stock for good.
func TestTopologyMutationApplyLeavesStaging(t *testing.T) {
	t.Parallel()
	s := newStagedLeave(t)
	s.apply(&topoFaults{mut: MutationApplyLeavesStaging})
	inv := openInv(t, s.new, Options{AttemptLease: stagedLease})
	promised := map[string][]OrderPart{} // role → its record's pending parts off n3
	for _, role := range []string{"confirm", "cancel"} {
		home, err := inv.orderHome(inv.topology(s.e.ctx), s.ids[role])
		if err != nil {
			t.Fatal(err)
		}
		rec, err := DecodeOrder(s.ids[role], orderFieldsOn(t, s.e.ctx, s.e.clients[home.Name()], s.ids[role]))
		if err != nil || rec.Status != OrderStaging {
			t.Fatalf("order %s (%s) after the mutated apply: %+v, %v; want staging (left undecided)", s.ids[role], role, rec, err)
		}
		for _, p := range rec.Parts { // the stage took its home's; the others were never taken
			if p.Node != "n3" && partFieldsOn(t, s.e.ctx, s.e.clients[p.Node], p.ID)["state"] == string(PartPending) {
				promised[role] = append(promised[role], p)
			}
		}
		if len(promised[role]) == 0 {
			t.Fatalf("order %s holds no pending part off n3: nothing to check", s.ids[role])
		}
	}
	if _, err := inv.Confirm(s.e.ctx, s.ids["confirm"]); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Confirm after the mutated apply = %v, want ErrNotFound (the record failed: its part on n3 is gone)", err)
	}
	if out, err := inv.Cancel(s.e.ctx, s.ids["cancel"]); err != nil {
		t.Fatalf("Cancel after the mutated apply = %+v, %v", out, err)
	}
	for role, parts := range promised {
		if st := s.status(inv, s.ids[role]); st != "failed" && !(role == "cancel" && st == "cancelled") {
			t.Errorf("order %s (%s) is %q, want decided (failed, or cancelled by the Cancel)", s.ids[role], role, st)
		}
		for _, p := range parts {
			if f := partFieldsOn(t, s.e.ctx, s.e.clients[p.Node], p.ID); f["state"] != string(PartCancelled) {
				t.Errorf("part %s on %s of failed order %s is %v, want cancelled", p.ID, p.Node, s.ids[role], f)
			}
		}
	}
}

// A node that went back to a copy taken before the last apply (here its
// topology record and its stamp's epoch alone are put back as they were,
// at epoch 1, after the apply
// removing n3 ended stable at epoch 2; an accept would follow such a
// restore) refuses every instance of the applied topology with an epoch
// mismatch. Running the apply of the current topology again brings it
// forward (topology/doc.go, "A node that went back"): before, the apply
// answered "already applied" and the node stayed refused.
func TestApplyBringsBackANodeAtThePreviousEpoch(t *testing.T) {
	e := newStagedEnv(t)
	addrs := map[string]string{}
	for i, s := range e.srvs {
		addrs[fmt.Sprintf("n%d", i+1)] = s.Addr()
	}
	old := leaveConfig(t, addrs, map[string][]string{"a": {"n1"}, "b": {"n2"}, "c": {"n3"}})
	cur := leaveConfig(t, addrs, map[string][]string{"a": {"n1"}, "b": {"n2"}, "c": {"n2"}})
	before, err := e.clients["n1"].Dump(e.ctx, "shardis:topology").Result()
	if err != nil {
		t.Fatal(err)
	}
	epoch, err := e.clients["n1"].HGet(e.ctx, "shardis:node", "epoch").Result() // the token scripts check
	if err != nil {
		t.Fatal(err)
	}
	apply := func(want bool) {
		t.Helper()
		rep, err := ApplyTopology(e.ctx, ApplyOptions{To: cur, From: old, Wait: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)})
		if err != nil || rep.Phase != topology.PhaseStable || rep.AlreadyApplied != want {
			t.Fatalf("apply = %+v, %v; want stable, already applied %v", rep, err, want)
		}
	}
	apply(false)
	if err := e.clients["n1"].RestoreReplace(e.ctx, "shardis:topology", 0, before).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.clients["n1"].HSet(e.ctx, "shardis:node", "epoch", epoch).Err(); err != nil {
		t.Fatal(err)
	}
	inv := openInv(t, cur, Options{})
	items := []Item{{Route: "a", SKU: "s", Quantity: 1}}
	if _, err := inv.Reserve(e.ctx, "back-1", items, "", time.Minute); !errors.Is(err, ErrTopology) {
		t.Fatalf("Reserve on n1 at the previous epoch = %v, want a topology refusal", err)
	}
	apply(false)
	recs, unread, err := ReadTopology(e.ctx, cur)
	if err != nil || len(unread) > 0 {
		t.Fatalf("ReadTopology = %v, %v", unread, err)
	}
	for _, r := range recs {
		if r.Node != "n3" && (r.Epoch != 2 || r.Phase != topology.PhaseStable) {
			t.Errorf("node %s at epoch %d %s after the second apply, want 2 stable", r.Node, r.Epoch, r.Phase)
		}
	}
	if _, err := inv.Reserve(e.ctx, "back-2", items, "", time.Minute); err != nil {
		t.Fatalf("Reserve on n1 after the second apply = %v", err)
	}
	apply(true)
}
