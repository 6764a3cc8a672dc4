package pgsync_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardis/shardis/internal/pgtest"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/pgsync"
)

// Migrate creates the schema once, concurrently from several instances,
// and is a no-op after; CheckSchema refuses a database without it and one
// from a newer build.
func TestMigrate(t *testing.T) {
	t.Parallel()
	pg := newPG(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := pgsync.CheckSchema(ctx, pg); !errors.Is(err, pgsync.ErrSchema) {
		t.Fatalf("CheckSchema of an empty database: %v, want ErrSchema", err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); _, _, errs[i] = pgsync.Migrate(ctx, pg) }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("concurrent Migrate: %v", err)
		}
	}
	if err := pgsync.CheckSchema(ctx, pg); err != nil {
		t.Fatalf("CheckSchema after Migrate: %v", err)
	}
	from, to, err := pgsync.Migrate(ctx, pg)
	if err != nil || from != pgsync.SchemaVersion || to != pgsync.SchemaVersion {
		t.Fatalf("Migrate again: %d→%d %v, want a no-op at %d", from, to, err, pgsync.SchemaVersion)
	}
	if _, err := pg.Exec(ctx, "INSERT INTO shardis_sync_schema (version) VALUES ($1)", pgsync.SchemaVersion+1); err != nil {
		t.Fatal(err)
	}
	if err := pgsync.CheckSchema(ctx, pg); !errors.Is(err, pgsync.ErrSchema) {
		t.Errorf("CheckSchema of a newer schema: %v, want ErrSchema", err)
	}
	if _, _, err := pgsync.Migrate(ctx, pg); !errors.Is(err, pgsync.ErrSchema) {
		t.Errorf("Migrate of a newer schema: %v, want ErrSchema", err)
	}
}

