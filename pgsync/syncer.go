package pgsync

import (
	"context"
	"hash/fnv"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/inventory"
)

// Settings configures a [Syncer]. Zero fields take the defaults of the
// configuration's sync section.
type Settings struct {
	// Batch is the most redo-log entries one node's transaction lands,
	// at most 10000 (inventory.ReadRedoBatch's limit): a larger value
	// lands 10000.
	// default: 1000
	Batch int
	// PollInterval is how often a node with nothing new is read again.
	// default: 100ms
	PollInterval time.Duration
	// SettleInterval is how often each node's settled log is read, so a
	// landed pending part that settles has its row updated within about
	// this (doc.go, "Settled states").
	// default: 1s
	SettleInterval time.Duration
	// SettleWalkInterval is how often every landed pending part is
	// re-read on its node anyway, for the changes the settled log does not
	// name (a record that outlived its retention, a settle by a release
	// without the log).
	// default: 1m
	SettleWalkInterval time.Duration
	// DecideWait is how long a part must have been pending, by its node's
	// clock, before it lands (doc.go, "Refused attempts"): the time a
	// refused Reserve attempt has to give its parts back, which are then
	// left out of the database. Negative: parts land at once.
	// default: 250ms
	DecideWait time.Duration
	// RetryBackoff is the most a worker waits after a failed step. After
	// a database failure it resumes sooner, as soon as the database
	// answers again (it is probed every 200ms while down).
	// default: 1s
	RetryBackoff time.Duration
	// StepTimeout bounds one step (a read, a transaction, an
	// acknowledgement), so a hung database or node cannot stall a worker.
	// default: 15s
	StepTimeout time.Duration
	// IdleInTransactionTimeout is PostgreSQL's
	// idle_in_transaction_session_timeout on the sync's sessions ([Connect]
	// sets it): the session of a hung instance (stopped, or cut off
	// mid-transaction) that holds a queue's advisory lock is ended after
	// this long, which releases the lock to the other instances. No step
	// of a live instance stays in a transaction longer than StepTimeout.
	// default: StepTimeout
	IdleInTransactionTimeout time.Duration
	// Logger receives new incarnations, failures and recoveries.
	// default: slog.Default()
	Logger *slog.Logger
	// Metrics receives the sync's metrics.
	// default: NewMetrics(nil) (not registered anywhere)
	Metrics *Metrics
}

// SettingsFrom returns the settings of a configuration's sync section.
func SettingsFrom(c config.Sync) Settings {
	st := Settings{Batch: c.Batch, PollInterval: c.PollInterval, SettleInterval: c.SettleInterval,
		SettleWalkInterval: c.SettleWalkInterval, DecideWait: c.DecideWait, RetryBackoff: c.RetryBackoff}
	if c.DecideWait == 0 {
		st.DecideWait = -1 // sync.decide_wait: 0 is none
	}
	return st
}

// hold is the redo-log read's hold: DecideWait, or 0 for none.
func (s *Settings) hold() time.Duration { return max(s.DecideWait, 0) }

func (s *Settings) defaults() {
	if s.Batch <= 0 {
		s.Batch = 1000
	}
	s.Batch = min(s.Batch, 10000)
	if s.PollInterval <= 0 {
		s.PollInterval = 100 * time.Millisecond
	}
	if s.SettleInterval <= 0 {
		s.SettleInterval = time.Second
	}
	if s.SettleWalkInterval <= 0 {
		s.SettleWalkInterval = time.Minute
	}
	if s.DecideWait == 0 {
		s.DecideWait = 250 * time.Millisecond
	}
	s.DecideWait = min(s.DecideWait, inventory.MaxRedoHold) // negative stays: no hold
	if s.RetryBackoff <= 0 {
		s.RetryBackoff = time.Second
	}
	if s.StepTimeout <= 0 {
		s.StepTimeout = 15 * time.Second
	}
	if s.IdleInTransactionTimeout <= 0 {
		s.IdleInTransactionTimeout = s.StepTimeout
	}
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	if s.Metrics == nil {
		s.Metrics = NewMetrics(nil)
	}
}

// Syncer lands the redo log of every inventory node in PostgreSQL: per
// node, one goroutine lands new entries (one transaction per batch, then
// the acknowledgement) and one re-checks landed pending parts until they
// settle. Several syncers (processes) over the same nodes and database
// are safe: each queue is landed under a PostgreSQL advisory lock, and
// positions are re-read under it.
type Syncer struct {
	inv    *inventory.Inventory
	pool   *pgxpool.Pool
	set    Settings
	log    *slog.Logger
	m      *Metrics
	queues int
	health *dbHealth

	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	err     error         // why the workers stopped on their own (halt)
	halted  chan struct{} // closed by halt
}

