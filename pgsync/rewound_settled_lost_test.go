package pgsync_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/inventory"
)

// A part whose record was lost before the sync read its entry stops its
// queue; set aside, it is settled by the operator (SettleStuckLost), and
// the sync lands it as its queue's last entry, but the acknowledgement
// fails (the node unreachable just then) and inventory.redo_max_age
// trims the entry meanwhile: a record SettleStuckLost writes names no
// place and no take time, so the max age (an hour here) trims it at once.
// The node never went back: once the acknowledgement goes through, the
// queue goes on, acknowledged, never paused. Before, the acknowledgement
// was refused (ErrRewound: the position's entry gone unacknowledged, the
// part's record naming no place) and the queue paused as REDO LOG WENT
// BACK until the node was accepted.
func TestSettledLostPositionTrimmedBeforeItsAckIsNoRewind(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e.loadStock("one", "d", 100) // route "one" is node n2 only
	res, err := e.inv.Reserve(ctx, "o-lost", []inventory.Item{{Route: "one", SKU: "d", Quantity: 1}}, "", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r := res.Receipts[0]
	q, err := strconv.Atoi(strings.TrimPrefix(r.RedoLog, "inv:redo:"))
	if err != nil {
		t.Fatal(err)
	}
	en, err := e.inv.ReadRedoLog(ctx, "n2", q, r.Offset-1, 1)
	if err != nil || len(en) != 1 {
		t.Fatal(en, err)
	}
	id := en[0].PartID
	// its record lost (and its order's, which may hold it inline) before
	// the sync reads it
	if err := e.raw["n2"].Del(ctx, inventory.PartKey(id), inventory.OrderKey("o-lost")).Err(); err != nil {
		t.Fatal(err)
	}
	faults := &failAcks{node: "n2"}
	m := e.startFaultedSync(ctx, faults)
	waitFor(t, 20*time.Second, "the queue stopped at the lost record", func() bool { return m.UnreadableQueues("n2") >= 1 })
	waitFor(t, 30*time.Second, "part "+id+" set aside", func() bool {
		stuck, err := e.inv.StuckParts(ctx, "n2", 100)
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(stuck, func(s inventory.StuckPart) bool { return s.PartID == id })
	})

	faults.on.Store(true) // the landing's acknowledgement fails: owed
	if res, err := e.inv.SettleStuckLost(ctx, "n2", id, inventory.Confirm,
		inventory.StuckUnits{Route: "one", SKU: "d", Quantity: 1}); err != nil || res != "done" {
		t.Fatalf("SettleStuckLost = %q, %v; want done", res, err)
	}
	waitFor(t, 20*time.Second, "the part landed confirmed and its acknowledgement failed", func() bool {
		return e.partRowState(ctx, "n2", id) == "confirmed" && faults.cut.Load() > 0
	})
	if n, err := e.inv.TrimRedoLog(ctx, "n2", time.Hour, 1000); err != nil || n < 1 {
		t.Fatalf("TrimRedoLog by a max age of an hour = %d, %v; want the settled entry removed", n, err)
	}
	faults.on.Store(false) // the node answers again

	waitFor(t, 20*time.Second, "n2 acknowledged up to its heads, or its queue paused", func() bool {
		return e.ackedAtHeads(ctx, "n2") || m.Rewound("n2") > 0
	})
	if m.Rewound("n2") > 0 || !e.ackedAtHeads(ctx, "n2") {
		t.Errorf("after the owed acknowledgement went through: %v queues of n2 paused as gone back, acknowledged at the heads %v; "+
			"want none paused, acknowledged (n2 never went back)", m.Rewound("n2"), e.ackedAtHeads(ctx, "n2"))
	}
}
