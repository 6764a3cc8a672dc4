package pgsync_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/pgsync"
)

// failAcks is an inventory.Faults that, while on, fails every redo-log
// acknowledgement to node before it is sent: what a node unreachable just
// then, after the landing committed, does.
type failAcks struct {
	node string
	on   atomic.Bool
	cut  atomic.Int64 // acknowledgements failed
}

var errAckCut = fmt.Errorf("acknowledgement cut (test): %w", inventory.ErrCrashed)

func (f *failAcks) Call(_ context.Context, c inventory.ScriptCall, send func() (any, error)) (any, error) {
	if f.on.Load() && c.Node == f.node && c.Script == "redo-ack-batch" {
		f.cut.Add(1)
		return nil, errAckCut
	}
	return send()
}

func (f *failAcks) Crash(context.Context, string) bool { return false }

// startFaultedSync migrates e's database and starts a sync over an
// inventory of e's router whose script calls go through faults, polling
// every 20 ms, deciding at once, retrying after 100 ms; the sync closes
// when the test ends. It returns the sync's metrics.
func (e *env) startFaultedSync(ctx context.Context, faults inventory.Faults) *pgsync.Metrics {
	e.t.Helper()
	inv, err := inventory.New(e.stack.Router, inventory.Options{Logger: quiet(), Faults: faults})
	if err != nil {
		e.t.Fatal(err)
	}
	if _, _, err := pgsync.Migrate(ctx, e.pool); err != nil {
		e.t.Fatal(err)
	}
	m := pgsync.NewMetrics(nil)
	s := pgsync.New(inv, e.pool, pgsync.Settings{PollInterval: 20 * time.Millisecond, DecideWait: -1,
		RetryBackoff: 100 * time.Millisecond, Logger: testLog(e.t), Metrics: m})
	s.Start()
	e.t.Cleanup(s.Close)
	return m
}

// ackedAtHeads reports whether node's redo log is acknowledged up to the
// head of every queue.
func (e *env) ackedAtHeads(ctx context.Context, node string) bool {
	fields, _ := e.raw[node].HGetAll(ctx, inventory.RedoOffsetsKey).Result()
	heads, _ := inventory.RedoHeads(node, fields)
	acked, _ := e.raw[node].HGetAll(ctx, "inv:redo:acked").Result()
	for k, h := range heads {
		if acked[k] != strconv.FormatInt(h, 10) {
			return false
		}
	}
	return len(heads) > 0
}

// position is a sync_positions row.
type position struct {
	inc, part string
	queue     int32
	off       int64
}

// restorePositions sets node's committed positions back to saved and
// deletes its rows but those of keep, in one transaction: the database as
// a restore from a backup taken when saved was read leaves it (or an
// asynchronous replica promoted that far behind).
func (e *env) restorePositions(ctx context.Context, node string, saved []position, keep []string) error {
	return pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "DELETE FROM sync_positions WHERE node = $1", node); err != nil {
			return err
		}
		for _, p := range saved {
			if _, err := tx.Exec(ctx, `INSERT INTO sync_positions (node, incarnation, queue, redo_offset, part_id)
VALUES ($1, $2, $3, $4, $5)`, node, p.inc, p.queue, p.off, p.part); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, "DELETE FROM stock_movements WHERE node = $1 AND NOT part_id = ANY($2::text[])", node, keep)
		return err
	})
}

// An acknowledgement that failed after its commit is owed; the database
// then goes back under that commit (restored from a backup, an
// asynchronous replica promoted). The owed acknowledgement must not be
// paid: the node would trim entries the database does not hold, which
// were still in Redis and could have landed again. It is dropped, and
// the entries land again, with no gap. Before, the worker paid it as soon
// as the node answered, and the entries never came back (or, once read
// again from the database's position, were a gap).
//
// The acknowledgements keep failing until b has landed again: a worker
// step that read the positions just before the restore and sent its
// acknowledgement just after it cannot tell (no step can, any more than
// a first acknowledgement sent as the database goes back), and letting
// the node answer at once made the test depend on where that step was
// (a CI run under load: 5 rows, the owed acknowledgement paid).
func TestOwedAckNotPaidPastADatabaseThatWentBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e.loadStock("one", "d", 100) // route "one" is node n2 only
	faults := &failAcks{node: "n2"}
	m := e.startFaultedSync(ctx, faults)

	e.reserveN("a", "one", "d", 5, time.Hour)
	waitFor(t, 15*time.Second, "a's 5 parts landed and acknowledged", func() bool {
		return e.rowCount(ctx, "n2") == 5 && e.ackedAtHeads(ctx, "n2")
	})
	rows, _ := e.pool.Query(ctx, "SELECT incarnation, part_id, queue, redo_offset FROM sync_positions WHERE node = 'n2'")
	saved, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (position, error) {
		var p position
		return p, r.Scan(&p.inc, &p.part, &p.queue, &p.off)
	})
	if err != nil {
		t.Fatal(err)
	}
	var keep []string
	if err := e.pool.QueryRow(ctx, "SELECT array_agg(part_id) FROM stock_movements WHERE node = 'n2'").Scan(&keep); err != nil {
		t.Fatal(err)
	}

	faults.on.Store(true) // b lands, its acknowledgement fails: owed
	e.reserveN("b", "one", "d", 10, time.Hour)
	waitFor(t, 15*time.Second, "b's 10 parts landed and an acknowledgement of them failed", func() bool {
		return e.rowCount(ctx, "n2") == 15 && faults.cut.Load() > 0
	})
	if e.ackedAtHeads(ctx, "n2") {
		t.Fatal("b's entries acknowledged with the acknowledgements failing: the test needs them owed")
	}
	if err := e.restorePositions(ctx, "n2", saved, keep); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) && e.rowCount(ctx, "n2") != 15 {
		time.Sleep(50 * time.Millisecond)
	}
	faults.on.Store(false) // the node answers again
	for time.Now().Before(deadline) && (e.rowCount(ctx, "n2") != 15 || !e.ackedAtHeads(ctx, "n2")) {
		time.Sleep(50 * time.Millisecond)
	}
	var gaps int
	if err := e.pool.QueryRow(ctx, "SELECT count(*) FROM sync_gaps").Scan(&gaps); err != nil {
		t.Fatal(err)
	}
	if n := e.rowCount(ctx, "n2"); n != 15 || gaps != 0 || m.Trimmed() != 0 {
		t.Errorf("after the database went back under an owed acknowledgement: %d rows of n2 (want 15: b's landed again), "+
			"%d sync_gaps rows and %v entries trimmed unlanded (want none: they were in Redis until acknowledged)", n, gaps, m.Trimmed())
	}
	if !e.ackedAtHeads(ctx, "n2") {
		t.Error("n2 not acknowledged up to its heads once b landed again")
	}
}

// rowCount is the number of stock_movements rows of node (-1 on error).
func (e *env) rowCount(ctx context.Context, node string) int {
	var n int
	if err := e.pool.QueryRow(ctx, "SELECT count(*) FROM stock_movements WHERE node = $1", node).Scan(&n); err != nil {
		if !errors.Is(err, context.Canceled) {
			e.t.Log(err)
		}
		return -1
	}
	return n
}