// New returns a syncer over inv's nodes writing to pool. The schema must
// be at [SchemaVersion] ([Migrate]). Start starts it.
func New(inv *inventory.Inventory, pool *pgxpool.Pool, set Settings) *Syncer {
	set.defaults()
	s := &Syncer{inv: inv, pool: pool, set: set, log: set.Logger, m: set.Metrics,
		queues: inv.RedoQueues(), halted: make(chan struct{})}
	s.health = newDBHealth(s.log, s.m.dbUp)
	for _, n := range inv.Nodes() {
		s.m.initNode(n.Name())
	}
	return s
}

// Start starts the workers; it is a no-op when started already or closed.
func (s *Syncer) Start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return
	}
	s.started = true
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.probeLoop(ctx) }()
	for _, n := range s.inv.Nodes() {
		w := newWorker(s, n.Name())
		s.wg.Add(2)
		go func() { defer s.wg.Done(); w.landLoop(ctx) }()
		go func() { defer s.wg.Done(); w.settleLoop(ctx) }()
	}
}

// DatabaseUp reports whether PostgreSQL answered the syncer's last
// statement or ping (it is pinged every second while it answers, so an
// outage is seen even when nothing needs landing). `shardis sync` serves
// it as /healthz; it is shardis_sync_database_up. It is false once the
// syncer stopped on its own ([Syncer.Err]).
func (s *Syncer) DatabaseUp() bool { return s.health.up() && s.Err() == nil }

// Err returns why the syncer's workers stopped on their own, nil while
// they run (or were stopped by Close): an error wrapping [ErrSchema] when
// a landing or settle transaction found the database at another schema
// version than [SchemaVersion] (migrated while it ran). Nothing is
// written after that; the process should exit.
func (s *Syncer) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Halted returns a channel closed when the syncer's workers stop on their
// own ([Syncer.Err] says why); never closed by Close. `shardis sync`
// exits on it.
func (s *Syncer) Halted() <-chan struct{} { return s.halted }

// halt stops every worker for good, for err (the schema changed under the
// syncer: every worker would find the same), and logs it once.
func (s *Syncer) halt(err error) {
	s.mu.Lock()
	first := s.err == nil
	if first {
		s.err = err
		close(s.halted)
	}
	cancel := s.cancel
	s.mu.Unlock()
	if first {
		s.log.Error("SYNC STOPPED: nothing more is landed or settled by this instance", "err", err)
	}
	if cancel != nil {
		cancel()
	}
}

// Close stops the workers and waits for them. What was committed stays;
// a batch in flight is rolled back (it is landed again by the next run).
// Idempotent; the syncer cannot be started again.
func (s *Syncer) Close() {
	s.mu.Lock()
	s.started = true
	cancel := s.cancel
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	s.wg.Wait()
}

// lockKey is the first key of a node's advisory locks (the second is the
// queue, or -1 for the settle pass). Two node names that hash alike only
// share locks, which serialises them: harmless.
func lockKey(node string) int32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte("shardis-sync/" + node))
	return int32(h.Sum32())
}

// maxRollbackWait bounds a rollback's wait on the database
// (Syncer.rollback), whatever Settings.StepTimeout is.
const maxRollbackWait = 5 * time.Second

// rollback rolls tx back, a no-op once it committed. It runs after its
// step's context may be done (the step failed, timed out or the syncer is
// closing), so it does not inherit that context's cancellation, but it
// has a deadline of its own: min(StepTimeout, maxRollbackWait). A hung
// database (stopped, its host partitioned) then cannot stall the worker,
// nor Close, which waits for the workers: when the deadline passes, pgx
// closes the connection, and PostgreSQL ends the session once it sees
// that (when it answers again), which rolls the transaction back and
// releases its advisory locks.
func (s *Syncer) rollback(ctx context.Context, tx pgx.Tx) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(s.set.StepTimeout, maxRollbackWait))
	defer cancel()
	_ = tx.Rollback(ctx)
}

// sleep waits d or until ctx is done; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// streak logs the first failure of a run of failures and the recovery
// after it, so an outage gives two lines, not one per retry.
type streak struct {
	log   *slog.Logger
	what  string
	fails int
	since time.Time
}

func (s *streak) fail(err error, attrs ...any) {
	if s.fails == 0 {
		s.since = time.Now()
		s.log.Warn(s.what+" failed: paused, retrying from the committed position", append(attrs, "err", err)...)
	}
	s.fails++
}

func (s *streak) ok(attrs ...any) {
	if s.fails > 0 {
		s.log.Info(s.what+" resumed", append(attrs, "failures", s.fails, "after", time.Since(s.since).Round(time.Millisecond))...)
		s.fails = 0
	}
}
