package pgsync_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardis/shardis/pgsync"
)

// lockTries is a pgx tracer counting a node's queue-lock statements (one
// per landing transaction that has something to land).
type lockTries struct {
	key int32
	n   atomic.Int64
}

func (l *lockTries) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if strings.Contains(data.SQL, "pg_try_advisory_xact_lock($1, q)") && len(data.Args) > 0 && data.Args[0] == l.key {
		l.n.Add(1)
	}
	return ctx
}

func (l *lockTries) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// Another session holds every queue lock of n2 (a second instance hung
// mid-transaction, until PostgreSQL ends its session) while n2 has more
// entries than a batch: the worker reads a full batch, gets no lock,
// lands nothing. It must wait its poll interval before it tries again,
// as when nothing is new: a queue another session holds is skipped
// (doc.go, "Several instances"), not re-read at once. It read the full
// batch again at once (the batch "came back full"), on n2 and in
// PostgreSQL, as fast as they answered, for as long as the lock was held
// (up to idle_in_transaction_session_timeout): thousands of full redo-log
// reads a second against a node serving the inventory.
func TestReview2LockedFullBatchDoesNotSpin(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e.loadStock("one", "d", 100) // route "one" is node n2 only
	e.reserveN("o", "one", "d", 30, time.Minute)

	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, _, err := pgsync.Migrate(ctx, e.pool); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, q) FROM generate_series(0, $2 - 1) AS q",
		pgsync.LockKey("n2"), e.cfg.Inventory.RedoQueues); err != nil {
		t.Fatal(err)
	}

	tries := &lockTries{key: pgsync.LockKey("n2")}
	pc, err := pgxpool.ParseConfig(e.pgURL)
	if err != nil {
		t.Fatal(err)
	}
	pc.ConnConfig.Tracer = tries
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	const poll = 20 * time.Millisecond
	s := pgsync.New(e.inv, pool, pgsync.Settings{Batch: 10, PollInterval: poll, DecideWait: -1,
		RetryBackoff: 100 * time.Millisecond, Logger: quiet()})
	s.Start()
	defer s.Close()

	waitFor(t, 10*time.Second, "the first try of n2's locks", func() bool { return tries.n.Load() > 0 })
	const window = 2 * time.Second
	from := tries.n.Load()
	time.Sleep(window)
	got := tries.n.Load() - from
	if limit := int64(2 * window / poll); got > limit {
		t.Errorf("%d landing transactions of n2 in %v while another session held its queue locks, want at most %d (one per poll interval of %v, twice over)",
			got, window, limit, poll)
	}
	t.Logf("landing transactions of n2 in %v with its queues locked: %d", window, got)

	_ = tx.Rollback(ctx) // the holder lets go: everything lands
	var rows int
	waitFor(t, 10*time.Second, "n2's 30 parts landed", func() bool {
		return pool.QueryRow(ctx, "SELECT count(*) FROM stock_movements WHERE node = 'n2'").Scan(&rows) == nil && rows == 30
	})
}
