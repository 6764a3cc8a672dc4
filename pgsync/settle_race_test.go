package pgsync_test

import (
	"context"
	"testing"
	"time"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/pgsync"
)

// The settle pass reads a pending row, then its part's state on the node,
// then writes what it read. A landing that hands the row to a later
// incarnation in between (a node restored from its backup and accepted
// while the pass read the empty incarnation before it: held_by) must not
// be overwritten by what the pass read of the earlier one: the row would
// be lost for good (the settle pass reads pending rows only, the landing
// position is past the part), while the part is pending again on its
// node and is confirmed there. Here the pass's write is held back by a
// statement trigger (before it locks any row) while n2 is restored and
// accepted again and the part landed under the new incarnation.
func TestSettleDoesNotLoseARowHandedOutAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	e.loadStock("one", "d", 100)
	if _, err := e.inv.Reserve(ctx, "held", []inventory.Item{{Route: "one", SKU: "d", Quantity: 3}}, "", time.Hour); err != nil {
		t.Fatal(err)
	}
	m := pgsync.NewMetrics(nil)
	e.openSyncer(testLog(t), pgsync.Settings{Metrics: m, StepTimeout: 40 * time.Second})
	skus := [][2]string{{"one", "d"}}
	e.waitConsistent(15*time.Second, skus, nil)
	n2, _ := e.stack.Router.Node("n2")
	backup := e.snapshotN2(t, ctx)
	time.Sleep(1500 * time.Millisecond)

	// the settle pass's next write waits 15s before it touches a row
	for _, q := range []string{
		`CREATE TABLE test_pause (n int)`,
		`INSERT INTO test_pause VALUES (1)`,
		`CREATE FUNCTION test_pause_settle() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF current_query() LIKE 'UPDATE stock_movements m SET state = u.state%' AND EXISTS (SELECT 1 FROM test_pause) THEN
    DELETE FROM test_pause;
    PERFORM pg_sleep(15);
  END IF;
  RETURN NULL;
END $$`,
		`CREATE TRIGGER test_pause_settle BEFORE UPDATE ON stock_movements FOR EACH STATEMENT EXECUTE FUNCTION test_pause_settle()`,
	} {
		if _, err := e.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	paused := time.Now()
	e.restartN2(t, "") // restarts empty, accepted: the pass reads the part missing
	e.acceptWentBack(t, ctx, "n2 refused (empty)")
	time.Sleep(1500 * time.Millisecond)
	e.restartN2(t, backup) // restored from its backup, accepted again
	e.acceptWentBack(t, ctx, "n2 refused (restored backup)")
	inc3 := n2.Incarnation()
	waitFor(t, 15*time.Second, "the part landed under the restored incarnation", func() bool {
		var held string
		err := e.pool.QueryRow(ctx, `SELECT coalesce(held_by, '') FROM stock_movements WHERE order_id = 'held'`).Scan(&held)
		return err == nil && held == inc3
	})
	t.Logf("row held by %s %v after the pass's write was held back", inc3, time.Since(paused).Round(time.Millisecond))
	waitFor(t, 30*time.Second, "the settle pass's held-back write", func() bool {
		var n int
		_ = e.pool.QueryRow(ctx, `SELECT count(*) FROM test_pause`).Scan(&n)
		return n == 0 && time.Since(paused) > 16*time.Second
	})
	time.Sleep(time.Second)
	if _, err := e.inv.Confirm(ctx, "held"); err != nil {
		t.Fatalf("Confirm: %v", err)
	}
	var state, held string
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if err := e.pool.QueryRow(ctx, `SELECT state, coalesce(held_by, '') FROM stock_movements WHERE order_id = 'held'`).Scan(&state, &held); err == nil && state == "confirmed" {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("the reservation confirmed on n2 (incarnation %s, which holds the part) has its row %s (held_by %s), want confirmed; lost counted %v",
		inc3, state, held, m.Lost())
}
