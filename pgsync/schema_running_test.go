package pgsync_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/pgsync"
)

// newerSchema migrates the database one version past this build, as a
// newer build's `shardis sync migrate` would (its migration's changes
// aside): in one transaction under the migration lock, which waits for
// the landing and settle steps under way (each holds it shared). Without
// the lock a step that had read the old version before the bump could
// still write after it, which no real migration allows.
func (e *env) newerSchema(ctx context.Context) {
	e.t.Helper()
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }() // after Commit a no-op
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", pgsync.MigrateLock); err != nil {
		e.t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO shardis_sync_schema (version) VALUES ($1)", pgsync.SchemaVersion+1); err != nil {
		e.t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		e.t.Fatal(err)
	}
}

// stoppedForSchema fails the test unless the syncer logged that it
// stopped for the schema, naming both versions, and its health is down.
func stoppedForSchema(t *testing.T, logs *logBuf, st *pgsync.Syncer) {
	t.Helper()
	newer, ours := fmt.Sprintf("schema version %d", pgsync.SchemaVersion+1), fmt.Sprintf("version %d", pgsync.SchemaVersion)
	found := false
	for _, l := range logs.lines("") {
		err := fmt.Sprint(l["err"])
		found = found || (l["level"] == "ERROR" && strings.Contains(err, newer) && strings.Contains(err, ours))
	}
	if !found {
		t.Errorf("no error logged that names the database's schema version %d and this build's %d", pgsync.SchemaVersion+1, pgsync.SchemaVersion)
	}
	if st.DatabaseUp() {
		t.Error("DatabaseUp (/healthz) true after the sync stopped for the schema")
	}
	select {
	case <-st.Halted():
		if !errors.Is(st.Err(), pgsync.ErrSchema) {
			t.Errorf("Err %v after the sync stopped for the schema, want ErrSchema", st.Err())
		}
	default:
		t.Error("Halted not closed after the sync stopped for the schema (shardis sync exits on it)")
	}
}

// README: `shardis sync` "refuses to run against another version" of its
// schema. A running sync checked it only at start: after the database was
// migrated to a newer version (a newer build's migrate, while the old
// instance still ran), the old instance went on landing and settling rows
// into it. The landing and the settle transactions read the version under
// the transaction; at another version the syncer stops, with an error
// naming both versions.
func TestRunningSyncStopsAtANewerSchema(t *testing.T) {
	t.Parallel()
	t.Run("landing", func(t *testing.T) {
		e := newEnv(t, false)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		e.loadStock("one", "d", 100)
		e.reserveN("a", "one", "d", 3, time.Hour)
		logs := &logBuf{}
		// no walks: only the landing reads the database after the bump
		st := e.openSyncer(logs.logger(), pgsync.Settings{SettleWalkInterval: time.Hour})
		waitFor(t, 15*time.Second, "a's 3 parts landed", func() bool { return e.rowCount(ctx, "n2") == 3 })
		e.newerSchema(ctx)
		e.reserveN("b", "one", "d", 3, time.Hour)
		time.Sleep(2 * time.Second) // many poll intervals
		if n := e.rowCount(ctx, "n2"); n != 3 {
			t.Errorf("%d rows of n2, want 3: b's parts landed into a database at schema version %d by a sync that writes %d",
				n, pgsync.SchemaVersion+1, pgsync.SchemaVersion)
		}
		stoppedForSchema(t, logs, st.Syncer)
	})
	t.Run("settle", func(t *testing.T) {
		e := newEnv(t, false)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		e.loadStock("one", "d", 100)
		e.reserveN("a", "one", "d", 3, time.Hour)
		logs := &logBuf{}
		st := e.openSyncer(logs.logger(), pgsync.Settings{})
		waitFor(t, 15*time.Second, "a's 3 parts landed", func() bool { return e.rowCount(ctx, "n2") == 3 })
		e.newerSchema(ctx)
		if _, err := e.inv.Confirm(ctx, "a-0"); err != nil { // settles; nothing new to land
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second) // many settle intervals and walks
		if s := e.rowState(ctx, "a-0"); s != "pending" {
			t.Errorf("a-0's row %s, want pending: settled in a database at schema version %d by a sync that writes %d",
				s, pgsync.SchemaVersion+1, pgsync.SchemaVersion)
		}
		stoppedForSchema(t, logs, st.Syncer)
	})
}
