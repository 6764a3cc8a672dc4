package stack_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/pgtest"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/internal/stack"
	"github.com/shardis/shardis/pgsync"
)

// syncConfig is a validated configuration of one real node n1 and the
// real database dsn; its one server over n1 is the inventory server when
// withInventory, else a server of another key (a router-only
// configuration).
func syncConfig(t *testing.T, addr, dsn string, withInventory bool) *config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.Nodes = map[string]config.Node{"n1": {Addr: addr, Weight: 1}}
	key := "cache"
	if withInventory {
		key = cfg.Inventory.Server
	}
	cfg.Servers = map[string]config.Server{key: {OnNodeDown: config.OnNodeDownFail, Routes: map[string][]string{"r": {"n1"}}}}
	cfg.Sync.DSN = dsn
	cfg.Sync.Listen = ""
	if err := cfg.ValidateSync(); err != nil {
		t.Fatal(err)
	}
	return &cfg
}

// openSync is stack.OpenSync with a panic turned into an error, so a test
// can tell "refused" from "crashed".
func openSync(ctx context.Context, cfg *config.Config, opts stack.SyncOptions) (st *stack.Sync, err error) {
	defer func() {
		if p := recover(); p != nil {
			st, err = nil, fmt.Errorf("OpenSync panicked: %v", p)
		}
	}()
	return stack.OpenSync(ctx, cfg, opts)
}

// syncFamilies returns the names of the shardis_sync_ metric families reg
// gathers.
func syncFamilies(t *testing.T, reg *prometheus.Registry) []string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "shardis_sync_") {
			names = append(names, mf.GetName())
		}
	}
	return names
}

// An OpenSync that fails opens nothing that outlives it: the metrics it
// registered with SyncOptions.Registerer are not left there (they would
// report a sync that does not exist), so the caller can fix the cause and
// open again with the same registerer: after waiting for the database
// (ctx ran out), after migrating the schema, after fixing the
// configuration. Each step that can fail is tried: the database wait and
// the schema check (before the router opens), and the inventory (after
// the router and the pool are open).
func TestReviewOpenSyncFailureLeavesNoMetrics(t *testing.T) {
	node := redistest.Start(t, redistest.Options{})
	pg := pgtest.Start(t, "")
	quiet := slog.New(slog.DiscardHandler)
	good := syncConfig(t, node.Addr(), pg.URL(), true)

	failures := []struct {
		name string
		cfg  *config.Config
		opts stack.SyncOptions
		want func(error) bool
	}{
		// first: every case migrates the database once it failed
		{"schema not migrated", good, stack.SyncOptions{},
			func(err error) bool { return errors.Is(err, pgsync.ErrSchema) }},
		{"database unreachable", syncConfig(t, node.Addr(), "postgres://postgres@127.0.0.1:1/shardis?sslmode=disable", true),
			stack.SyncOptions{}, func(err error) bool { return errors.Is(err, context.DeadlineExceeded) }},
		{"no inventory server", syncConfig(t, node.Addr(), pg.URL(), false), stack.SyncOptions{Migrate: true},
			func(err error) bool { return err != nil && strings.Contains(err.Error(), "inventory") }},
	}
	for _, f := range failures {
		t.Run(f.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			opts := f.opts
			opts.Logger, opts.Registerer = quiet, reg
			opts.Settings.RetryBackoff = 50 * time.Millisecond
			st, err := openSync(ctx, f.cfg, opts)
			if err == nil {
				st.Close()
				t.Fatal("OpenSync succeeded, want an error")
			}
			if !f.want(err) {
				t.Fatalf("OpenSync: unexpected error %v", err)
			}
			if names := syncFamilies(t, reg); len(names) != 0 {
				t.Errorf("after a failed OpenSync the registerer still holds %v", names)
			}

			ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel2()
			st, err = openSync(ctx2, good, stack.SyncOptions{Logger: quiet, Registerer: reg, Migrate: true})
			if err != nil {
				t.Fatalf("OpenSync again with the same registerer after the cause was fixed: %v", err)
			}
			defer st.Close()
			if names := syncFamilies(t, reg); len(names) == 0 {
				t.Fatal("the sync opened again registered no shardis_sync_ metric")
			}
		})
	}
}

// Close takes back the metrics OpenSync registered: a process that closes
// its sync and opens another on the same registerer (a reload) does not
// panic with a duplicate registration, and the closed sync's metrics are
// not gathered any more.
func TestSyncCloseTakesBackMetrics(t *testing.T) {
	node := redistest.Start(t, redistest.Options{})
	pg := pgtest.Start(t, "")
	quiet := slog.New(slog.DiscardHandler)
	good := syncConfig(t, node.Addr(), pg.URL(), true)
	reg := prometheus.NewRegistry()
	for i := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		st, err := openSync(ctx, good, stack.SyncOptions{Logger: quiet, Registerer: reg, Migrate: true})
		cancel()
		if err != nil {
			t.Fatalf("OpenSync %d on the same registerer: %v", i+1, err)
		}
		if names := syncFamilies(t, reg); len(names) == 0 {
			t.Fatal("an open sync registered no shardis_sync_ metric")
		}
		st.Close()
		if names := syncFamilies(t, reg); len(names) != 0 {
			t.Fatalf("after Close the registerer still holds %v", names)
		}
	}
}
