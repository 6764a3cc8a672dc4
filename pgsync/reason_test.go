package pgsync_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/pgsync"
)

// A cancelled row says why: a user's Cancel ("cancelled") and a
// reservation that ran past its TTL ("expired", cancelled by the
// reconciler) are told apart, whether the part lands already cancelled
// or is landed pending and settled later; other rows have no reason. The
// final states stay as the nodes hold them, each part one row.
func TestSyncCancelReason(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	skus := [][2]string{{"all", "a"}}
	e.loadStock("all", "a", 1000)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reserve := func(id string, ttl time.Duration) {
		t.Helper()
		if _, err := e.inv.Reserve(ctx, id, []inventory.Item{{Route: "all", SKU: "a", Quantity: 1}}, "", ttl); err != nil {
			t.Fatalf("Reserve %s: %v", id, err)
		}
	}
	settle := func(id string, confirm bool) {
		t.Helper()
		var err error
		if confirm {
			_, err = e.inv.Confirm(ctx, id)
		} else {
			_, err = e.inv.Cancel(ctx, id)
		}
		if err != nil {
			t.Fatalf("settling %s: %v", id, err)
		}
	}
	waitNoneReserved := func() {
		t.Helper()
		waitFor(t, 8*time.Second, "the expired reservations to be cancelled on the nodes", func() bool {
			lvl, err := e.inv.GetStock(ctx, "all", "a")
			return err == nil && lvl.Reserved == 0
		})
	}

	// live-*: landed pending, then settled by the settle pass; late-*:
	// landed already cancelled.
	st := e.openSyncer(quiet(), pgsync.Settings{Metrics: pgsync.NewMetrics(nil)})
	reserve("live-conf", time.Minute)
	reserve("live-user", time.Minute)
	reserve("live-exp", time.Second)
	e.waitConsistent(10*time.Second, skus, nil) // landed pending
	st.Close()
	reserve("late-user", time.Minute)
	reserve("late-exp", time.Second)
	settle("live-conf", true)
	settle("live-user", false)
	settle("late-user", false)
	waitNoneReserved()
	e.openSyncer(quiet(), pgsync.Settings{Metrics: pgsync.NewMetrics(nil)})
	e.waitConsistent(10*time.Second, skus, nil)

	want := map[string][2]string{
		"live-conf": {"confirmed", ""}, "live-user": {"cancelled", "cancelled"}, "live-exp": {"cancelled", "expired"},
		"late-user": {"cancelled", "cancelled"}, "late-exp": {"cancelled", "expired"},
	}
	rows, _ := e.pool.Query(ctx, "SELECT order_id, state, coalesce(reason, '') FROM stock_movements")
	got := map[string][2]string{}
	var order, state, reason string
	if _, err := pgx.ForEachRow(rows, []any{&order, &state, &reason}, func() error {
		if prev, dup := got[order]; dup {
			t.Errorf("order %s has two rows (%v, %s %s): a 1-unit order takes one part", order, prev, state, reason)
		}
		got[order] = [2]string{state, reason}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("order %s: row (state, reason) %q, want %q", id, got[id], w)
		}
	}
}

// The reason of a cancelled part follows its order's record: the cause
// the record gives when the attempt that took the part holds it, refused
// when the attempt never became a reservation, none when the record does
// not say (the part is not one of a cancelled order).
func TestReasonOf(t *testing.T) {
	rec := func(st inventory.OrderState, token string, reason inventory.DecisionReason) inventory.OrderRecord {
		return inventory.OrderRecord{ID: "o", Status: st, Token: token, Reason: reason}
	}
	for _, c := range []struct {
		rec  inventory.OrderRecord
		want pgsync.CancelReason
		ok   bool
	}{
		{rec(inventory.OrderCancelled, "t1", "cancelled"), pgsync.ReasonCancelled, true},
		{rec(inventory.OrderCancelled, "t1", "expired"), pgsync.ReasonExpired, true},
		{rec(inventory.OrderCancelled, "t2", "expired"), pgsync.ReasonRefused, true},   // a later attempt's order
		{rec(inventory.OrderReserved, "t2", ""), pgsync.ReasonRefused, true},           // taken over
		{rec(inventory.OrderFailed, "t1", ""), pgsync.ReasonRefused, true},             // the attempt failed
		{rec(inventory.OrderReserving, "t1", ""), pgsync.ReasonRefused, true},          // failing now
		{rec(inventory.OrderCancelled, "", "tombstone"), pgsync.ReasonRefused, true},   // cancelled before it was reserved
		{rec(inventory.OrderCancelled, "t1", "tombstone"), pgsync.ReasonRefused, true}, // cancelled after it failed
		{rec(inventory.OrderConfirmed, "t1", "confirmed"), "", false},                  // not cancelled
		{rec(inventory.OrderReserved, "t1", ""), "", false},
	} {
		got, ok := pgsync.ReasonOf(c.rec, "t1")
		if got != c.want || ok != c.ok {
			t.Errorf("record %+v, part of t1: %q %v, want %q %v", c.rec, got, ok, c.want, c.ok)
		}
	}
}

// Migrating a database of schema version 1 adds the reason column and
// keeps its rows (reason NULL).
func TestMigrateAddsReason(t *testing.T) {
	t.Parallel()
	pg := newPG(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := pg.Exec(ctx, `CREATE TABLE shardis_sync_schema (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());
INSERT INTO shardis_sync_schema (version) VALUES (1);`+pgsync.Migrations[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := pg.Exec(ctx, `INSERT INTO stock_movements (node, incarnation, queue, redo_offset, part_id, order_id, route, sku, quantity, state)
VALUES ('n1', 'i1', 0, 1, 'o|t|0', 'o', 'all', 'a', 1, 'cancelled')`); err != nil {
		t.Fatal(err)
	}
	from, to, err := pgsync.Migrate(ctx, pg)
	if err != nil || from != 1 || to != pgsync.SchemaVersion {
		t.Fatalf("Migrate: %d→%d %v, want 1→%d", from, to, err, pgsync.SchemaVersion)
	}
	var n int
	var reason *string
	if err := pg.QueryRow(ctx, "SELECT count(*), max(reason) FROM stock_movements").Scan(&n, &reason); err != nil || n != 1 || reason != nil {
		t.Fatalf("after migrating: %d rows, reason %v, err %v; want the row kept with no reason", n, reason, err)
	}
	if _, err := pg.Exec(ctx, "UPDATE stock_movements SET reason = 'whim'"); err == nil {
		t.Error("a reason outside cancelled, expired, refused was accepted")
	}
}
