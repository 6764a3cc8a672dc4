package pgsync_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/pgsync"
)

// n2's queue is landed to offset 3 (acknowledged and trimmed), then n2
// goes back, unseen by rollback detection, to a copy whose head and
// acknowledgement are 1 (simulated as TestTrimmedPositionStillSeesARewind
// does: its redo log's head and acknowledgement, and the records of the
// parts it never took), and the queue is paused as gone back. n2 hands offsets 2..5 out
// to new reservations, which are confirmed, and inventory.redo_max_age
// (> 0, opted in) trims them unlanded. Every one of them must then have a
// row, be recorded in sync_gaps, or the queue stay paused: none may be
// passed over unreported.
func TestPausedQueueTrimmedByMaxAgeReportsWhatItPassed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	skus := [][2]string{{"one", "d"}}
	e.loadStock("one", "d", 100)
	e.confirmedN(t, ctx, "a", 3)
	m := pgsync.NewMetrics(nil)
	e.openSyncer(testLog(t), pgsync.Settings{Metrics: m})
	e.waitConsistent(15*time.Second, skus, nil)
	q := queueOf(t, e, "n2")
	key := inventory.RedoLogKey(q)
	e.drainN2(t, ctx)

	// n2 goes back to a copy whose head and acknowledgement are 1: it
	// never took the parts at offsets 2 and 3
	for id, p := range e.partsOf(t, ctx) {
		if p.offset > 1 {
			e.raw["n2"].Del(ctx, "inv:part:"+id)
		}
	}
	e.raw["n2"].HSet(ctx, inventory.RedoOffsetsKey, key, 1)
	e.raw["n2"].HSet(ctx, "inv:redo:acked", key, 1)
	waitFor(t, 5*time.Second, "the queue reported as gone back", func() bool { return m.Rewound("n2") == 1 })
	e.confirmedN(t, ctx, "b", 4) // offsets 2..5
	time.Sleep(1200 * time.Millisecond)
	// redo_max_age of 1 s trims them, settled, unlanded
	if _, err := e.inv.TrimRedoLog(ctx, "n2", time.Second, 1000); err != nil {
		t.Fatal(err)
	}
	if left, err := e.inv.RedoLogLen(ctx, "n2"); err != nil || left != 0 {
		t.Fatalf("n2's redo log after the trim: %d entries, %v; want none", left, err)
	}
	time.Sleep(2 * time.Second) // polls

	parts := e.partsOf(t, ctx)
	rows, err := e.dbRows(ctx, "n2")
	if err != nil {
		t.Fatal(err)
	}
	for id, p := range parts {
		if !strings.HasPrefix(p.order, "b-") {
			continue
		}
		if _, ok := rows[id]; ok || m.Rewound("n2") == 1 {
			continue
		}
		var gaps int
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM sync_gaps WHERE node = 'n2' AND queue = $1
AND $2 BETWEEN first_offset AND last_offset`, q, p.offset).Scan(&gaps); err != nil {
			t.Fatal(err)
		}
		if gaps == 0 {
			t.Errorf("reservation %s: part at offset %d has no row, no sync_gaps range, and the queue is not paused", p.order, p.offset)
		}
	}
}
