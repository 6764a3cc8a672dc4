package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/pgsync"
	"github.com/shardis/shardis/router"
)

// Sync is a syncer wired the way `shardis sync` runs it: a router over
// the configured nodes (with their health checks and rollback
// detection), the inventory over it (no reconciler: the service runs
// that), a PostgreSQL pool and the syncer. Close it to stop everything.
type Sync struct {
	Router    *router.Router       // the router over the configured nodes
	Inventory *inventory.Inventory // the inventory over Router, without a reconciler
	Pool      *pgxpool.Pool        // the PostgreSQL pool the syncer lands into
	Syncer    *pgsync.Syncer       // the syncer; not started by OpenSync (call Start)

	reg *registered // the metrics OpenSync registered, taken back by Close
}

// SyncOptions configures [OpenSync]. The zero value works.
type SyncOptions struct {
	// Logger receives the router's and the syncer's log lines (it takes
	// the place of Settings.Logger, which is not read).
	// default: slog.Default()
	Logger *slog.Logger
	// Registerer receives the sync's metrics; not read when
	// Settings.Metrics is set (those are used as they are).
	// default: none
	Registerer prometheus.Registerer
	// Migrate brings the schema to [pgsync.SchemaVersion] before the
	// syncer is built; otherwise a schema at another version is an error.
	Migrate bool
	// Settings override the configuration's sync section where set.
	Settings pgsync.Settings
}

// OpenSync connects what `shardis sync` needs from a configuration
// validated by [config.Config.ValidateSync] (OpenSync validates it too).
// It waits for the database while it cannot be reached ([pgsync.Connect]);
// ctx bounds the wait. The syncer is built but not started: call
// Sync.Syncer.Start. When it fails it leaves nothing open, and nothing
// registered with opts.Registerer: it can be called again with the same
// one.
func OpenSync(ctx context.Context, cfg *config.Config, opts SyncOptions) (*Sync, error) {
	if cfg == nil {
		return nil, errors.New("stack: nil config")
	}
	if err := cfg.ValidateSync(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	reg := &registered{Registerer: opts.Registerer}
	if opts.Registerer != nil {
		opts.Registerer = reg
	}
	st, err := openSync(ctx, cfg, opts)
	if err != nil {
		reg.unregister()
		return nil, err
	}
	st.reg = reg
	return st, nil
}

// openSync is OpenSync past the checks: on an error it closes what it
// opened, but leaves the metrics registered.
func openSync(ctx context.Context, cfg *config.Config, opts SyncOptions) (*Sync, error) {
	set := syncSettings(cfg.Sync, opts)
	pool, err := pgsync.Connect(ctx, cfg.Sync.DSN, len(cfg.Nodes), set, opts.Migrate)
	if err != nil {
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
		return nil, fmt.Errorf("stack: %w", err)
	}
	return &Sync{Router: r, Inventory: inv, Pool: pool, Syncer: pgsync.New(inv, pool, set)}, nil
}

// registered is a prometheus.Registerer that remembers what it
// registered, so that a failed OpenSync can take its metrics back.
type registered struct {
	prometheus.Registerer // the caller's (SyncOptions.Registerer)
	done                  []prometheus.Collector
}

// Register registers c and remembers it.
func (r *registered) Register(c prometheus.Collector) error {
	if err := r.Registerer.Register(c); err != nil {
		return err
	}
	r.done = append(r.done, c)
	return nil
}

// MustRegister registers cs and remembers them; it panics on the first
// that fails, as prometheus.Registerer's does.
func (r *registered) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// unregister takes back everything registered through r.
func (r *registered) unregister() {
	for _, c := range r.done {
		r.Registerer.Unregister(c)
	}
	r.done = nil
}

// syncSettings are the sync section's settings with opts.Settings'
// non-zero fields over them, the logger and the metrics.
func syncSettings(c config.Sync, opts SyncOptions) pgsync.Settings {
	set := pgsync.SettingsFrom(c)
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
	if o.SettleWalkInterval > 0 {
		set.SettleWalkInterval = o.SettleWalkInterval
	}
	if o.DecideWait != 0 {
		set.DecideWait = o.DecideWait
	}
	if o.RetryBackoff > 0 {
		set.RetryBackoff = o.RetryBackoff
	}
	set.StepTimeout, set.IdleInTransactionTimeout = o.StepTimeout, o.IdleInTransactionTimeout
	set.Metrics, set.Logger = o.Metrics, opts.Logger
	if set.Metrics == nil {
		set.Metrics = pgsync.NewMetrics(opts.Registerer)
	}
	return set
}

// Close stops the syncer, waits for the inventory's work off the callers'
// paths, then closes the router and the pool, and takes back the metrics
// OpenSync registered (the same Registerer can hold the next OpenSync's).
func (st *Sync) Close() {
	st.Syncer.Close()
	st.Inventory.Close()
	_ = st.Router.Close()
	st.Pool.Close()
	if st.reg != nil {
		st.reg.unregister()
	}
}
