package pgsync_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/pgsync"
)

// A node that restarts empty and is accepted (a new incarnation) gets a
// position of its own: its new redo log lands from offset 1 under the new
// incarnation, the change is reported, the old incarnation's rows stay,
// and its pending parts the node no longer holds become lost.
func TestSyncNewIncarnation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e.loadStock("one", "d", 100) // route one is node n2 alone
	item := func(q int64) []inventory.Item { return []inventory.Item{{Route: "one", SKU: "d", Quantity: q}} }
	if _, err := e.inv.Reserve(ctx, "held", item(2), "", time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := e.inv.Reserve(ctx, "sold", item(3), "", time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := e.inv.Confirm(ctx, "sold"); err != nil && !errors.Is(err, inventory.ErrUnavailable) {
		t.Fatal(err)
	}
	m := pgsync.NewMetrics(nil)
	e.syncer(m)
	skus := [][2]string{{"one", "d"}}
	e.waitConsistent(15*time.Second, skus, nil)
	n2, _ := e.stack.Router.Node("n2")
	oldInc := n2.Incarnation()

	// n2 loses everything (no AOF, restart) and an operator accepts it.
	e.srv["n2"].Kill()
	e.srv["n2"].Restart()
	waitFor(t, 10*time.Second, "n2 to be refused for lost data", func() bool { return errors.Is(n2.DownReason(), node.ErrDataLost) })
	if _, err := e.stack.Router.AcceptNode(ctx, "n2"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "n2 to be usable again", n2.Usable)
	e.loadStock("one", "d", 50)
	if _, err := e.inv.Reserve(ctx, "after", item(4), "", time.Hour); err != nil {
		t.Fatal(err)
	}
	newInc := n2.Incarnation()
	if newInc == oldInc {
		t.Fatal("accepting n2 did not give it a new incarnation")
	}
	waitFor(t, 10*time.Second, "the new incarnation to be reported", func() bool { return m.NewIncarnations("n2") == 1 })
	e.waitConsistent(15*time.Second, skus, map[string]bool{oldInc: true})
	waitFor(t, 10*time.Second, "the held part of the old incarnation to be lost", func() bool { return m.Lost() == 1 })

	rows, err := e.dbRows(ctx, "n2")
	if err != nil {
		t.Fatal(err)
	}
	byOrder := map[string]dbRow{}
	for _, r := range rows {
		byOrder[r.order] = r
	}
	for order, want := range map[string]dbRow{
		"held":  {inc: oldInc, state: "lost", offset: 1, qty: 2},
		"sold":  {inc: oldInc, state: "confirmed", offset: 2, qty: 3},
		"after": {inc: newInc, state: "pending", offset: 1, qty: 4},
	} {
		r := byOrder[order]
		if r.inc != want.inc || r.state != want.state || r.offset != want.offset || r.qty != want.qty {
			t.Errorf("order %s: row %+v, want incarnation %s, state %s, offset %d, quantity %d", order, r, want.inc, want.state, want.offset, want.qty)
		}
	}
	status, err := pgsync.Status(ctx, e.inv, e.pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range status {
		if ns.Node != "n2" {
			continue
		}
		if ns.Incarnation != newInc || len(ns.Incarnations) != 2 || ns.Incarnations[0].Incarnation != oldInc ||
			ns.Incarnations[1].Incarnation != newInc || ns.Incarnations[0].Rows != 2 || ns.Incarnations[1].Rows != 1 {
			t.Errorf("status of n2: %+v", ns)
		}
	}
}
