package pgsync_test

import (
	"context"
	"testing"
	"time"

	"github.com/shardis/shardis/inventory"
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
	t.Parallel()
	e := newEnv(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	o := e.refusedThenReserved(t, ctx, "s")
	// the leftover: the failed record, byte for byte, on a non-home node
	if err := e.raw[o.other].RestoreReplace(ctx, inventory.OrderKey(o.order), 0, o.dump).Err(); err != nil {
		t.Fatal(err)
	}
	e.landsWithHomeDown(t, ctx, o, "the leftover")
}
