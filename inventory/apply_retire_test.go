package inventory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/topology"
)

// retireWorld starts the retirement tests' three nodes and returns them
// with two configurations over them: three, routes a, b, c on n1, n2, n3,
// and two, route c moved onto n2 (n3 left); and homedOn, which returns an
// order id whose home in three is the named node.
func retireWorld(t *testing.T) (e *stagedEnv, three, two *config.Config, homedOn func(string) string) {
	e = newStagedEnv(t)
	addrs := map[string]string{}
	for i, s := range e.srvs {
		addrs[fmt.Sprintf("n%d", i+1)] = s.Addr()
	}
	three = leaveConfig(t, addrs, map[string][]string{"a": {"n1"}, "b": {"n2"}, "c": {"n3"}})
	two = leaveConfig(t, addrs, map[string][]string{"a": {"n1"}, "b": {"n2"}, "c": {"n2"}})
	homes, err := NewHomes(three)
	if err != nil {
		t.Fatal(err)
	}
	return e, three, two, func(name string) string {
		for i := 1; i <= 200; i++ {
			if c := fmt.Sprintf("st%d", i); homes.Home(c) == name {
				return c
			}
		}
		t.Fatalf("no id of st1..st200 is homed on %s", name)
		return ""
	}
}

// reservedCopy loads 10 units of a/s at cfg, reserves 2 of them for
// order id and returns the inventory and a copy (DUMP) of the order's
// record on n3, once its one-round commit landed (Close): reserved.
func reservedCopy(t *testing.T, e *stagedEnv, cfg *config.Config, id string) (*Inventory, string) {
	t.Helper()
	inv := openInv(t, cfg, Options{})
	if _, err := inv.LoadStock(e.ctx, "a", "s", 10, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := inv.Reserve(e.ctx, id, []Item{{Route: "a", SKU: "s", Quantity: 2}}, "", time.Hour); err != nil {
		t.Fatal(err)
	}
	inv.Close()
	rec, err := e.clients["n3"].Dump(e.ctx, orderKey(id)).Result()
	if err != nil {
		t.Fatal(err)
	}
	return inv, rec
}

// TestApplyRetiresAStaleRecord: order st is reserved with its record on
// n3; n3 leaves (its record moves to its new home, where st is then
// confirmed), and n3's data goes back to a copy from before the move
// (st's record live there again, reserved). The apply that brings n3 back
// moves st's home onto n3: the stale record must not win over the
// confirmed one. It is retired before the bump (an apply that dies right
// after, at crash point "retire", leaves it marked; its rerun bumps), so
// the install writes the confirmed record; a Cancel is refused as
// confirmed.
// Without the retirement n3 keeps the stale record and st reads reserved.
// A stray copy on a node that stays is retired by an apply whose
// configuration lacks a node of the applied topology (the instance it
// runs on serves the new one).
func TestApplyRetiresAStaleRecord(t *testing.T) {
	e, three, two, homedOn := retireWorld(t)
	ctx := e.ctx
	id, other := homedOn("n3"), homedOn("n2")
	apply := stableApplier(t, ctx)
	inv3, stale := reservedCopy(t, e, three, id)
	n3 := e.clients["n3"]
	// and a copy of another order's record strays onto n1: the removal
	// of n3 (whose configuration lacks n3) retires it before its bump
	if _, err := inv3.Reserve(ctx, other, []Item{{Route: "a", SKU: "s", Quantity: 1}}, "", time.Hour); err != nil {
		t.Fatal(err)
	}
	stray, err := e.clients["n2"].Dump(ctx, orderKey(other)).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.clients["n1"].RestoreReplace(ctx, orderKey(other), 0, stray).Err(); err != nil {
		t.Fatal(err)
	}
	if rep := apply(two, three); rep.OrdersMoved != 1 || rep.Retired != 1 {
		t.Fatalf("removal of n3: %+v, want 1 order moved, 1 retired", rep)
	}
	if f := orderFieldsOn(t, ctx, e.clients["n1"], other); f["moved"] == "" {
		t.Fatalf("order %s's stray copy on n1 after the removal: %v, want it marked moved", other, f)
	}
	// the retired copy goes away after the retention (reserved, it had no TTL)
	if ttl, err := e.clients["n1"].PTTL(ctx, orderKey(other)).Result(); err != nil || ttl <= three.Inventory.Retention-time.Minute {
		t.Fatalf("order %s's stray copy on n1, retired: TTL %v, %v; want the retention", other, ttl, err)
	}
	movedCopyTTLs(t, e, id, "n2", "n3", three.Inventory.Retention)
	inv2 := openInv(t, two, Options{})
	if out, err := inv2.Confirm(ctx, id); err != nil || out.Status != StatusConfirmed {
		t.Fatalf("Confirm at the 2-node topology: %+v, %v", out, err)
	}
	// n3's data goes back to before the move: st live there, reserved
	if err := n3.RestoreReplace(ctx, orderKey(id), 0, stale).Err(); err != nil {
		t.Fatal(err)
	}
	// the apply dies after the retirement, before its bump; the rerun
	// finds nothing more to retire, and moves st onto n3
	_, err = ApplyTopology(ctx, ApplyOptions{To: three, Wait: 5 * time.Second, Logger: slog.New(slog.DiscardHandler), Faults: crashAtPoint("retire")})
	if !errors.Is(err, ErrCrashed) {
		t.Fatalf("apply crashed at retire = %v, want ErrCrashed", err)
	}
	if f := orderFieldsOn(t, ctx, n3, id); f["moved"] == "" {
		t.Fatalf("order %s on n3 after the crashed apply: %v, want the stale record, marked moved", id, f)
	}
	if rep := apply(three, two); rep.Retired != 0 || rep.OrdersMoved != 1 || rep.ToEpoch != 3 {
		t.Fatalf("n3 back, the rerun: %+v, want nothing more retired, 1 order moved, epoch 3", rep)
	}
	if f := orderFieldsOn(t, ctx, n3, id); f["status"] != string(OrderConfirmed) || f["moved"] != "" {
		t.Fatalf("order %s on n3, its home again: %v, want the confirmed record, live", id, f)
	}
	inv := openInv(t, three, Options{})
	if _, err := inv.Cancel(ctx, id); !errors.Is(err, ErrConfirmed) {
		t.Fatalf("Cancel after the move back = %v, want ErrConfirmed", err)
	}
	lv, err := inv.GetStock(ctx, "a", "s")
	if err != nil || lv.Available != lv.Loaded-3 || lv.Reserved != 1 || lv.Confirmed != 2 {
		t.Fatalf("levels: %+v, %v; want 2 confirmed, 1 reserved (%s's), the rest available", lv, err, other)
	}
}

// TestApplyRetiresAStaleRecordOnResume: as TestApplyRetiresAStaleRecord,
// but n3's data goes back during the apply that brings n3 back: after its
// first bump (the apply dies at crash point "bump", n3 not yet bumped),
// so the retirement before that bump found st's record on n3 marked moved.
// The rerun resumes the bump, retiring first what came back on the nodes
// not yet bumped: the install writes the confirmed record. Without that
// retirement n3 keeps the stale record and st reads reserved.
func TestApplyRetiresAStaleRecordOnResume(t *testing.T) {
	t.Parallel() // its own nodes
	t.Run("retired", func(t *testing.T) { staleOnResume(t, "") })
	// the explorer's mutation brings the loss back: the stale record wins
	t.Run(string(MutationRetireSkip), func(t *testing.T) { staleOnResume(t, MutationRetireSkip) })
}

// staleOnResume is TestApplyRetiresAStaleRecordOnResume's scenario, with
// mut re-introduced in both applies that bring n3 back.
func staleOnResume(t *testing.T, mut Mutation) {
	e, three, two, homedOn := retireWorld(t)
	ctx := e.ctx
	id := homedOn("n3")
	quiet := slog.New(slog.DiscardHandler)
	_, stale := reservedCopy(t, e, three, id)
	n3 := e.clients["n3"]
	if rep, err := ApplyTopology(ctx, ApplyOptions{To: two, From: three, Wait: 5 * time.Second, Logger: quiet}); err != nil || rep.OrdersMoved != 1 {
		t.Fatalf("removal of n3 = %+v, %v; want 1 order moved", rep, err)
	}
	inv2 := openInv(t, two, Options{})
	if out, err := inv2.Confirm(ctx, id); err != nil || out.Status != StatusConfirmed {
		t.Fatalf("Confirm at the 2-node topology: %+v, %v", out, err)
	}
	// the apply that brings n3 back dies after its first bump (n1's)
	_, err := ApplyTopology(ctx, ApplyOptions{To: three, Wait: 5 * time.Second, Logger: quiet, Faults: &topoFaults{point: "bump", nth: 1, mut: mut}})
	if !errors.Is(err, ErrCrashed) {
		t.Fatalf("apply crashed at bump = %v, want ErrCrashed", err)
	}
	if f := orderFieldsOn(t, ctx, n3, id); f["moved"] == "" {
		t.Fatalf("order %s on n3 after the crashed apply: %v, want the record the removal moved off it, marked", id, f)
	}
	// then n3's data goes back to before the removal: st live there, reserved
	if err := n3.RestoreReplace(ctx, orderKey(id), 0, stale).Err(); err != nil {
		t.Fatal(err)
	}
	rep, err := ApplyTopology(ctx, ApplyOptions{To: three, Wait: 5 * time.Second, Logger: quiet, Faults: &topoFaults{mut: mut}})
	if mut == MutationRetireSkip {
		if f := orderFieldsOn(t, ctx, n3, id); err != nil || rep.Retired != 0 || f["status"] != string(OrderReserved) {
			t.Fatalf("with %s: resumed apply = %+v, %v; order %s on n3: %v; want nothing retired and the stale record kept", mut, rep, err, id, f)
		}
		return
	}
	if err != nil || rep.Phase != topology.PhaseStable || rep.Retired != 1 || rep.OrdersMoved != 1 {
		t.Fatalf("resumed apply = %+v, %v; want stable, 1 retired, 1 order moved", rep, err)
	}
	if f := orderFieldsOn(t, ctx, n3, id); f["status"] != string(OrderConfirmed) || f["moved"] != "" {
		t.Fatalf("order %s on n3, its home again: %v, want the confirmed record, live", id, f)
	}
	inv := openInv(t, three, Options{})
	if _, err := inv.Cancel(ctx, id); !errors.Is(err, ErrConfirmed) {
		t.Fatalf("Cancel after the move back = %v, want ErrConfirmed", err)
	}
}

// stableApplier returns an apply of to from from (nil: the nodes'
// topology) under ctx, quietly, that fails t unless it ends stable, and
// returns its report.
func stableApplier(t *testing.T, ctx context.Context) func(to, from *config.Config) topology.Report {
	return func(to, from *config.Config) topology.Report {
		t.Helper()
		rep, err := ApplyTopology(ctx, ApplyOptions{To: to, From: from, Wait: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)})
		if err != nil || rep.Phase != topology.PhaseStable {
			t.Fatalf("apply to %s = %+v, %v", topology.Of(to), rep, err)
		}
		return rep
	}
}
