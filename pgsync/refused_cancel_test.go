package pgsync_test

import (
	"context"
	"testing"
	"time"

	"github.com/shardis/shardis/pgsync"
)

// A client that gives up on an order it could not reserve (or whose
// Reserve it saw time out) cancels it: the Cancel turns the refused
// attempt's failed record into a cancelled one of the same token. The
// attempt's parts, given back at the refusal, never were a reservation:
// they stay out of the database as before the Cancel (doc.go, "Refused
// attempts": a refused attempt never reaches the database as rows).
func TestSyncLeavesRefusedAttemptOutAfterCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	e.loadStock("one", "b", 10)
	e.loadStock("one", "c", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	refused := e.refusedOffN2(t, ctx)
	// the client cleans up the order it could not reserve
	out, err := e.inv.Cancel(ctx, refused)
	if err != nil {
		t.Fatalf("Cancel %s: %v", refused, err)
	}
	t.Logf("Cancel of the refused order: %+v", out)
	took := e.refusedTookAndGaveBack(t, ctx, refused)
	m := pgsync.NewMetrics(nil)
	e.openSyncer(quiet(), pgsync.Settings{Metrics: m})
	waitFor(t, 10*time.Second, "n2's positions at its heads", func() bool {
		var behind int
		_ = e.pool.QueryRow(ctx, `SELECT count(*) FROM sync_positions WHERE node = 'n2' AND redo_offset = 0`).Scan(&behind)
		var landed int
		_ = e.pool.QueryRow(ctx, `SELECT count(*) FROM sync_positions WHERE node = 'n2'`).Scan(&landed)
		return landed > 0
	})
	time.Sleep(500 * time.Millisecond)
	var rows int
	var states string
	if err := e.pool.QueryRow(ctx, `SELECT count(*), coalesce(string_agg(state || '/' || coalesce(reason, 'NULL'), ','), '')
FROM stock_movements WHERE order_id = $1`, refused).Scan(&rows, &states); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Errorf("the refused attempt (%d parts taken and given back, never a reservation) has %d rows after the client's Cancel (%s), want none; skipped %v",
			took, rows, states, m.SkippedRefused())
	}
}
