package pgsync_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shardis/shardis/internal/stack"
	"github.com/shardis/shardis/pgsync"
)

// A hung instance that holds a queue's advisory lock mid-transaction (a
// session of a sync opened like any other, stopped between two
// statements) does not stall the queue for ever: PostgreSQL ends its
// session after Settings.IdleInTransactionTimeout, the running instance
// lands the queue then, and the skip is logged meanwhile (once, not per
// poll) along with the release.
func TestSyncHungLockHolder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	skus := [][2]string{{"one", "d"}}
	e.loadStock("one", "d", 100) // route "one" is node n2 only
	set := pgsync.Settings{IdleInTransactionTimeout: 3 * time.Second}

	// The hung instance: its pool is the sync's own (Open sets its
	// sessions up); it locks every queue of n2 and stops. Then n2 gets
	// entries to land.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hung, err := stack.OpenSync(ctx, e.cfg, stack.SyncOptions{Logger: quiet(), Migrate: true, Settings: set})
	if err != nil {
		t.Fatal(err)
	}
	defer hung.Close()
	var logs logBuf
	e.openSyncer(logs.logger(), set)
	tx, err := hung.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	// taken before the statement is sent: PostgreSQL's idle timer starts
	// once the statement is done, after this but before its reply reaches
	// the test (a clock read after the reply was 2 ms late for the bound
	// below on a loaded machine)
	locked := time.Now()
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, q) FROM generate_series(0, $2 - 1) AS q",
		pgsync.LockKey("n2"), e.cfg.Inventory.RedoQueues); err != nil {
		t.Fatal(err)
	}

	e.reserveN("o", "one", "d", 5, time.Minute)
	waitFor(t, 5*time.Second, "the skipped queue to be logged", func() bool { return len(logs.lines("queue skipped")) > 0 })
	e.waitConsistent(8*time.Second, skus, nil)
	t.Logf("n2 landed %v after its queues were locked", time.Since(locked).Round(time.Millisecond))
	if time.Since(locked) < set.IdleInTransactionTimeout {
		t.Errorf("landed %v after the lock was taken, before the hung session could be ended (%v)",
			time.Since(locked), set.IdleInTransactionTimeout)
	}
	if _, err := tx.Exec(ctx, "SELECT 1"); err == nil {
		t.Error("the hung session is still alive")
	}
	skipped := map[string]int{}
	for _, l := range logs.lines("queue skipped") {
		skipped[fmt.Sprint(l["node"], " queue ", l["queue"])]++
	}
	freed := map[string]int{}
	for _, l := range logs.lines("queue lock free again") {
		freed[fmt.Sprint(l["node"], " queue ", l["queue"])]++
	}
	for q, n := range skipped {
		if n != 1 || freed[q] != 1 {
			t.Errorf("%s: %d skip lines (want 1 for a hold of a few seconds: rate-limited), %d release lines (want 1)", q, n, freed[q])
		}
	}
	if t.Failed() {
		t.Logf("log:\n%s", logs.String())
	}
}
