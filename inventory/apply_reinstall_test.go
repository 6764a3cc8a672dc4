package inventory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/topology"
)

// TestApplyPutsBackWhatStep3MovedOntoANodeThatWentBack: order st is
// reserved with its record on n3 (copied then, with n3's epoch: the
// older copy); n3 leaves (st moves to its new home, where it is
// confirmed), and comes back (the apply moves st onto n3 again, marking
// the copy at its previous home moved). Then n3 goes back to the older
// copy: st live there, reserved, at epoch 1. The apply run again must
// leave st confirmed on n3, live, whether it brings n3 forward (n1 went
// back too, only its topology record: the put back passes over it to
// st's previous home, n2) or finishes an apply whose stable writes were
// cut short (n1 still migrating at the token, n2 stable: step 3 ended,
// and is not run again; n1 is brought forward with n3): it
// puts the marked copy back in place of the older one before n3 moves to
// the token (topology/doc.go, "A node that went back"; it retires
// nothing). Seed 24412 of the explorer found the loss. With the mutation
// the older copy is only retired: st has no live record anywhere, though
// its previous home still holds it. An apply that dies at crash point
// "reinstall" (the marked copy put back) leaves n3 behind; its rerun
// ends the same (the record put back is found there: none put back).
func TestApplyPutsBackWhatStep3MovedOntoANodeThatWentBack(t *testing.T) {
	t.Parallel()
	for _, resume := range []bool{false, true} {
		name := "forward"
		if resume {
			name = "resume"
		}
		t.Run(name, func(t *testing.T) { putBackAfterGoingBack(t, resume, "", "") })
		t.Run(name+"/"+string(MutationReinstallSkip), func(t *testing.T) { putBackAfterGoingBack(t, resume, MutationReinstallSkip, "") })
		t.Run(name+"/crash-at-reinstall", func(t *testing.T) { putBackAfterGoingBack(t, resume, "", "reinstall") })
	}
}

// putBackAfterGoingBack is TestApplyPutsBackWhatStep3MovedOntoANodeThatWentBack's
// scenario; resume cuts the last apply's stable writes short, mut is
// re-introduced in the apply run after n3 went back, and a first run of
// it dies at crash point crash (none when "").
func putBackAfterGoingBack(t *testing.T, resume bool, mut Mutation, crash string) {
	e, three, two, _ := retireWorld(t)
	ctx := e.ctx
	id := movedN3ToN2(t, three, two)
	quiet := slog.New(slog.DiscardHandler)
	apply := stableApplier(t, ctx)
	_, stale := reservedCopy(t, e, three, id)
	n1, n3 := e.clients["n1"], e.clients["n3"]
	old1, old3 := copyEpoch(t, n1), copyEpoch(t, n3)
	if rep := apply(two, three); rep.OrdersMoved != 1 {
		t.Fatalf("removal of n3: %+v, want 1 order moved", rep)
	}
	movedCopyTTLs(t, e, id, "n2", "n3", three.Inventory.Retention)
	if out, err := openInv(t, two, Options{}).Confirm(ctx, id); err != nil || out.Status != StatusConfirmed {
		t.Fatalf("Confirm at the 2-node topology: %+v, %v", out, err)
	}
	if rep := apply(three, two); rep.OrdersMoved != 1 || rep.ToEpoch != 3 {
		t.Fatalf("n3 back: %+v, want 1 order moved, epoch 3", rep)
	}
	// n3 goes back to the copy: epoch 1, st live and reserved
	old3.restore(t, n3)
	if err := n3.RestoreReplace(ctx, orderKey(id), 0, stale).Err(); err != nil {
		t.Fatal(err)
	}
	if resume { // the apply died between its stable writes: n1's was not written
		if err := n1.HSet(ctx, "shardis:topology", "phase", string(topology.PhaseMigrating)).Err(); err != nil {
			t.Fatal(err)
		}
	} else { // n1's topology record goes back too: it is brought forward with n3
		old1.restore(t, n1)
	}
	retired, put := 0, 1
	if mut == MutationReinstallSkip {
		retired, put = 1, 0
	}
	if crash != "" {
		_, err := ApplyTopology(ctx, ApplyOptions{To: three, Wait: 5 * time.Second, Logger: quiet, Faults: crashAtPoint(crash)})
		if !errors.Is(err, ErrCrashed) {
			t.Fatalf("apply crashed at %s = %v, want ErrCrashed", crash, err)
		}
		if ep, err := n3.HGet(ctx, "shardis:topology", "epoch").Result(); err != nil || ep != "1" {
			t.Fatalf("n3 after the crashed apply is at epoch %q, %v; want still 1", ep, err)
		}
		put = 0 // put back already
	}
	rep, err := ApplyTopology(ctx, ApplyOptions{To: three, Wait: 5 * time.Second, Logger: quiet, Faults: &topoFaults{mut: mut}})
	// with n1 migrating at the token while n2 is stable, step 3 had
	// ended: n1 and n3 are brought forward too (no step 3 runs again)
	if err != nil || rep.Phase != topology.PhaseStable || rep.Retired != retired || rep.Reinstalled != put || rep.OrdersMoved != 0 || len(rep.Forward) == 0 {
		t.Fatalf("the apply after n3 went back = %+v, %v; want stable, %d retired, %d put back, nothing moved, nodes brought forward", rep, err, retired, put)
	}
	f := orderFieldsOn(t, ctx, n3, id)
	if mut != "" {
		if f["moved"] == "" {
			t.Fatalf("with %s: order %s on n3: %v; want its record retired", mut, id, f)
		}
		return
	}
	if f["status"] != string(OrderConfirmed) || f["moved"] != "" {
		t.Fatalf("order %s on n3, its home: %v; want the confirmed record, live", id, f)
	}
	inv := openInv(t, three, Options{})
	if _, err := inv.Cancel(ctx, id); !errors.Is(err, ErrConfirmed) {
		t.Fatalf("Cancel after n3 was brought back = %v, want ErrConfirmed", err)
	}
	if rep, err := ApplyTopology(ctx, ApplyOptions{To: three, Wait: 5 * time.Second, Logger: quiet}); err != nil || !rep.AlreadyApplied {
		t.Fatalf("apply once more = %+v, %v; want already applied", rep, err)
	}
	if !resume && crash == "" {
		lateRetireLeavesTheNodeAlone(t, e, three, two, inv)
	}
}

