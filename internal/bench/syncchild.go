package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/shardis/shardis/internal/stack"
)

// The sync section runs `shardis sync` in a process of its own, as users
// run it: in the benchmark's process its goroutines shared one Go
// scheduler with the 64 reserving clients, which no deployment does. The
// child opens the stack `shardis sync` opens (stack.OpenSync, the shipped
// sync settings) over BenchConfig.

// SyncEnv names the environment variable that makes the benchmark binary a
// sync child: its value is the nodes' addresses, comma-separated (like
// nodeNames), a space, then the PostgreSQL DSN. SyncProfileEnv, when set
// too, names a file the child writes a CPU profile of its whole life to.
const (
	SyncEnv        = "SHARDIS_BENCH_SYNC"
	SyncProfileEnv = "SHARDIS_BENCH_SYNC_PROFILE"
)

// SyncChild runs the sync child when SyncEnv is set and then exits the
// process; it returns at once otherwise. The child lands the nodes' redo
// logs in the database, prints "syncing" on stdout once it started, and
// stops when its stdin closes or on SIGTERM.
func SyncChild() {
	runChild("sync child", SyncEnv, SyncProfileEnv, syncChild)
}

func syncChild(v string) error {
	addrs, dsn, ok := strings.Cut(v, " ")
	if !ok || addrs == "" || dsn == "" {
		return fmt.Errorf("%s: want the nodes' addresses, a space, then the DSN", SyncEnv)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	cfg := BenchConfig(strings.Split(addrs, ","))
	cfg.Sync.DSN = dsn
	st, err := stack.OpenSync(ctx, cfg, stack.SyncOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	defer st.Close()
	st.Syncer.Start()
	fmt.Println("syncing")
	select {
	case <-ctx.Done():
	case <-untilStdinCloses():
	}
	return nil
}

// startSyncProc starts a sync child over addrs landing in the database at
// dsn, and waits until it started. profile, when not "", is where the
// child writes its CPU profile (complete once Stop returns).
func startSyncProc(addrs []string, dsn, profile string) (*childProc, error) {
	child, l, err := startChild("sync child", SyncEnv+"="+strings.Join(addrs, ",")+" "+dsn, SyncProfileEnv+"="+profile)
	if err != nil {
		return nil, err
	}
	if l != "syncing" {
		child.Stop()
		return nil, fmt.Errorf("sync child said %q instead of syncing", l)
	}
	return child, nil
}
