package pgsync_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/pgtest"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/internal/stack"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/pgsync"
	"github.com/shardis/shardis/rollback"
)

// childEnv names the configuration file a re-executed test binary runs
// `shardis sync` from (TestMain): the subprocess a test kills with -9.
const childEnv = "PGSYNC_TEST_CHILD_CONFIG"

func TestMain(m *testing.M) {
	if path := os.Getenv(childEnv); path != "" {
		os.Exit(runChild(path))
	}
	code := m.Run()
	if err := pgtest.StopShared(); err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// runChild is the sync subprocess: what `shardis sync` does, until
// SIGTERM (or SIGKILL).
func runChild(path string) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg, err := config.Load(path)
	if err != nil {
		log.Error("config", "err", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	st, err := stack.OpenSync(ctx, cfg, stack.SyncOptions{Logger: log, Migrate: true})
	if err != nil {
		log.Error("open", "err", err)
		return 1
	}
	st.Syncer.Start()
	<-ctx.Done()
	st.Close()
	return 0
}

// env is real redis-server nodes (AOF, appendfsync always), the service's
// side (router, inventory, reconciler) and a real PostgreSQL.
type env struct {
	t     *testing.T
	names []string
	srv   map[string]*redistest.Server
	raw   map[string]*redis.Client
	cfg   *config.Config
	stack *stack.Stack
	inv   *inventory.Inventory
	pg    *pgtest.Server // the test's own server (newEnvOwnPG); nil on the shared one
	pgURL string         // the test's database
	pool  *pgxpool.Pool
	yaml  string // the configuration file of sync subprocesses
}

// routes of the test configuration: "all" over every node, "one" on n2.
var testRoutes = map[string][]string{"all": {"n1", "n2", "n3"}, "one": {"n2"}}

// newEnv starts the nodes and the service's side over a database of
// the test's own on the PostgreSQL server the package's tests share
// (pgtest.Shared).
func newEnv(t *testing.T, aof bool) *env {
	t.Helper()
	return newEnvOn(t, aof, false)
}

// newEnvOwnPG is newEnv on a PostgreSQL server of the test's own (e.pg),
// for a test that stops, kills, restarts or pauses it.
func newEnvOwnPG(t *testing.T, aof bool) *env {
	t.Helper()
	return newEnvOn(t, aof, true)
}

func newEnvOn(t *testing.T, aof, ownPG bool) *env {
	t.Helper()
	e := &env{t: t, srv: map[string]*redistest.Server{}, raw: map[string]*redis.Client{}}
	if ownPG {
		e.pg = pgtest.Start(t, "")
		e.pgURL = e.pg.URL()
	} else {
		e.pgURL = pgtest.Shared(t)
	}
	servers := redistest.StartN(t, 3, redistest.Options{AOF: aof})
	cfg := config.Default()
	cfg.Nodes = map[string]config.Node{}
	var nodesYAML strings.Builder
	for i, s := range servers {
		name := fmt.Sprintf("n%d", i+1)
		e.names = append(e.names, name)
		e.srv[name], e.raw[name] = s, s.Client(t)
		cfg.Nodes[name] = config.Node{Addr: s.Addr(), Weight: 1}
		fmt.Fprintf(&nodesYAML, "  %s: {addr: %s}\n", name, s.Addr())
	}
	sort.Strings(e.names)
	cfg.Servers = map[string]config.Server{"inventory": {OnNodeDown: config.OnNodeDownFail, Routes: testRoutes}}
	// a probe gets 1.5 s: these tests kill nodes (a refused connection
	// fails a probe at once) and never pause one, and on a loaded machine a
	// probe of a live node outlasted 500 ms and marked it DOWN
	// (TestSyncCancelReason's LoadStock: "probe: read tcp …: i/o timeout",
	// make test beside an explorer and a chaos run). A restarted node is
	// held back a heartbeat plus this (health.hold_back's default).
	cfg.Health = config.Health{Heartbeat: 100 * time.Millisecond, Timeout: 1500 * time.Millisecond,
		Backoff: []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}}
	// commands get 3 s, not the default 1 s: these tests kill and restart
	// nodes, not pause them, and on a loaded machine (make test beside
	// other work) a command of a live node took over a second to answer
	// (TestPendingAgainRowExpires: "accept: read tcp …: i/o timeout")
	cfg.Client.CommandTimeout = 3 * time.Second
	cfg.Inventory.ReservationTTL = 2 * time.Second
	cfg.Inventory.ReconcileInterval = 100 * time.Millisecond
	cfg.Inventory.RedoQueues = 8
	cfg.Inventory.AttemptLease = time.Second
	cfg.Sync.DSN = e.pgURL
	cfg.Sync.Listen = ""
	cfg.Sync.PollInterval = 20 * time.Millisecond
	cfg.Sync.SettleInterval = 100 * time.Millisecond
	// a walk over every pending row as often: most tests here change a
	// part's state in ways the settled log names and in ways only a walk
	// finds (TestSettledLogAlone sets a long one)
	cfg.Sync.SettleWalkInterval = 100 * time.Millisecond
	cfg.Sync.RetryBackoff = 100 * time.Millisecond
	cfg.Sync.Batch = 200
	if err := cfg.ValidateSync(); err != nil {
		t.Fatal(err)
	}
	e.cfg = &cfg
	e.yaml = filepath.Join(t.TempDir(), "sync.yaml")
	yml := "nodes:\n" + nodesYAML.String() + `servers:
  inventory:
    routes: {all: [n1, n2, n3], one: [n2]}
health: {heartbeat: 100ms, timeout: 500ms, backoff: [100ms, 200ms]}
client: {command_timeout: 3s}
inventory: {redo_queues: 8}
sync: {dsn: "` + cfg.Sync.DSN + `", listen: "", poll_interval: 20ms, settle_interval: 100ms, settle_walk_interval: 100ms, retry_backoff: 100ms, batch: 200}
`
	if err := os.WriteFile(e.yaml, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	e.stack, err = stack.Open(ctx, e.cfg, stack.Options{Logger: quiet(),
		Settings: rollback.Settings{Interval: 100 * time.Millisecond, TrimEvery: 5}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.stack.Close() })
	e.inv = e.stack.Inventory
	if e.pool, err = pgxpool.New(ctx, e.pgURL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.pool.Close)
	return e
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// testLog is a logger whose warnings reach the test log.
func testLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// syncer opens an in-process sync (schema migrated), started, closed when
// the test ends.
func (e *env) syncer(m *pgsync.Metrics) *stack.Sync {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := stack.OpenSync(ctx, e.cfg, stack.SyncOptions{Logger: testLog(e.t), Migrate: true,
		Settings: pgsync.Settings{Metrics: m}})
	if err != nil {
		e.t.Fatal(err)
	}
	st.Syncer.Start()
	e.t.Cleanup(st.Close)
	return st
}

// child is a sync subprocess.
type child struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// startChild starts a sync subprocess (this test binary, see TestMain);
// its log goes to logw.
func (e *env) startChild(logw io.Writer) *child {
	e.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+e.yaml)
	cmd.Stdout, cmd.Stderr = logw, logw
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	c := &child{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(c.done) }()
	e.t.Cleanup(func() { c.kill() })
	return c
}

// kill sends SIGKILL and waits for the process to go.
func (c *child) kill() {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

// load reserves, confirms and cancels orders.
func (e *env) loadStock(route, sku string, qty int64) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.inv.LoadStock(ctx, route, sku, qty, 0); err != nil {
		e.t.Fatalf("LoadStock %s/%s: %v", route, sku, err)
	}
}

// nodePart is a redo part as its node holds it.
type nodePart struct {
	state, order, sku, route, queue string
	qty, offset                     int64
}

// nodeParts reads every stock part record of a node.
func (e *env) nodeParts(ctx context.Context, name string) (map[string]nodePart, error) {
	c := e.raw[name]
	out := map[string]nodePart{}
	ids, err := scanIDs(ctx, c, "inv:part:*")
	if err != nil {
		return nil, err
	}
	parts := make([]*inventory.PartRead, len(ids))
	pipelined(ctx, c, func(p redis.Pipeliner) {
		for i, id := range ids {
			parts[i] = inventory.ReadPart(ctx, p, id)
		}
	})
	for i, id := range ids {
		rec, err := parts[i].Fields()
		if err != nil {
			return nil, err
		}
		names := []string{"kind", "state", "order", "sku", "qty", "counter", "redo", "offset"}
		if rec["kind"] != "s" {
			continue // quota parts and tombstones are not in the redo log
		}
		s := func(i int) string { return rec[names[i]] }
		p := nodePart{state: s(1), order: s(2), sku: s(3), queue: strings.TrimPrefix(s(6), "inv:redo:")}
		p.qty, _ = strconv.ParseInt(s(4), 10, 64)
		p.offset, _ = strconv.ParseInt(s(7), 10, 64)
		p.route, _, _ = strings.Cut(strings.TrimPrefix(s(5), "inv:stock:"), ":")
		out[id] = p
	}
	// the orders' inline parts, which have no key (inventory/inline.go)
	orderIDs, err := scanIDs(ctx, c, inventory.OrderKey("*"))
	if err != nil {
		return nil, err
	}
	orders := make([]*inventory.OrderRead, len(orderIDs))
	pipelined(ctx, c, func(p redis.Pipeliner) {
		for i, id := range orderIDs {
			orders[i] = inventory.ReadOrder(ctx, p, id)
		}
	})
	for i, id := range orderIDs {
		f, err := orders[i].Fields()
		if err != nil {
			return nil, err
		}
		in, err := inventory.InlineParts(name, id, f)
		if err != nil {
			return nil, err
		}
		for _, ip := range in {
			if _, ok := out[ip.ID]; ok {
				continue // a part with a key of its own is that record
			}
			route, _, _ := strings.Cut(strings.TrimPrefix(ip.Counter, "inv:stock:"), ":")
			out[ip.ID] = nodePart{state: string(ip.State), order: ip.Order, sku: ip.SKU, qty: ip.Qty, offset: ip.Offset,
				route: route, queue: strings.TrimPrefix(ip.Redo, "inv:redo:")}
		}
	}
	return out, nil
}

// scanIDs returns the ids of the keys on c that match pattern (an
// inventory key pattern: the id is what follows the key's prefix).
func scanIDs(ctx context.Context, c *redis.Client, pattern string) ([]string, error) {
	var ids []string
	iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
	for iter.Next(ctx) {
		_, id := inventory.ParseKey(iter.Val())
		ids = append(ids, id)
	}
	return ids, iter.Err()
}

// pipelined sends what queue queues on c in one pipeline. Its commands'
// own errors (a GET of a missing key, a hash read of a packed string)
// stay on the commands for the reads' Fields to judge; a failed
// connection fails every command the same way.
func pipelined(ctx context.Context, c *redis.Client, queue func(redis.Pipeliner)) {
	p := c.Pipeline()
	queue(p)
	_, _ = p.Exec(ctx)
}

// dbRow is a stock_movements row.
type dbRow struct {
	inc, order, route, sku, state string
	queue                         int32
	offset, qty                   int64
}

func (e *env) dbRows(ctx context.Context, name string) (map[string]dbRow, error) {
	rows, _ := e.pool.Query(ctx, `SELECT part_id, incarnation, order_id, route, sku, state, queue, redo_offset, quantity
FROM stock_movements WHERE node = $1`, name)
	out := map[string]dbRow{}
	var id string
	var r dbRow
	_, err := pgx.ForEachRow(rows, []any{&id, &r.inc, &r.order, &r.route, &r.sku, &r.state, &r.queue, &r.offset, &r.qty}, func() error {
		out[id] = r
		return nil
	})
	return out, err
}