// The sync lands every part once with its state, follows pending parts to
// their settled state, reports status and metrics, treats a replay as a
// no-op, and pauses a queue that went back under its position.
func TestSyncLandsAndSettles(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	skus := [][2]string{{"all", "a"}, {"all", "b"}, {"one", "c"}}
	for _, s := range skus {
		e.loadStock(s[0], s[1], 1000)
	}
	var pendingOrders []string
	for i := range 30 {
		id := fmt.Sprintf("o-%d", i)
		items := []inventory.Item{{Route: skus[i%3][0], SKU: skus[i%3][1], Quantity: int64(1 + i%4)}}
		if i%5 == 0 {
			items = append(items, inventory.Item{Route: "all", SKU: "b", Quantity: 2})
		}
		if i%3 == 1 {
			items[0].Quantity = 400 // split over nodes
		}
		if _, err := e.inv.Reserve(ctx, id, items, "", time.Minute); err != nil {
			if i%3 == 1 {
				continue // 400 × several may run short: a failed reserve lands cancelled parts
			}
			t.Fatalf("Reserve %s: %v", id, err)
		}
		var err error
		switch i % 3 {
		case 0:
			_, err = e.inv.Confirm(ctx, id)
		case 1:
			_, err = e.inv.Cancel(ctx, id)
		default:
			pendingOrders = append(pendingOrders, id)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	m := pgsync.NewMetrics(nil)
	st := e.syncer(m)
	e.waitConsistent(15*time.Second, skus, nil)
	var pending int
	if err := e.pool.QueryRow(ctx, "SELECT count(*) FROM stock_movements WHERE state = 'pending'").Scan(&pending); err != nil || pending == 0 {
		t.Fatalf("pending rows: %d %v, want some", pending, err)
	}
	for _, id := range pendingOrders {
		if _, err := e.inv.Confirm(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	e.waitConsistent(15*time.Second, skus, nil)
	var rows, nulls int
	if err := e.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE settled_at IS NULL OR reserved_at IS NULL
  OR state NOT IN ('confirmed', 'cancelled')) FROM stock_movements`).Scan(&rows, &nulls); err != nil {
		t.Fatal(err)
	}
	if nulls != 0 {
		t.Errorf("%d of %d rows lack a settled state or a time", nulls, rows)
	}
	if got := m.Landed(); int(got) != rows {
		t.Errorf("landed metric %v, rows %d", got, rows)
	}
	if got := m.Settled(); got == 0 {
		t.Error("no settle was counted")
	}

	status, err := pgsync.Status(ctx, e.inv, e.pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range status {
		if ns.Err != "" || ns.Lag != 0 || ns.Pending != 0 || len(ns.Incarnations) != 1 || ns.Incarnations[0].Incarnation != ns.Incarnation {
			t.Errorf("status %+v: want no error, lag 0, pending 0, one incarnation (the current)", ns)
		}
		for _, q := range ns.Queues {
			if q.Head != q.Landed || q.Acked > q.Head {
				t.Errorf("node %s queue %+v", ns.Node, q)
			}
		}
	}

	// A replay is a no-op: positions set back to 0 land everything still
	// in the redo logs again, and nothing changes; entries trimmed in the
	// meantime are passed over, and since they have rows they are not
	// reported as lost.
	waitFor(t, 10*time.Second, "every landed entry to be acknowledged", func() bool {
		for _, name := range e.names {
			fields, _ := e.raw[name].HGetAll(ctx, inventory.RedoOffsetsKey).Result()
			heads, _ := inventory.RedoHeads(name, fields)
			acked, _ := e.raw[name].HGetAll(ctx, "inv:redo:acked").Result()
			for k, h := range heads {
				if acked[k] != strconv.FormatInt(h, 10) {
					return false
				}
			}
		}
		return true
	})
	// Every entry is settled and acknowledged now: this trim and the
	// reconciler's periodic one (TrimEvery) together empty the redo logs.
	for _, name := range e.names {
		if _, err := e.inv.TrimRedoLog(ctx, name, 0, 1000); err != nil {
			t.Fatal(err)
		}
		if left, err := e.inv.RedoLogLen(ctx, name); err != nil || left != 0 {
			t.Fatalf("node %s: %d redo entries left after trimming (err %v), want 0: every entry is settled and acknowledged", name, left, err)
		}
	}
	if rows == 0 {
		t.Fatal("no row landed")
	}
	st.Close()
	if _, err := e.pool.Exec(ctx, "UPDATE sync_positions SET redo_offset = 0, part_id = ''"); err != nil {
		t.Fatal(err)
	}
	var before int
	_ = e.pool.QueryRow(ctx, "SELECT count(*) FROM stock_movements").Scan(&before)
	m2 := pgsync.NewMetrics(nil)
	st2 := e.syncer(m2)
	e.waitConsistent(15*time.Second, skus, nil)
	var after int
	_ = e.pool.QueryRow(ctx, "SELECT count(*) FROM stock_movements").Scan(&after)
	if after != before || m2.Trimmed() != 0 {
		t.Errorf("replay: %d rows before, %d after; %v entries reported trimmed unlanded (they were landed)", before, after, m2.Trimmed())
	}

	// A database restored from an older backup: n1's rows and positions
	// are gone, and so are its entries (trimmed). Each is reported as lost
	// to the database, and the positions move on.
	st2.Close()
	tag, err := e.pool.Exec(ctx, "DELETE FROM stock_movements WHERE node = 'n1'")
	if err != nil || tag.RowsAffected() == 0 {
		t.Fatalf("deleting n1's rows: %v %v", tag, err)
	}
	if _, err := e.pool.Exec(ctx, "DELETE FROM sync_positions WHERE node = 'n1'"); err != nil {
		t.Fatal(err)
	}
	m2 = pgsync.NewMetrics(nil)
	e.syncer(m2)
	waitFor(t, 10*time.Second, "the lost entries to be reported", func() bool { return m2.Trimmed() == float64(tag.RowsAffected()) })
	if status, err := pgsync.Status(ctx, e.inv, e.pool); err != nil {
		t.Fatal(err)
	} else {
		for _, ns := range status {
			if ns.Lag != 0 {
				t.Errorf("after passing over trimmed entries, node %s lags %d", ns.Node, ns.Lag)
			}
		}
	}

	// A queue whose head went back under the position is paused and
	// reported, and resumes when it is back.
	ctxR, cancelR := context.WithTimeout(ctx, 10*time.Second)
	defer cancelR()
	key := inventory.RedoLogKey(queueOf(t, e, "n1"))
	head, _ := e.raw["n1"].HGet(ctxR, "inv:redo:offsets", key).Int64()
	e.raw["n1"].HSet(ctxR, "inv:redo:offsets", key, head-1)
	waitFor(t, 5*time.Second, "the rewound queue to be reported", func() bool { return m2.Rewound("n1") == 1 })
	e.raw["n1"].HSet(ctxR, "inv:redo:offsets", key, head)
	waitFor(t, 5*time.Second, "the queue to resume", func() bool { return m2.Rewound("n1") == 0 })
}

// queueOf returns a queue of node with entries.
func queueOf(t *testing.T, e *env, node string) int {
	t.Helper()
	heads, err := e.raw[node].HGetAll(context.Background(), "inv:redo:offsets").Result()
	if err != nil {
		t.Fatal(err)
	}
	for q := range e.cfg.Inventory.RedoQueues {
		if heads[inventory.RedoLogKey(q)] != "" && heads[inventory.RedoLogKey(q)] != "0" {
			return q
		}
	}
	t.Fatalf("node %s has no redo entries", node)
	return 0
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// newPG starts PostgreSQL and returns a pool on its database.
func newPG(t *testing.T) *pgxpool.Pool {
	t.Helper()
	srv := pgtest.Start(t, "")
	pool, err := pgxpool.New(context.Background(), srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
