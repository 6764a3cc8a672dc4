package inventory

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/topology"
)

// TestMovedCopyOutlivingItsRecordIsNotReinstalled: a copy marked moved at
// the apply's token that outlives its order's live record at the new home
// (its TTL never given: expireMoved failed at the apply's move and at the
// Confirm's touch, a failure migrate.go logs) while the apply still
// migrates. Before, the next move of the order (here the operator's check
// in SettleStuck, homeFor; the expiry's and the apply's rerun alike)
// installed it again where the confirmed record had lived out its
// retention: the order came back reserved, without a TTL, the operator's
// confirm by the system of record was refused ("the decision is the
// record's"), and the expiry after the retry cancelled the part of the
// paid order (its unit sold again). The move out now moves such a copy no
// more once that record may have lived out its retention
// (order_move_out.lua), so the order's record is gone and the operator
// decides.
func TestMovedCopyOutlivingItsRecordIsNotReinstalled(t *testing.T) {
	t.Parallel()
	e := newLeaveEnv(t, false)
	// a retention short enough to live out here, above a hold long
	// enough for the apply and the Confirm to run before the order's
	// deadline on a loaded machine (they took 2.3 s at load 19; with a
	// hold of 3 s Confirm answered that the reservation had expired), and
	// a command timeout such a machine does not trip; copies, for the
	// env's instance reads its configuration
	for _, cp := range []**config.Config{&e.old, &e.new} {
		c := **cp
		c.Inventory.Retention, c.Inventory.MaxReservationTTL, c.Inventory.ReservationTTL = 7*time.Second, 6*time.Second, 3*time.Second
		c.Client.CommandTimeout = 5 * time.Second
		*cp = &c
	}
	old := openInv(t, e.old, Options{})
	// an order that holds a part on leaving n3: the apply returns waiting
	// for it (migrating), and is not run again here, as one waiting for a
	// part set aside there
	if _, err := old.Reserve(e.ctx, "keeps-migrating", []Item{{Route: "r", SKU: "z", Quantity: 250}}, "", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	// the order: its record on n3 (minted there), which leaves, so the
	// apply moves its record to n1 or n2
	order := mintIDFrom("n3", [mintRandHex / 2]byte{1, 2, 3, 4, 5, 6, 7, 8})
	if _, err := old.Reserve(e.ctx, order, []Item{{Route: "r", SKU: "z", Quantity: 1}}, "", 6*time.Second); err != nil {
		t.Fatal(err)
	}
	// n3 does not answer the expireMoved of any mover (a pause, a
	// partition after the move out): logged, the copy kept frozen
	noExpire := func(ctx context.Context, c ScriptCall, send func() (any, error)) (any, error) {
		if c.Script == orderMovedExpireScript.name && c.Node == "n3" {
			return nil, errors.New("n3 unreachable (injected)")
		}
		return send()
	}
	rep, err := ApplyTopology(e.ctx, ApplyOptions{To: e.new, From: e.old, Wait: 300 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler), Faults: &hookFaults{call: noExpire}})
	if err != nil || rep.Phase != topology.PhaseMigrating {
		t.Fatalf("apply = %+v, %v; want migrating (waiting for the part on n3)", rep, err)
	}
	// the client confirms (paid) before the deadline; its settles do not
	// land (the deferred settle lost with the instance)
	conf := openInv(t, e.old, Options{Faults: &hookFaults{call: func(ctx context.Context, c ScriptCall, send func() (any, error)) (any, error) {
		if c.Script == "settle" {
			return nil, errors.New("node unreachable (injected)")
		}
		return noExpire(ctx, c, send)
	}}})
	if out, err := conf.Confirm(e.ctx, order); err != nil || out.Status != StatusConfirmed || out.PendingParts == 0 {
		t.Fatalf("Confirm = %+v, %v; want confirmed, its parts pending", out, err)
	}
	nh, err := NewHomes(e.new)
	if err != nil {
		t.Fatal(err)
	}
	home := nh.Home(order)
	if home == "n3" {
		t.Fatalf("the order's new home is n3")
	}
	copyTTL, _ := e.clients["n3"].PTTL(e.ctx, orderKey(order)).Result()
	liveTTL, _ := e.clients[home].PTTL(e.ctx, orderKey(order)).Result()
	if f := orderFieldsOn(t, e.ctx, e.clients["n3"], order); f["moved"] == "" || copyTTL != -1 || liveTTL <= 0 {
		t.Fatalf("copy on n3 %v (pttl %d), live record on %s pttl %d: want a frozen copy marked moved outliving the live record", f, copyTTL, home, liveTTL)
	}
	// the live record lives out its retention (the copy, without a TTL,
	// outlives it) while the apply still migrates; no reconciler reached
	// the part meanwhile
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if n, err := e.clients[home].Exists(e.ctx, orderKey(order)).Result(); err == nil && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("order %s's record on %s did not expire", order, home)
		}
	}
	var p PendingPart
	for _, name := range []string{"n1", "n2", "n3"} {
		keys, err := e.clients[name].Keys(e.ctx, partKeyPrefix+order+"|*").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if name != "n3" || p.PartID == "" { // one on a node that stays, if any
				p = PendingPart{Node: name, PartID: strings.TrimPrefix(k, partKeyPrefix), OrderID: order}
			}
		}
	}
	if p.PartID == "" {
		t.Fatalf("no part of %s on n1..n3", order)
	}
	if f := partFieldsOn(t, e.ctx, e.clients[p.Node], p.PartID); f["state"] != string(PartPending) {
		t.Fatalf("part %s on %s: %v; want pending", p.PartID, p.Node, f)
	}
	// the operator settles it by the system of record: the order was paid
	old = openInv(t, e.old, Options{}) // at the nodes' topology
	if _, err := old.SetAside(e.ctx, p, "test: its order's record is gone", time.Hour, time.Hour); err != nil {
		t.Fatal(err)
	}
	got, err := old.SettleStuck(e.ctx, p.Node, p.PartID, Confirm)
	if f := orderFieldsOn(t, e.ctx, e.clients[home], order); len(f) > 0 {
		t.Errorf("order %s's record on its home %s after the operator's check: %v; want none (it lived out its retention)", order, home, f)
	}
	if err != nil || got != settleDone {
		t.Errorf("SettleStuck(confirm) of the part of a paid order whose record is gone = %q, %v; want done", got, err)
		// what the operator is told to do: retry, the record decides
		if _, err := old.RetryStuck(e.ctx, p.Node, p.PartID); err != nil {
			t.Fatal(err)
		}
		n, err := old.ownNode(p.Node)
		if err != nil {
			t.Fatal(err)
		}
		due, err := old.DueParts(e.ctx, n, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range due {
			if d.PartID == p.PartID {
				r, err := old.ResolveExpired(e.ctx, d)
				t.Logf("ResolveExpired after the retry = %q, %v", r, err)
			}
		}
	}
	if f := partFieldsOn(t, e.ctx, e.clients[p.Node], p.PartID); f["state"] == string(PartCancelled) {
		t.Errorf("part %s of the confirmed order %s cancelled (its units sold again): %v", p.PartID, order, f)
	}
}
