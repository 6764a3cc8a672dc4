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
// short gives the taken part back and withdraws its record; the sync,
// which holds pending parts back for decide_wait, reads that part
// cancelled by a refused attempt and leaves it out, its position past it.
// An order reserved beside it lands as usual.
func TestSyncLeavesRefusedAttemptsOut(t *testing.T) {
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
	m := pgsync.NewMetrics(nil)
	e.openSyncer(quiet(), pgsync.Settings{Metrics: m})
	refused, kept := id("refused"), id("kept")
	_, err = e.inv.Reserve(ctx, refused, []inventory.Item{{Route: "one", SKU: "b", Quantity: 1}, {Route: "one", SKU: "c", Quantity: 2}}, "", time.Minute)
	if !errors.Is(err, inventory.ErrInsufficientStock) {
		t.Fatalf("Reserve %s: %v, want ErrInsufficientStock", refused, err)
	}
	if _, err := e.inv.Reserve(ctx, kept, []inventory.Item{{Route: "one", SKU: "b", Quantity: 1}}, "", time.Minute); err != nil {
		t.Fatal(err)
	}
	parts, err := e.nodeParts(ctx, "n2")
	if err != nil {
		t.Fatal(err)
	}
	took := 0
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
	e.waitConsistent(10*time.Second, [][2]string{{"one", "b"}, {"one", "c"}}, nil) // positions at the heads
	var rows, keptRows int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE order_id = $1), count(*) FILTER (WHERE order_id = $2)
FROM stock_movements`, refused, kept).Scan(&rows, &keptRows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 || keptRows != 1 {
		t.Fatalf("rows: refused order %d, want 0; reserved order %d, want 1", rows, keptRows)
	}
	if got := m.SkippedRefused(); got != float64(took) {
		t.Errorf("shardis_sync_skipped_refused_parts_total = %v, want %d", got, took)
	}
}
