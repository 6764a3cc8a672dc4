package pgsync_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/pgsync"
)

// A node accepted with a copy of its data (a new incarnation whose data
// descends from the old one) hands the sync its redo log from offset 0,
// with what the copy had trimmed gone: those entries were handled under
// the earlier incarnation, and "passed over silently" (README, "Nothing
// trimmed before it landed"). Among them are the entries of a refused
// attempt the sync left out (doc.go, "Refused attempts"): no row, but
// handled all the same. Counted by rows only, they were recorded in
// sync_gaps, logged and counted as entries trimmed before they landed: a
// loss reported where nothing was lost.
func TestReview2AcceptedCopyWithSkippedRefusedReportsNoGap(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	skus := [][2]string{{"one", "b"}, {"one", "c"}}
	e.loadStock("one", "b", 10)
	e.loadStock("one", "c", 1)
	refused := e.refusedOffN2(t, ctx)
	e.refusedTookAndGaveBack(t, ctx, refused)
	for i := range 2 {
		id := fmt.Sprintf("kept-%d", i)
		if _, err := e.inv.Reserve(ctx, id, []inventory.Item{{Route: "one", SKU: "b", Quantity: 1}}, "", time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := e.inv.Confirm(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	m := pgsync.NewMetrics(nil)
	e.syncer(m)
	e.waitConsistent(15*time.Second, skus, nil)
	if m.SkippedRefused() == 0 {
		t.Fatal("the refused attempt's parts were not skipped: the test needs an entry left out")
	}
	e.drainN2(t, ctx) // landed, acknowledged, trimmed: the skipped entries too
	n2, _ := e.stack.Router.Node("n2")
	inc1 := n2.Incarnation()
	e.goBackN2(t, ctx, skus, func() {
		e.reserveN("late", "one", "b", 1, time.Hour) // the copy is behind this
	})
	waitFor(t, 15*time.Second, "the new incarnation landed", func() bool { return m.NewIncarnations("n2") == 1 })
	e.waitConsistent(15*time.Second, skus, map[string]bool{inc1: true})

	var gaps int
	var detail string
	if err := e.pool.QueryRow(ctx, `SELECT count(*), coalesce(string_agg(incarnation || ' q' || queue || ' ' || first_offset || '..' || last_offset
  || ' missing ' || missing, '; '), '') FROM sync_gaps`).Scan(&gaps, &detail); err != nil {
		t.Fatal(err)
	}
	if gaps != 0 || m.Trimmed() != 0 {
		t.Errorf("sync_gaps rows %d (%s), shardis_sync_trimmed_unlanded_entries_total %v: want none, every entry the copy had trimmed was handled under %s (landed, or left out as a refused attempt's)",
			gaps, detail, m.Trimmed(), inc1)
	}
}
