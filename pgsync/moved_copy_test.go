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
	t.Parallel()
	e := newEnv(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	o := e.refusedThenReserved(t, ctx, "o")
	// the copy a topology change left on the node the record moved from
	frozen := o.failed
	frozen["moved"] = "2:moved"
	args := []any{}
	for k, v := range frozen {
		if v != "" {
			args = append(args, k, v)
		}
	}
	if err := e.raw[o.other].HSet(ctx, inventory.OrderKey(o.order), args...).Err(); err != nil {
		t.Fatal(err)
	}
	e.landsWithHomeDown(t, ctx, o, "the frozen copy")
}

// reusedOrder is an order id refused once and then reserved, acknowledged
// and cancelled by its user (refusedThenReserved).
type reusedOrder struct {
	order, home string
	other       string            // a node that is neither home nor n2
	failed      map[string]string // the refused attempt's record
	dump        string            // that record, DUMPed from home
	reserved    string            // the reservation's attempt token
}

// refusedThenReserved picks an order id (prefix-i) homed off n2, the
// node of route "one"; it is refused (r/c short), restocked, reserved
// again (its failed record taken over by a new attempt), acknowledged,
// then cancelled by the user.
func (e *env) refusedThenReserved(t *testing.T, ctx context.Context, prefix string) reusedOrder {
	t.Helper()
	e.loadStock("one", "b", 10)
	e.loadStock("one", "c", 1)
	homes, err := inventory.NewHomes(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	var o reusedOrder
	for i := 0; o.order == ""; i++ {
		if id := fmt.Sprintf("%s-%d", prefix, i); homes.Home(id) != "n2" {
			o.order = id
		}
	}
	o.home, o.other = homes.Home(o.order), "n1"
	if o.home == "n1" {
		o.other = "n3"
	}
	items := []inventory.Item{{Route: "one", SKU: "b", Quantity: 1}, {Route: "one", SKU: "c", Quantity: 2}}
	if _, err := e.inv.Reserve(ctx, o.order, items, "", time.Minute); !errors.Is(err, inventory.ErrInsufficientStock) {
		t.Fatalf("Reserve %s: %v, want ErrInsufficientStock", o.order, err)
	}
	if o.failed, err = inventory.ReadOrder(ctx, e.raw[o.home], o.order).Fields(); err != nil || o.failed["status"] != string(inventory.OrderFailed) {
		t.Fatalf("the refused order's record: %v, %v", o.failed, err)
	}
	if o.dump, err = e.raw[o.home].Dump(ctx, inventory.OrderKey(o.order)).Result(); err != nil {
		t.Fatal(err)
	}
	e.loadStock("one", "c", 10)
	if _, err := e.inv.Reserve(ctx, o.order, items, "", time.Minute); err != nil {
		t.Fatalf("Reserve %s again: %v", o.order, err)
	}
	rec, _ := inventory.ReadOrder(ctx, e.raw[o.home], o.order).Fields()
	if _, err := e.inv.Cancel(ctx, o.order); err != nil {
		t.Fatal(err)
	}
	o.reserved = rec["token"]
	t.Logf("order %s (home %s): refused attempt %s, reservation %s", o.order, o.home, o.failed["token"], o.reserved)
	return o
}

// landsWithHomeDown kills o's home, runs a sync, and fails the test
// unless every part of o's reservation on n2 has a row (what is a copy
// that must not make them read as refused).
func (e *env) landsWithHomeDown(t *testing.T, ctx context.Context, o reusedOrder, what string) {
	t.Helper()
	e.srv[o.home].Kill()
	n, _ := e.stack.Router.Node(o.home)
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
		if p.order != o.order || pgsync.PartToken(o.order, id) != o.reserved {
			continue
		}
		seen++
		if r, ok := rows[id]; !ok {
			t.Errorf("part %s of the acknowledged reservation %s (cancelled by the user) has no row: skipped as refused by %s on %s (skipped %v)",
				id, o.reserved, what, o.other, m.SkippedRefused())
		} else {
			t.Logf("part %s: row %+v", id, r)
		}
	}
	if seen == 0 {
		t.Fatalf("no part of reservation %s on n2: %v", o.reserved, parts)
	}
}
