// Package stack wires the library's packages into what the commands
// run: [Open] is the stack of `shardis serve` (router, inventory,
// deferred-settle queue, reconciler), [OpenSync] the one of `shardis sync`
// (router, inventory, PostgreSQL pool, syncer). The libraries below it
// (router, inventory, rollback, pgsync) take their parts as arguments
// and never read a configuration section that is not theirs; this package
// is the one place that reads the whole configuration and decides how
// the parts are put together. An embedding program wires them the same
// way (rollback's Example shows how).
package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/health"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/rollback"
	"github.com/shardis/shardis/router"
)

// Stack is an inventory wired the way `shardis serve` runs it: a router
// over the configured nodes, the inventory over it, a deferred-settle
// queue, and a running reconciler that a node coming back wakes at once.
// Close it to stop the reconciler and close every node client.
type Stack struct {
	Router     *router.Router       // the router over the configured nodes
	Inventory  *inventory.Inventory // the inventory over Router, deferring settles to Queue
	Queue      *rollback.Queue      // the deferred-settle queue
	Reconciler *rollback.Reconciler // the running reconciler over Inventory and Queue
}

// Options configures [Open]. The zero value works.
type Options struct {
	// Logger receives the router's, the inventory's, the reconciler's and
	// go-redis's own log lines.
	// default: slog.Default()
	Logger *slog.Logger
	// Router is passed to router.New; its Logger is replaced by Logger,
	// its KeepData gains the inventory's server key, and its
	// OnStateChange is called before the reconciler is woken.
	// default: zero router.Options
	Router router.Options
	// Settings configures the reconciler; Interval and TrimAge default to
	// inventory.reconcile_interval and inventory.redo_max_age.
	// default: from the configuration
	Settings rollback.Settings
}

// Open builds and starts a [Stack] from a validated configuration (it
// needs the inventory section). It returns once every node was probed
// once or ctx is done; unreachable nodes are DOWN, not an error.
func Open(ctx context.Context, cfg *config.Config, opts Options) (*Stack, error) {
	if cfg == nil {
		return nil, errors.New("stack: nil config")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	node.RouteRedisLogs(opts.Logger)
	var wake rollback.Waker
	ropts := opts.Router
	ropts.Logger = opts.Logger
	// the inventory's server when configured (cfg.KeepData); when it is
	// not, inventory.New says so naming inventory.server: the router's
	// refusal named Options.KeepData, which no operator sets
	for _, s := range cfg.KeepData() {
		if !slices.Contains(ropts.KeepData, s) {
			ropts.KeepData = append(slices.Clone(ropts.KeepData), s)
		}
	}
	user := ropts.OnStateChange
	ropts.OnStateChange = func(ev health.Event) {
		if user != nil {
			user(ev)
		}
		wake.OnStateChange(ev)
	}
	r, err := router.New(ctx, cfg, ropts)
	if err != nil {
		return nil, err
	}
	st := &Stack{Router: r, Queue: rollback.NewQueue()}
	st.Inventory, err = inventory.New(r, inventory.Options{Deferrer: st.Queue, Logger: opts.Logger})
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("stack: %w", err)
	}
	set := opts.Settings
	if set.Interval <= 0 {
		set.Interval = cfg.Inventory.ReconcileInterval
	}
	if set.TrimAge == 0 {
		set.TrimAge = cfg.Inventory.RedoMaxAge
	}
	if set.Logger == nil {
		set.Logger = opts.Logger
	}
	st.Reconciler = rollback.New(st.Inventory, st.Queue, set)
	wake.Set(st.Reconciler)
	st.Reconciler.Start()
	return st, nil
}

// Close stops the reconciler, then closes the router (every node client).
// It is idempotent.
func (s *Stack) Close() error {
	s.Reconciler.Close()
	s.Inventory.Close()
	return s.Router.Close()
}
