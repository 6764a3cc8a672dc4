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

// A live (unmarked) order record on a node that does not home the order is
// a leftover: here a refused attempt's failed record, dumped from the
// order's home and restored onto another node, as a node restored from an
// old snapshot or rejoining with old data brings one back. The order went
// on at its home: a later attempt took the failed record over, was
// reserved, acknowledged and cancelled by the user. Read while the home is
// down, the leftover names the refused attempt and proves nothing about
// the later one, whose cancelled parts were a reservation and must land.
func TestSyncIgnoresAStaleRecordAwayFromItsHome(t *testing.T) {
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
		if id := fmt.Sprintf("s-%d", i); homes.Home(id) != "n2" {
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
	failed, err := inventory.ReadOrder(ctx, e.raw[home], order).Fields()
	if err != nil || failed["status"] != string(inventory.OrderFailed) {
		t.Fatalf("the refused order's record: %v, %v", failed, err)
	}
	dump, err := e.raw[home].Dump(ctx, inventory.OrderKey(order)).Result()
	if err != nil {
		t.Fatal(err)
	}
	e.loadStock("one", "c", 10)
	if _, err := e.inv.Reserve(ctx, order, items, "", time.Minute); err != nil {
		t.Fatalf("Reserve %s again: %v", order, err)
	}
	rec, _ := inventory.ReadOrder(ctx, e.raw[home], order).Fields()
	if _, err := e.inv.Cancel(ctx, order); err != nil {
		t.Fatal(err)
	}
	reserved := rec["token"]
	t.Logf("order %s (home %s): refused attempt %s, reservation %s; leftover on %s", order, home, failed["token"], reserved, other)

	// the leftover: the failed record, byte for byte, on a non-home node
	if err := e.raw[other].RestoreReplace(ctx, inventory.OrderKey(order), 0, dump).Err(); err != nil {
		t.Fatal(err)
	}
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
	seen := 0
	for id, p := range parts {
		if p.order != order || pgsync.PartToken(order, id) != reserved {
			continue
		}
		seen++
		if r, ok := rows[id]; !ok {
			t.Errorf("part %s of the acknowledged reservation %s (cancelled by the user) has no row: skipped as refused by the leftover on %s (skipped %v)",
				id, reserved, other, m.SkippedRefused())
		} else {
			t.Logf("part %s: row %+v", id, r)
		}
	}
	if seen == 0 {
		t.Fatalf("no part of reservation %s on n2: %v", reserved, parts)
	}
}
