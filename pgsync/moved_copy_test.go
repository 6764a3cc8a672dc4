package pgsync_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/pgsync"
)

// A copy of an order record that a topology change moved away is frozen
// at the move: the order lives on at its new home (here: an attempt the
// copy saw refused, failed, and a later attempt of the same order id that
// took the failed record over, was reserved, acknowledged and cancelled).
// Read while that home is down, the frozen copy names the refused attempt:
// it proves nothing about the later one, whose cancelled parts were a
// reservation and must land (with no reason: the record was not read).
// The moved copy is written here as a move leaves it (the record's fields
// at the move, marked moved, on the node it moved from).
func TestSyncLandsAReservationReadFromAFrozenCopy(t *testing.T) {
	e := newEnv(t, false)
	e.loadStock("one", "b", 10)
	e.loadStock("one", "c", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	homes, err := inventory.NewHomes(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	order := ""
	for i := 0; order == ""; i++ { // homed off n2, the node of route "one"
		if id := fmt.Sprintf("o-%d", i); homes.Home(id) != "n2" {
			order = id
		}
	}
	home := homes.Home(order)
	other := "n1"
	if home == "n1" {
		other = "n3"
	}
	items := []inventory.Item{{Route: "one", SKU: "b", Quantity: 1}, {Route: "one", SKU: "c", Quantity: 2}}
	if _, err := e.inv.Reserve(ctx, order, items, "", time.Minute); !errors.Is(err, inventory.ErrInsufficientStock) {
		t.Fatalf("Reserve %s: %v, want ErrInsufficientStock", order, err)
	}
	frozen, err := inventory.ReadOrder(ctx, e.raw[home], order).Fields()
	if err != nil || frozen["status"] != string(inventory.OrderFailed) {
		t.Fatalf("the refused order's record: %v, %v", frozen, err)
	}
	// restocked: the order id is reserved again (its failed record taken
	// over by a new attempt), acknowledged, then cancelled by the user
	e.loadStock("one", "c", 10)
	if _, err := e.inv.Reserve(ctx, order, items, "", time.Minute); err != nil {
		t.Fatalf("Reserve %s again: %v", order, err)
	}
	rec, _ := inventory.ReadOrder(ctx, e.raw[home], order).Fields()
	if _, err := e.inv.Cancel(ctx, order); err != nil {
		t.Fatal(err)
	}
	reserved := rec["token"]
	t.Logf("order %s (home %s): refused attempt %s, reservation %s", order, home, frozen["token"], reserved)

	// the copy a topology change left on the node the record moved from
	frozen["moved"] = "2:moved"
	args := []any{}
	for k, v := range frozen {
		if v != "" {
			args = append(args, k, v)
		}
	}
	if err := e.raw[other].HSet(ctx, inventory.OrderKey(order), args...).Err(); err != nil {
		t.Fatal(err)
	}
	// the order's home is down when the sync reads its parts
	e.srv[home].Kill()
	n, _ := e.stack.Router.Node(home)
	waitFor(t, 10*time.Second, "the home down", func() bool { return !n.Usable() })

	m := pgsync.NewMetrics(nil)
	e.openSyncer(testLog(t), pgsync.Settings{Metrics: m})
	waitFor(t, 15*time.Second, "n2 landed", func() bool {
		var behind int
		err := e.pool.QueryRow(ctx, `SELECT count(*) FROM sync_positions WHERE node = 'n2'`).Scan(&behind)
		return err == nil && behind > 0
	})
	time.Sleep(time.Second)
	parts, err := e.nodeParts(ctx, "n2")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := e.dbRows(ctx, "n2")
	if err != nil {
		t.Fatal(err)
	}
	for id, p := range parts {
		if p.order != order || pgsync.PartToken(order, id) != reserved {
			continue
		}
		if r, ok := rows[id]; !ok {
			t.Errorf("part %s of the acknowledged reservation %s (cancelled by the user) has no row: skipped as refused by the frozen copy (skipped %v)",
				id, reserved, m.SkippedRefused())
		} else {
			t.Logf("part %s: row %+v", id, r)
		}
	}
}
