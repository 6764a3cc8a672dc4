package pgsync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
)

// Stack is a syncer wired the way `shardis sync` runs it: a router over
// the configured nodes (with their health checks and rollback
// detection), the inventory over it (no reconciler: the service runs
// that), a PostgreSQL pool and the syncer. Close it to stop everything.
type Stack struct {
	Router    *router.Router
	Inventory *inventory.Inventory
	Pool      *pgxpool.Pool
	Syncer    *Syncer
}

// OpenOptions configures [Open]. The zero value works.
type OpenOptions struct {
	// Logger receives the router's and the syncer's log lines.
	// default: slog.Default()
	Logger *slog.Logger
	// Registerer receives the sync's metrics.
	// default: none
	Registerer prometheus.Registerer
	// Migrate brings the schema to [SchemaVersion] before the syncer is
	// built; otherwise a schema at another version is an error.
	Migrate bool
	// Settings override the configuration's sync section where set.
	Settings Settings
}

// Open connects what `shardis sync` needs from a configuration validated
// by [config.Config.ValidateSync] (Open validates it too). It waits for
// the database while it cannot be reached (logging once), so a sync
// started before PostgreSQL simply starts late; ctx bounds the wait. The
// syncer is built but not started: call Stack.Syncer.Start.
func Open(ctx context.Context, cfg *config.Config, opts OpenOptions) (*Stack, error) {
	if cfg == nil {
		return nil, errors.New("pgsync: nil config")
	}
	if err := cfg.ValidateSync(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	set := SettingsFrom(cfg.Sync)
	o := opts.Settings
	if o.Batch > 0 {
		set.Batch = o.Batch
	}
	if o.PollInterval > 0 {
		set.PollInterval = o.PollInterval
	}
	if o.SettleInterval > 0 {
		set.SettleInterval = o.SettleInterval
	}
	if o.RetryBackoff > 0 {
		set.RetryBackoff = o.RetryBackoff
	}
	set.StepTimeout, set.IdleInTransactionTimeout = o.StepTimeout, o.IdleInTransactionTimeout
	set.Metrics, set.Logger = o.Metrics, opts.Logger
	if set.Metrics == nil {
		set.Metrics = NewMetrics(opts.Registerer)
	}
	set.defaults()
	pc, err := pgxpool.ParseConfig(cfg.Sync.DSN)
	if err != nil {
		return nil, fmt.Errorf("sync.dsn: %w", err) // pgx masks the password
	}
	// A hung instance's session holding queue locks mid-transaction is
	// ended by the server (Settings.IdleInTransactionTimeout).
	pc.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] =
		strconv.FormatInt(max(set.IdleInTransactionTimeout.Milliseconds(), 1), 10)
	// Two workers per node each hold at most one connection at a time;
	// beyond 32 they take turns rather than crowd the server.
	pc.MaxConns = int32(max(4, min(32, 2*len(cfg.Nodes)+2)))
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("pgsync: %w", err)
	}
	if err := waitSchema(ctx, pool, opts.Migrate, opts.Logger, set.RetryBackoff); err != nil {
		pool.Close()
		return nil, err
	}
	node.RouteRedisLogs(opts.Logger)
	r, err := router.New(ctx, cfg, router.Options{KeepData: cfg.KeepData(), Logger: opts.Logger})
	if err != nil {
		pool.Close()
		return nil, err
	}
	inv, err := inventory.New(r, inventory.Options{Logger: opts.Logger})
	if err != nil {
		_ = r.Close()
		pool.Close()
		return nil, fmt.Errorf("pgsync: %w", err)
	}
	return &Stack{Router: r, Inventory: inv, Pool: pool, Syncer: New(inv, pool, set)}, nil
}

// ErrAuth is wrapped when PostgreSQL refuses sync.dsn's credentials
// (SQLSTATE 28P01 invalid_password, 28000
// invalid_authorization_specification): waiting would not help, so
// [Open] returns it at once.
var ErrAuth = errors.New("PostgreSQL refused the credentials of sync.dsn")

// authFailure wraps err in ErrAuth when it is PostgreSQL refusing the
// credentials; it returns nil otherwise.
func authFailure(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "28P01" || pe.Code == "28000") {
		return fmt.Errorf("pgsync: %w: %s (SQLSTATE %s)", ErrAuth, pe.Message, pe.Code)
	}
	return nil
}

// waitSchema migrates or checks the schema, retrying while the database
// cannot be reached. A schema at the wrong version, or credentials
// refused, are returned at once.
func waitSchema(ctx context.Context, pool *pgxpool.Pool, migrate bool, log *slog.Logger, backoff time.Duration) error {
	for tries := 0; ; tries++ {
		var err error
		if migrate {
			var from, to int
			if from, to, err = Migrate(ctx, pool); err == nil && from != to {
				log.Info("sync schema migrated", "from_version", from, "to_version", to)
			}
		} else {
			err = CheckSchema(ctx, pool)
		}
		if err == nil || errors.Is(err, ErrSchema) {
			return err
		}
		if aerr := authFailure(err); aerr != nil {
			return aerr
		}
		if tries == 0 {
			log.Warn("PostgreSQL not reachable: waiting for it", "err", err)
		}
		if !sleep(ctx, backoff) {
			return fmt.Errorf("pgsync: waiting for PostgreSQL: %w (last error: %v)", ctx.Err(), err)
		}
	}
}

// Close stops the syncer, then closes the router and the pool.
func (st *Stack) Close() {
	st.Syncer.Close()
	_ = st.Router.Close()
	st.Pool.Close()
}
