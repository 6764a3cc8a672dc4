package pgsync_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/shardis/shardis/internal/stack"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/pgsync"
)

// holdLandings makes every landing's insert into stock_movements wait,
// after the landing read its parts on the node, while test_hold has a
// row; release lets them go. A held landing stays in its step (its
// transaction open, its rows not visible).
func (e *env) holdLandings(ctx context.Context) (release func()) {
	e.t.Helper()
	for _, q := range []string{
		`CREATE TABLE IF NOT EXISTS test_hold (n int)`,
		`CREATE OR REPLACE FUNCTION test_hold_landing() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  until timestamptz := clock_timestamp() + interval '30 seconds';
BEGIN
  WHILE EXISTS (SELECT 1 FROM test_hold) AND clock_timestamp() < until LOOP
    PERFORM pg_sleep(0.02);
  END LOOP;
  RETURN NULL;
END $$`,
		`DROP TRIGGER IF EXISTS test_hold_landing ON stock_movements`,
		`CREATE TRIGGER test_hold_landing BEFORE INSERT ON stock_movements FOR EACH STATEMENT EXECUTE FUNCTION test_hold_landing()`,
		`INSERT INTO test_hold VALUES (1)`,
	} {
		if _, err := e.pool.Exec(ctx, q); err != nil {
			e.t.Fatal(err)
		}
	}
	return func() {
		if _, err := e.pool.Exec(ctx, `DELETE FROM test_hold`); err != nil {
			e.t.Fatal(err)
		}
	}
}

// rowState returns the state of order's row ("" when it has none).
func (e *env) rowState(ctx context.Context, order string) string {
	var st string
	_ = e.pool.QueryRow(ctx, `SELECT state FROM stock_movements WHERE order_id = $1`, order).Scan(&st)
	return st
}

// lateLanding reserves order, whose landing is held in its insert after it
// read the part pending; confirms it on its node, then witness (landed
// pending before); waits for witness's row to be confirmed, by which
// time the settle loop read order's entry in the node's settled log (it
// comes first) and found no row for it; then lets the landing commit the
// row pending.
func (e *env) lateLanding(ctx context.Context, order, witness string) {
	t := e.t
	t.Helper()
	item := []inventory.Item{{Route: "one", SKU: "c", Quantity: 1}}
	if _, err := e.inv.Reserve(ctx, witness, item, "", time.Minute); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, witness+" landed pending", func() bool { return e.rowState(ctx, witness) == "pending" })
	release := e.holdLandings(ctx)
	if _, err := e.inv.Reserve(ctx, order, item, "", time.Minute); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the landing held in its insert", func() bool {
		var n int
		_ = e.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'INSERT INTO stock_movements%' AND wait_event = 'PgSleep'`).Scan(&n)
		return n > 0
	})
	for _, id := range []string{order, witness} {
		if _, err := e.inv.Confirm(ctx, id); err != nil {
			t.Fatalf("Confirm %s: %v", id, err)
		}
	}
	waitFor(t, 10*time.Second, witness+"'s row confirmed by the settled log", func() bool { return e.rowState(ctx, witness) == "confirmed" })
	if got := e.rowState(ctx, order); got != "" {
		t.Fatalf("%s has a row (%s) while its landing is held", order, got)
	}
	release()
	waitFor(t, 10*time.Second, order+" landed pending (read before it was confirmed)", func() bool { return e.rowState(ctx, order) != "" })
}

// A landing that read a part pending before the part settled commits its
// row after the follow step that read the part's entry found no row for
// it (doc.go, "Settled states"): the second look, a step timeout plus a
// second after that step, writes the row's state, with walks an hour
// apart. And a sync that stops between the follow step and the second
// look (a crash: its parts for a second look are in memory only) leaves
// the row to the next instance, whose walk at start writes it.
func TestSettledLogSecondLook(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	e.cfg.Sync.SettleWalkInterval = time.Hour
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e.loadStock("one", "c", 100)
	open := func(step time.Duration) (*stack.Sync, *pgsync.Metrics, func()) {
		m := pgsync.NewMetrics(nil)
		octx, ocancel := context.WithTimeout(ctx, 20*time.Second)
		defer ocancel()
		st, err := stack.OpenSync(octx, e.cfg, stack.SyncOptions{Logger: testLog(t), Migrate: true,
			Settings: pgsync.Settings{Metrics: m, StepTimeout: step}})
		if err != nil {
			t.Fatal(err)
		}
		st.Syncer.Start()
		closeOnce := sync.OnceFunc(st.Close)
		t.Cleanup(closeOnce)
		waitFor(t, 10*time.Second, "a walk per node at start", func() bool { return m.Walks() >= 3 })
		return st, m, closeOnce
	}

	const step = 3 * time.Second // the second look comes 4 s after the step
	_, m, stop := open(step)
	walks := m.Walks()
	e.lateLanding(ctx, "look-1", "witness-1")
	landed := time.Now()
	waitFor(t, step+6*time.Second, "look-1's row confirmed by its second look", func() bool { return e.rowState(ctx, "look-1") == "confirmed" })
	t.Logf("look-1 confirmed %v after its late landing", time.Since(landed).Round(time.Millisecond))
	if got := m.Walks(); got != walks {
		t.Fatalf("%v walks meanwhile, want none (the second look writes the row)", got-walks)
	}

	// The crash point: the instance stops after the follow step, before
	// the second look (with a step timeout of 10 s, 11 s after it).
	stop()
	_, _, stop = open(10 * time.Second)
	e.lateLanding(ctx, "look-2", "witness-2")
	stop()
	if got := e.rowState(ctx, "look-2"); got != "pending" {
		t.Fatalf("look-2's row is %q when the first instance stopped, want pending", got)
	}
	open(step) // its walk at start writes the row
	if got := e.rowState(ctx, "look-2"); got != "confirmed" {
		t.Fatalf("look-2's row is %q after the next instance's walk at start, want confirmed", got)
	}
}
