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

// Refused attempts stay out of the database (doc.go, "Refused attempts"):
// an order whose one-round attempt takes one item and finds the other
// short gives the taken parts back (its record says it failed); the sync,
// which holds pending parts back for decide_wait, reads them cancelled by
// a refused attempt and leaves them out, its position past them. So it
// does for the parts of an order with no record at all (a one-round
// attempt refused by a limit withdraws its record: here the record is
// deleted before the sync starts). An order reserved beside them lands as
// usual.
func TestSyncLeavesRefusedAttemptsOut(t *testing.T) {
	t.Parallel()
	testRefusedAttempts(t, false, false)
	testRefusedAttempts(t, false, true)
}

// TestSyncLandsRefusedWhileMigrating: while a topology change is migrating
// a record may still be on a node that a configuration no longer names,
// so "no record on any node" proves nothing: the parts of an order with no
// record land, cancelled, as before; those whose record says refused are
// still left out.
func TestSyncLandsRefusedWhileMigrating(t *testing.T) {
	t.Parallel()
	testRefusedAttempts(t, true, false)
	testRefusedAttempts(t, true, true)
}

func testRefusedAttempts(t *testing.T, migrating, noRecord bool) {
	e := newEnv(t, false)
	e.loadStock("one", "b", 10)
	e.loadStock("one", "c", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	homes, err := inventory.NewHomes(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	id := func(prefix string) string { // an id homed off n2, the node of route "one": the one-round path
		for i := 0; ; i++ {
			if id := fmt.Sprintf("%s-%d", prefix, i); homes.Home(id) != "n2" {
				return id
			}
		}
	}
	refused, kept := id("refused"), id("kept")
	_, err = e.inv.Reserve(ctx, refused, []inventory.Item{{Route: "one", SKU: "b", Quantity: 1}, {Route: "one", SKU: "c", Quantity: 2}}, "", time.Minute)
	if !errors.Is(err, inventory.ErrInsufficientStock) {
		t.Fatalf("Reserve %s: %v, want ErrInsufficientStock", refused, err)
	}
	if _, err := e.inv.Reserve(ctx, kept, []inventory.Item{{Route: "one", SKU: "b", Quantity: 1}}, "", time.Minute); err != nil {
		t.Fatal(err)
	}
	took := e.refusedTookAndGaveBack(t, ctx, refused)
	if noRecord {
		if n, err := e.raw[homes.Home(refused)].Del(ctx, "inv:order:"+refused).Result(); err != nil || n != 1 {
			t.Fatalf("deleting the refused order's record: %d, %v", n, err)
		}
	}
	if migrating {
		// The nodes' record says migrating, from the same topology: the
		// service's instance keeps its stable view, the sync's reads this.
		for _, c := range e.raw {
			cur, err := c.HGet(ctx, "shardis:topology", "current").Result()
			if err != nil {
				t.Fatal(err)
			}
			if err := c.HSet(ctx, "shardis:topology", "phase", "migrating", "prev", cur).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	m := pgsync.NewMetrics(nil)
	e.openSyncer(quiet(), pgsync.Settings{Metrics: m})
	e.waitConsistent(10*time.Second, [][2]string{{"one", "b"}, {"one", "c"}}, nil) // positions at the heads
	var rows, keptRows int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE order_id = $1), count(*) FILTER (WHERE order_id = $2)
FROM stock_movements`, refused, kept).Scan(&rows, &keptRows); err != nil {
		t.Fatal(err)
	}
	wantRows, wantSkipped := 0, took
	if migrating && noRecord {
		wantRows, wantSkipped = took, 0
	}
	if rows != wantRows || keptRows != 1 {
		t.Fatalf("migrating %v, no record %v: rows of the refused order %d, want %d; of the reserved one %d, want 1",
			migrating, noRecord, rows, wantRows, keptRows)
	}
	if got := m.SkippedRefused(); got != float64(wantSkipped) {
		t.Errorf("migrating %v, no record %v: shardis_sync_skipped_refused_parts_total = %v, want %d", migrating, noRecord, got, wantSkipped)
	}
}

// refusedOffN2 reserves a 2-item order homed off n2 (the one-round path)
// that asks for 2 units of one/c, which holds 1: it is refused for
// insufficient stock after its other part took one/b. It returns its id.
func (e *env) refusedOffN2(t *testing.T, ctx context.Context) string {
	t.Helper()
	homes, err := inventory.NewHomes(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	refused := ""
	for i := 0; refused == ""; i++ {
		if id := fmt.Sprintf("refused-%d", i); homes.Home(id) != "n2" {
			refused = id
		}
	}
	_, err = e.inv.Reserve(ctx, refused, []inventory.Item{{Route: "one", SKU: "b", Quantity: 1}, {Route: "one", SKU: "c", Quantity: 2}}, "", time.Minute)
	if !errors.Is(err, inventory.ErrInsufficientStock) {
		t.Fatalf("Reserve %s: %v, want ErrInsufficientStock", refused, err)
	}
	return refused
}

// refusedTookAndGaveBack checks that the refused order took parts on n2
// and that each is cancelled (given back): the attempt these tests need.
// It returns how many parts it took.
func (e *env) refusedTookAndGaveBack(t *testing.T, ctx context.Context, refused string) (took int) {
	t.Helper()
	parts, err := e.nodeParts(ctx, "n2")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range parts {
		if p.order == refused {
			took++
			if p.state != string(inventory.PartCancelled) {
				t.Fatalf("the refused order's part is %s, want cancelled", p.state)
			}
		}
	}
	if took == 0 {
		t.Fatal("the refused order took nothing: the test needs an attempt that takes, then is refused")
	}
	return took
}
