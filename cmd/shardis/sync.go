package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/stack"
	"github.com/shardis/shardis/pgsync"
)

const syncUsage = `usage: shardis sync [flags]            land the redo log in PostgreSQL until SIGINT/SIGTERM
       shardis sync migrate [flags]    create or migrate the schema, then exit
       shardis sync status [flags]     print per node and queue: head, landed, lag, pending parts

sync status exits 1, after printing every node (a node it could not read,
or the database about it, with its error), when a node could not be read.
The database is sync.dsn (or SHARDIS_SYNC__DSN). See README.md, "shardis sync".
`

// syncSubcommand splits sync's arguments into its subcommand (migrate,
// status, help, or "" for the landing) and the rest.
func syncSubcommand(args []string) (string, []string) {
	if len(args) > 0 && (args[0] == "migrate" || args[0] == "status" || args[0] == "help") {
		return args[0], args[1:]
	}
	return "", args
}

// cmdSync runs `shardis sync` and its subcommands.
func cmdSync(args []string, stdout, stderr io.Writer) error {
	sub, args := syncSubcommand(args)
	fs := flag.NewFlagSet("sync "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "config file (required)")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	jsonOut := fs.Bool("log-json", false, "log JSON lines instead of text")
	migrate := fs.Bool("migrate", false, "create or migrate the schema before landing")
	asJSON := fs.Bool("json", false, "status: print JSON")
	all := fs.Bool("all", false, "status: list every queue that holds anything (a head, a landed position or pending parts), not only those with lag or pending parts")
	timeout := fs.Duration("timeout", 10*time.Second, "status and migrate: give up after this long")
	fs.Usage = func() {
		fmt.Fprint(stderr, syncUsage)
		fs.PrintDefaults()
	}
	if sub == "help" {
		fs.Usage()
		return flag.ErrHelp // as -h: sync's landing takes no argument
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("%w: sync: unexpected argument %q (the subcommand, migrate or status, comes first)", errUsage, fs.Arg(0))
	}
	if *cfgPath == "" {
		fs.Usage()
		return fmt.Errorf("%w: sync needs --config FILE", errUsage)
	}
	if err := syncFlagsApply(fs, sub); err != nil {
		return err
	}
	lvl, err := parseLevel(*level)
	if err != nil {
		return err
	}
	if sub != "" && *timeout <= 0 { // status and migrate give up after it
		return fmt.Errorf("%w: --timeout %v: want a positive duration", errUsage, *timeout)
	}
	if sub == "status" && !flagSet(fs, "log-level") {
		// A status reads and exits: the router's "node up" lines are
		// noise there; warnings and errors (a node down) still show.
		// An explicit --log-level is honoured.
		lvl = max(lvl, slog.LevelWarn)
	}
	log := newLogger(stderr, lvl, *jsonOut, "sync")
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	if err := cfg.ValidateSync(); err != nil {
		return err
	}
	ctx, stop := untilSignal()
	defer stop()
	switch sub {
	case "migrate":
		ctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		st, err := stack.OpenSync(ctx, cfg, stack.SyncOptions{Logger: log, Migrate: true})
		if err != nil {
			return err
		}
		st.Close()
		fmt.Fprintf(stdout, "sync schema at version %d\n", pgsync.SchemaVersion)
		return nil
	case "status":
		ctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		return syncStatus(ctx, cfg, log, stdout, *asJSON, *all)
	}
	return runSync(ctx, cfg, log, *migrate)
}

// syncFlagsApply refuses a flag given to a form of sync it does nothing
// for: --migrate is the landing's, --json and --all the status's,
// --timeout the status's and the migrate's.
func syncFlagsApply(fs *flag.FlagSet, sub string) error {
	for _, f := range []struct {
		name  string
		forms []string // the subcommands it applies to; "" the landing
	}{
		{"migrate", []string{""}}, {"json", []string{"status"}}, {"all", []string{"status"}},
		{"timeout", []string{"status", "migrate"}},
	} {
		if !flagSet(fs, f.name) || slices.Contains(f.forms, sub) {
			continue
		}
		want := make([]string, len(f.forms))
		for i, form := range f.forms {
			want[i] = strings.TrimSpace("shardis sync " + form)
			if form == "" {
				want[i] += " (the landing)"
			}
		}
		return fmt.Errorf("%w: --%s applies to %s only", errUsage, f.name, strings.Join(want, " or "))
	}
	return nil
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// runSync lands until ctx is done, serving /metrics and /healthz (see
// syncHealth) on sync.listen meanwhile.
func runSync(ctx context.Context, cfg *config.Config, log *slog.Logger, migrate bool) error {
	var running atomic.Pointer[pgsync.Syncer] // nil until the database answered at start
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var srv *http.Server
	if cfg.Sync.Listen != "" {
		ln, err := net.Listen("tcp", cfg.Sync.Listen)
		if err != nil {
			return fmt.Errorf("sync.listen %s: %w", cfg.Sync.Listen, err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { syncHealth(w, running.Load()) })
		srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
		log.Info("sync metrics", "addr", ln.Addr().String())
	}
	st, err := stack.OpenSync(ctx, cfg, stack.SyncOptions{Logger: log, Registerer: reg, Migrate: migrate})
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while waiting for the database
		}
		return err
	}
	st.Syncer.Start()
	running.Store(st.Syncer)
	log.Info("shardis sync landing the redo log", "nodes", len(cfg.Nodes), "queues", cfg.Inventory.RedoQueues,
		"database", config.RedactDSN(cfg.Sync.DSN))
	select {
	case <-ctx.Done():
	case <-st.Syncer.Halted():
		st.Close()
		return fmt.Errorf("sync stopped: %w", st.Syncer.Err())
	}
	log.Info("shutting down: the batch in flight is rolled back and landed again on the next start")
	st.Close()
	log.Info("stopped")
	return nil
}

