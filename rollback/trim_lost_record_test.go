package rollback_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/rollback"
)

// A pending part whose record is lost (its node lost acknowledged writes,
// or it was deleted; here: the order record that holds a one-node order's
// part inline) while its redo-log entry, its pending-index member
// ("queue:offset") and its 3 reserved units stay, trimmed by a
// reconciler with TrimAge before the part comes due: the trim keeps its
// entry, so once due the part is set aside and listed stuck, its units
// reserved and reported. The trim read the missing record as a part
// settled long ago and removed the entry; the pending-index member then
// named no part, and the expiry dropped it as a stale place: the part in
// no index, its 3 units reserved for good, nothing reported. Set aside
// (the stuck index holds it by id), its entry stays all the same: once
// its record is repaired, a retry puts the part back under its place
// (inventory.TestTrimKeepsTheEntryOfAPartWhoseRecordIsLostWhileListed).
func TestTrimKeepsTheEntryOfAPendingPartWhoseRecordIsLost(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	inv, srv := oneNodeInv(t, ctx)
	c := srv.Client(t)
	if _, err := inv.LoadStock(ctx, "r", "tee", 10, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := inv.Reserve(ctx, "o-1", []inventory.Item{{Route: "r", SKU: "tee", Quantity: 3}}, "", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := c.Del(ctx, "inv:order:o-1").Err(); err != nil { // the record lost
		t.Fatal(err)
	}
	rec := rollback.New(inv, nil, rollback.Settings{TrimEvery: 1, TrimAge: time.Millisecond,
		StuckRetry: time.Hour, StuckRetryMax: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	defer rec.Close()
	time.Sleep(5 * time.Millisecond) // the entry older than TrimAge
	rec.RunOnce(ctx)                 // not due for 3s: only the trim touches the part
	if n, err := inv.RedoLogLen(ctx, "n1"); err != nil || n != 1 {
		t.Errorf("after a trim before the part is due: %d redo-log entries (%v), want its entry kept", n, err)
	}
	time.Sleep(3500 * time.Millisecond) // the deadline, and the part's grace past it
	for range 2 {
		rec.RunOnce(ctx)
	}
	lvl, err := inv.GetStock(ctx, "r", "tee")
	if err != nil {
		t.Fatal(err)
	}
	stuck, err := inv.StuckParts(ctx, "n1", 10)
	if err != nil {
		t.Fatal(err)
	}
	if lvl.Reserved != 3 || len(stuck) != 1 || !strings.HasPrefix(stuck[0].PartID, "o-1|") {
		t.Fatalf("after the part's deadline: %d units reserved, stuck %+v; want its 3 units reserved and the part listed stuck "+
			"(pending index %v, stats %+v)", lvl.Reserved, stuck, c.ZRange(ctx, inventory.PendingKey, 0, -1).Val(), rec.Stats())
	}
	if n, err := inv.RedoLogLen(ctx, "n1"); err != nil || n != 1 {
		t.Errorf("after the part was set aside: %d redo-log entries (%v), want its entry kept", n, err)
	}
}
