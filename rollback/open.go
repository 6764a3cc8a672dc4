package rollback

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/health"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
)

// Stack is an inventory wired the way `shardis serve` runs it: a router
// over the configured nodes, the inventory over it, a deferred-settle
// queue, and a running reconciler that a node coming back wakes at once.
// Close it to stop the reconciler and close every node client.
type Stack struct {
	Router     *router.Router
	Inventory  *inventory.Inventory
	Queue      *Queue
	Reconciler *Reconciler
}

// OpenOptions configures [Open]. The zero value works.
type OpenOptions struct {
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
	Settings Settings
}

// Open builds and starts a [Stack] from a validated configuration (it
// needs the inventory section). It returns once every node was probed
// once or ctx is done; unreachable nodes are DOWN, not an error.
func Open(ctx context.Context, cfg *config.Config, opts OpenOptions) (*Stack, error) {
	if cfg == nil {
		return nil, errors.New("rollback: nil config")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	node.RouteRedisLogs(opts.Logger)
	var rec atomic.Pointer[Reconciler] // set before any node can come back up after Open
	ropts := opts.Router
	ropts.Logger = opts.Logger
	if !slices.Contains(ropts.KeepData, cfg.Inventory.Server) {
		ropts.KeepData = append(slices.Clone(ropts.KeepData), cfg.Inventory.Server)
	}
	user := ropts.OnStateChange
	ropts.OnStateChange = func(ev health.Event) {
		if user != nil {
			user(ev)
		}
		if r := rec.Load(); r != nil && ev.Up {
			r.NodeUp(ev.Target)
		}
	}
	r, err := router.New(ctx, cfg, ropts)
	if err != nil {
		return nil, err
	}
	st := &Stack{Router: r, Queue: NewQueue()}
	st.Inventory, err = inventory.New(r, inventory.Options{Deferrer: st.Queue, Logger: opts.Logger})
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("rollback: %w", err)
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
	st.Reconciler = New(st.Inventory, st.Queue, set)
	rec.Store(st.Reconciler)
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