// syncHealth answers /healthz: 200 while PostgreSQL answers the syncer
// (its statements and a ping every second), 503 while it does not or
// before the syncer started (waiting for the database at start).
func syncHealth(w http.ResponseWriter, s *pgsync.Syncer) {
	switch {
	case s == nil:
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "starting: waiting for PostgreSQL\n")
	case !s.DatabaseUp():
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "PostgreSQL unreachable: landing paused\n")
	default:
		_, _ = io.WriteString(w, "ok\n")
	}
}

// syncStatus prints what the sync landed of every node.
func syncStatus(ctx context.Context, cfg *config.Config, log *slog.Logger, w io.Writer, asJSON, all bool) error {
	st, err := stack.OpenSync(ctx, cfg, stack.SyncOptions{Logger: log})
	if err != nil {
		return err
	}
	defer st.Close()
	nodes, err := pgsync.Status(ctx, st.Inventory, st.Pool)
	if err != nil {
		return err
	}
	if asJSON {
		if err := json.NewEncoder(w).Encode(nodes); err != nil {
			return err
		}
	} else {
		writeSyncStatus(w, nodes, all)
	}
	return unreadNodes(nodes)
}

// unreadNodes fails a sync status that could not read a node (or the
// database about it), naming them: their rows say error, and a script must
// not take the report as complete.
func unreadNodes(nodes []pgsync.NodeStatus) error {
	var bad []string
	for _, n := range nodes {
		if n.Err != "" {
			bad = append(bad, n.Node)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("sync status: %d of %d nodes could not be read: %s", len(bad), len(nodes), strings.Join(bad, ", "))
}

// writeSyncStatus prints the node table, then the queues with lag or
// pending parts (with all, every queue that holds anything: NodeStatus.Queues; one stopped at an unreadable part
// record with its problem), then earlier incarnations, then every redo-log
// range trimmed before it landed (sync_gaps).
func writeSyncStatus(out io.Writer, nodes []pgsync.NodeStatus, all bool) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tINCARNATION\tGEN\tLAG\tPENDING\tQUEUES")
	for _, n := range nodes {
		if n.Err != "" {
			fmt.Fprintf(w, "%s\t%s\t-\t-\t-\terror: %s\n", n.Node, orDash(n.Incarnation), n.Err)
			continue
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d\n", n.Node, n.Incarnation, n.Generation, n.Lag, n.Pending, len(n.Queues))
	}
	fmt.Fprintln(w)
	header := false
	for _, n := range nodes {
		for _, q := range n.Queues {
			if !all && q.Lag == 0 && q.Pending == 0 && !q.Rewound {
				continue
			}
			if !header {
				fmt.Fprintln(w, "NODE\tQUEUE\tHEAD\tACKED\tLANDED\tLAG\tPENDING")
				header = true
			}
			note := ""
			if q.Rewound {
				note = "\tWENT BACK: paused"
			}
			if q.Problem != "" {
				note = "\tUNREADABLE PART RECORD: landed up to it: " + q.Problem
			}
			fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%d%s\n", n.Node, q.Queue, q.Head, q.Acked, q.Landed, q.Lag, q.Pending, note)
		}
	}
	if !header {
		fmt.Fprintln(w, "every queue landed, no pending parts (--all lists every queue that holds anything)")
	}
	_ = w.Flush()
	for _, n := range nodes {
		if len(n.Incarnations) < 2 {
			continue
		}
		var parts []string
		for _, inc := range n.Incarnations {
			cur := ""
			if inc.Incarnation == n.Incarnation {
				cur = ", current"
			}
			parts = append(parts, fmt.Sprintf("%s (generation %d, first seen %s, %d rows, %d pending%s)",
				inc.Incarnation, inc.Generation, inc.FirstSeen.UTC().Format(time.RFC3339), inc.Rows, inc.Pending, cur))
		}
		fmt.Fprintf(out, "\n%s incarnations: %s\n", n.Node, strings.Join(parts, "; "))
	}
	for _, n := range nodes {
		for _, g := range n.Gaps {
			fmt.Fprintf(out, "\n%s LOST TO THE DATABASE: incarnation %s queue %d offsets %d..%d, %d entries trimmed before they landed (found %s)\n",
				n.Node, g.Incarnation, g.Queue, g.First, g.Last, g.Missing, g.FoundAt.UTC().Format(time.RFC3339))
		}
	}
}