// lateRetireLeavesTheNodeAlone: an apply that read n3 behind before the
// forward above retires once n3 is at the token, with the forward's
// change. n3 now holds what instances act on: an order reserved there
// since (homed on n3, away from its home in the previous topology, which
// lacks n3) must stay live and be confirmed, and nothing is put back.
func lateRetireLeavesTheNodeAlone(t *testing.T, e *stagedEnv, three, two *config.Config, inv *Inventory) {
	ctx := e.ctx
	tok, err := e.clients["n3"].HGet(ctx, "shardis:topology", "token").Result()
	if err != nil {
		t.Fatal(err)
	}
	late := ""
	homes, err := NewHomes(three)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; late == "" && i < 1000; i++ {
		if id := fmt.Sprintf("late%d", i); homes.Home(id) == "n3" {
			late = id
		}
	}
	if _, err := inv.Reserve(ctx, late, []Item{{Route: "a", SKU: "s", Quantity: 1}}, "", time.Hour); err != nil {
		t.Fatal(err)
	}
	c := topology.Change{From: topology.Of(two), To: topology.Of(three), Epoch: 3, Token: tok, Forward: true}
	got, err := testMigrator(t, ctx, three).Retire(ctx, c, []string{"n3"})
	if err != nil || !reflect.DeepEqual(got, topology.Retirement{}) {
		t.Fatalf("a late Retire of n3, at the token = %+v, %v; want nothing done", got, err)
	}
	if out, err := inv.Confirm(ctx, late); err != nil || out.Status != StatusConfirmed {
		t.Fatalf("Confirm %s, reserved on n3 after the forward, after the late Retire: %+v, %v", late, out, err)
	}
}

// TestApplyForwardPutsBackFromALeftNode: order st is reserved on n3, its
// home, and n3 leaves: the removal moves st onto n2 (n3's copy marked
// moved), where it is confirmed. Then n2 goes back to an older copy
// (epoch 1). Bringing n2 forward puts st back from n3's marked copy when
// n3, gone from the topology, is still configured (`--from`): n2's copy
// held no record of st; st is reserved, as it was moved: the Confirm
// went with n2's writes. When n3 is not configured any more, the forward
// still ends; nothing can be put back from n3, so the older record of st
// n2's copy held (live, reserved) is kept (with a warning), not retired:
// it is the only one left.
func TestApplyForwardPutsBackFromALeftNode(t *testing.T) {
	t.Parallel() // its own nodes
	for _, configured := range []bool{true, false} {
		name := "configured"
		if !configured {
			name = "gone"
		}
		t.Run(name, func(t *testing.T) { forwardFromLeftNode(t, configured) })
	}
}

