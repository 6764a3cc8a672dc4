package pgsync_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shardis/shardis/internal/stack"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/pgsync"
)

// TestFewerRedoQueuesStillLandEveryQueue checks that lowering
// inventory.redo_queues loses nothing: entries written with 8 queues, then
// a sync and a service configured with 4, which reserves more of the same
// SKUs (their new parts in queues 0..3, the old ones in 4..7) and settles
// some of the old orders. Every part of every node lands as one row in
// its node's state, whichever queue lands first, every entry is
// acknowledged, and Status reports no lag and shows the queues past 4.
// Found by a review: the sync read queues 0..redo_queues-1 only, so the
// parts of queues 4..7 never landed nor were acknowledged, and Status
// reported lag 0 and no error: the loss was silent.
func TestFewerRedoQueuesStillLandEveryQueue(t *testing.T) {
	t.Parallel() // its own nodes and database

	e := newEnv(t, false) // redo_queues 8
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e.reserveSpread(ctx, 8)

	cfg := *e.cfg
	cfg.Inventory.RedoQueues = 4 // the deployment now runs with 4 queues
	octx, ocancel := context.WithTimeout(ctx, 20*time.Second)
	st, err := stack.OpenSync(octx, &cfg, stack.SyncOptions{Logger: testLog(t), Migrate: true,
		Settings: pgsync.Settings{DecideWait: -1, PollInterval: 20 * time.Millisecond}})
	ocancel()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	st.Syncer.Start()
	four := st.Inventory // the service at 4 queues, on the same nodes
	for i := range 8 {
		items := []inventory.Item{{Route: "all", SKU: fmt.Sprintf("k%d", i), Quantity: 1}}
		if _, err := four.Reserve(ctx, fmt.Sprintf("p-%d", i), items, "", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 { // old orders (parts in any of the 8 queues) settled by the new service
		settle := four.Confirm
		if i%2 == 1 {
			settle = four.Cancel
		}
		if _, err := settle(ctx, fmt.Sprintf("o-%d", i)); err != nil {
			t.Fatal(err)
		}
	}

	oldQueues := 0
	mismatch := func() string {
		oldQueues = 0
		for _, n := range e.names {
			parts, err := e.nodeParts(ctx, n)
			if err != nil {
				return err.Error()
			}
			rows, err := e.dbRows(ctx, n)
			if err != nil {
				return err.Error()
			}
			if len(rows) != len(parts) {
				return fmt.Sprintf("node %s: %d rows of %d parts", n, len(rows), len(parts))
			}
			for id, p := range parts {
				r, ok := rows[id]
				if !ok || r.state != p.state {
					return fmt.Sprintf("node %s part %s (%s): row %+v, want state %s", n, id, p.queue, r, p.state)
				}
				if r.queue >= 4 {
					oldQueues++
				}
			}
			if u, err := e.inv.RedoUnacked(ctx, n); err != nil || u != 0 {
				return fmt.Sprintf("node %s: %d entries not acknowledged (%v)", n, u, err)
			}
		}
		return ""
	}
	deadline := time.Now().Add(30 * time.Second)
	for mismatch() != "" && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if m := mismatch(); m != "" {
		t.Fatalf("not every part landed in its state and acknowledged: %s", m)
	}
	if oldQueues == 0 {
		t.Fatal("no row of queues 4..7: the test wrote none there")
	}
	status, err := pgsync.Status(ctx, four, e.pool)
	if err != nil {
		t.Fatal(err)
	}
	shown := 0
	for _, ns := range status {
		if ns.Err != "" || ns.Lag != 0 {
			t.Errorf("status of %s: lag %d, error %q; want 0 and none", ns.Node, ns.Lag, ns.Err)
		}
		for _, q := range ns.Queues {
			if q.Queue >= 4 {
				shown++
				if q.Landed != q.Head || q.Head == 0 {
					t.Errorf("status of %s queue %d: head %d landed %d; want landed to its head", ns.Node, q.Queue, q.Head, q.Landed)
				}
			}
		}
	}
	if shown == 0 {
		t.Errorf("Status with redo_queues 4 shows no queue past 3: %+v", status)
	}
}
