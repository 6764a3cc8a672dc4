package inventory

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/topology"
)

// TestPutBackOfACopyOutlivingItsRecordIsRefused: order st, reserved with
// its record on n3 and its part on n1, is moved onto n2 by the removal of
// n3; n3 does not answer the expireMoved of the move (logged: the copy
// is kept frozen, marked moved at the removal's token, undecided). The
// client confirms st (paid) at n2; the Confirm's settle does not land
// and no reconciler reaches the part. st's confirmed record on n2 lives
// out its retention, then n2 goes back to its copy from before the
// removal, which never held st. The forward that brings n2 back must not
// put back n3's copy: it is the order as it was before its decision, and
// the record it would replace may have lived out its retention
// (order_move_out.lua: the rule a move follows, ARGV 5). Before, the put
// back passed no retention to the move out: st came back reserved, with
// no TTL, and the expiry of its due part cancelled the part of the paid
// order (its units sold again).
func TestPutBackOfACopyOutlivingItsRecordIsRefused(t *testing.T) {
	t.Parallel()
	e, three, two, _ := retireWorld(t)
	ctx := e.ctx
	for _, c := range []*config.Config{three, two} {
		c.Inventory.Retention, c.Inventory.MaxReservationTTL, c.Inventory.ReservationTTL = 5*time.Second, 4*time.Second, 3*time.Second
	}
	id := movedN3ToN2(t, three, two)
	n1, n2, n3 := e.clients["n1"], e.clients["n2"], e.clients["n3"]
	noExpire := func(ctx context.Context, c ScriptCall, send func() (any, error)) (any, error) {
		if c.Script == orderMovedExpireScript.name && c.Node == "n3" {
			return nil, errors.New("n3 unreachable (injected)")
		}
		return send()
	}
	inv := openInv(t, three, Options{})
	if _, err := inv.LoadStock(ctx, "a", "s", 10, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := inv.Reserve(ctx, id, []Item{{Route: "a", SKU: "s", Quantity: 2}}, "", 3*time.Second); err != nil {
		t.Fatal(err)
	}
	inv.Close()
	old2 := copyEpoch(t, n2)
	quiet := slog.New(slog.DiscardHandler)
	rep, err := ApplyTopology(ctx, ApplyOptions{To: two, From: three, Wait: 5 * time.Second, Logger: quiet, Faults: &hookFaults{call: noExpire}})
	if err != nil || rep.OrdersMoved != 1 || rep.Phase != topology.PhaseStable {
		t.Fatalf("removal of n3 = %+v, %v; want stable, 1 order moved", rep, err)
	}
	conf := openInv(t, two, Options{Faults: &hookFaults{call: func(ctx context.Context, c ScriptCall, send func() (any, error)) (any, error) {
		if c.Script == "settle" {
			return nil, errors.New("node unreachable (injected)")
		}
		return noExpire(ctx, c, send)
	}}})
	if out, err := conf.Confirm(ctx, id); err != nil || out.Status != StatusConfirmed || out.PendingParts == 0 {
		t.Fatalf("Confirm = %+v, %v; want confirmed, its part pending", out, err)
	}
	conf.Close()
	if f, ttl := orderFieldsOn(t, ctx, n3, id), n3.PTTL(ctx, orderKey(id)).Val(); f["moved"] == "" || f["status"] != string(OrderReserved) || ttl != -1 {
		t.Fatalf("order %s's copy on n3: %v (pttl %v); want it marked moved, reserved, frozen", id, f, ttl)
	}
	for deadline := time.Now().Add(20 * time.Second); n2.Exists(ctx, orderKey(id)).Val() != 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("order %s's confirmed record on n2 did not expire", id)
		}
	}
	// n2 goes back to its copy from before the removal (no record of st)
	old2.restore(t, n2)
	rep, err = ApplyTopology(ctx, ApplyOptions{To: two, From: three, Wait: 5 * time.Second, Logger: quiet})
	if err != nil || len(rep.Forward) != 1 || rep.Phase != topology.PhaseStable {
		t.Fatalf("bringing n2 forward = %+v, %v; want it forward, stable", rep, err)
	}
	if f := orderFieldsOn(t, ctx, n2, id); len(f) > 0 && f["moved"] == "" {
		t.Errorf("order %s on n2 after the forward (put back %d): %v; want no live record (its confirmed one lived out its retention)", id, rep.Reinstalled, f)
	}
	if ttl := n3.PTTL(ctx, orderKey(id)).Val(); ttl == -1 {
		t.Errorf("order %s's marked copy on n3 still has no TTL after the forward", id)
	}
	// the reconciler reaches the part, due, at last
	late := openInv(t, two, Options{})
	n, err := late.ownNode("n1")
	if err != nil {
		t.Fatal(err)
	}
	due, err := late.DueParts(ctx, n, 100)
	if err != nil || len(due) != 1 {
		t.Fatalf("due parts on n1 = %+v, %v; want st's", due, err)
	}
	res, err := late.ResolveExpired(ctx, due[0])
	t.Logf("ResolveExpired(%s) = %q, %v", due[0].PartID, res, err)
	if f := partFieldsOn(t, ctx, n1, due[0].PartID); f["state"] == string(PartCancelled) {
		t.Errorf("part %s of the confirmed order %s cancelled (its units sold again): %v", due[0].PartID, id, f)
	}
}