// forwardFromLeftNode is TestApplyForwardPutsBackFromALeftNode's
// scenario; configured says whether the forward's configuration names n3.
func forwardFromLeftNode(t *testing.T, configured bool) {
	e, three, two, _ := retireWorld(t)
	ctx := e.ctx
	id := movedN3ToN2(t, three, two)
	quiet := slog.New(slog.DiscardHandler)
	_, stale := reservedCopy(t, e, three, id)
	n2 := e.clients["n2"]
	old2 := copyEpoch(t, n2)
	if rep, err := ApplyTopology(ctx, ApplyOptions{To: two, From: three, Wait: 5 * time.Second, Logger: quiet}); err != nil || rep.OrdersMoved != 1 {
		t.Fatalf("removal of n3 = %+v, %v; want 1 order moved", rep, err)
	}
	movedCopyTTLs(t, e, id, "n2", "n3", three.Inventory.Retention)
	if out, err := openInv(t, two, Options{}).Confirm(ctx, id); err != nil || out.Status != StatusConfirmed {
		t.Fatalf("Confirm at the 2-node topology: %+v, %v", out, err)
	}
	// n2 goes back to its copy from before the removal: without st's
	// record, or (n3 gone) with an older one
	old2.restore(t, n2)
	lost := n2.Del(ctx, orderKey(id)).Err()
	if !configured {
		lost = n2.RestoreReplace(ctx, orderKey(id), 0, stale).Err()
	}
	if lost != nil {
		t.Fatal(lost)
	}
	opts := ApplyOptions{To: two, Wait: 5 * time.Second, Logger: quiet}
	if configured {
		opts.From = three
	}
	rep, err := ApplyTopology(ctx, opts)
	want := 0
	if configured {
		want = 1
	}
	if err != nil || rep.Phase != topology.PhaseStable || len(rep.Forward) != 1 || rep.Retired != 0 || rep.Reinstalled != want {
		t.Fatalf("bringing n2 forward = %+v, %v; want it forward, nothing retired, %d put back", rep, err, want)
	}
	if f := orderFieldsOn(t, ctx, n2, id); f["status"] != string(OrderReserved) || f["moved"] != "" {
		t.Fatalf("order %s on n2 brought forward (n3 configured %v): %v; want it live, reserved", id, configured, f)
	}
	if configured { // put back from n3's copy, which has the retention: n2's record has no TTL
		movedCopyTTLs(t, e, id, "n2", "n3", three.Inventory.Retention)
	}
}

// movedCopyTTLs checks the TTLs of order id's records once it was moved
// (or put back) from the node named from onto the one named to, reserved:
// none on to (a reserved record has none: it lives until decided), and
// on from, where its copy is marked moved, at most retention and more
// than a minute less (the copy gets the retention once the install
// landed: migrate.go, expireMoved). Before, the copy kept no TTL, and
// each apply left one such key per reserved order for good; a put back
// from a copy with the TTL gave it to the live record too, which would
// have expired while reserved.
func movedCopyTTLs(t *testing.T, e *stagedEnv, id, to, from string, retention time.Duration) {
	t.Helper()
	live, err := e.clients[to].PTTL(e.ctx, orderKey(id)).Result()
	if err != nil || live != -1 { // go-redis: -1 (not a duration) for a key with none
		t.Errorf("order %s's reserved record on %s has TTL %v, %v; want none", id, to, live, err)
	}
	if f := orderFieldsOn(t, e.ctx, e.clients[from], id); f["moved"] == "" {
		t.Fatalf("order %s's copy on %s: %v; want it marked moved", id, from, f)
	}
	ttl, err := e.clients[from].PTTL(e.ctx, orderKey(id)).Result()
	if err != nil || ttl <= retention-time.Minute || ttl > retention {
		t.Errorf("order %s's moved copy on %s has TTL %v, %v; want the retention, %v", id, from, ttl, err, retention)
	}
}

// movedN3ToN2 returns an order id whose home is n3 in three and n2 in two.
func movedN3ToN2(t *testing.T, three, two *config.Config) string {
	t.Helper()
	h3, err := NewHomes(three)
	if err != nil {
		t.Fatal(err)
	}
	h2, err := NewHomes(two)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 1000; i++ {
		if id := fmt.Sprintf("st%d", i); h3.Home(id) == "n3" && h2.Home(id) == "n2" {
			return id
		}
	}
	t.Fatal("no id of st0..st999 moves from n3 to n2")
	return ""
}

// nodeEpoch is a copy of a node's topology record (DUMP) and its stamp's
// epoch: what a node that goes back to an older copy of its data gets
// back of them.
type nodeEpoch struct{ topo, epoch string }

// copyEpoch copies c's topology record and stamp's epoch.
func copyEpoch(t *testing.T, c *redis.Client) nodeEpoch {
	t.Helper()
	ctx := context.Background()
	topo, err := c.Dump(ctx, "shardis:topology").Result()
	if err != nil {
		t.Fatal(err)
	}
	epoch, err := c.HGet(ctx, "shardis:node", "epoch").Result()
	if err != nil {
		t.Fatal(err)
	}
	return nodeEpoch{topo, epoch}
}

// restore puts the copy back on c.
func (ne nodeEpoch) restore(t *testing.T, c *redis.Client) {
	t.Helper()
	ctx := context.Background()
	if err := c.RestoreReplace(ctx, "shardis:topology", 0, ne.topo).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.HSet(ctx, "shardis:node", "epoch", ne.epoch).Err(); err != nil {
		t.Fatal(err)
	}
}
