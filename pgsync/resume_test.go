package pgsync_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardis/shardis/pgsync"
)

// A restarted sync logs, per node, the committed position of every queue
// it resumes from: the positions the database holds.
func TestSyncLogsResumePositions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	skus := [][2]string{{"all", "a"}}
	e.loadStock("all", "a", 1000)
	e.reserveN("first", "all", "a", 12, time.Minute)
	first := e.openSyncer(quiet(), pgsync.Settings{Metrics: pgsync.NewMetrics(nil)})
	e.waitConsistent(10*time.Second, skus, nil)
	first.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	want := map[string]string{} // node → "0:off 1:off …"
	for _, name := range e.names {
		rows, _ := e.pool.Query(ctx, "SELECT queue, redo_offset FROM sync_positions WHERE node = $1", name)
		pos := make([]int64, e.cfg.Inventory.RedoQueues)
		var q int32
		var off int64
		if _, err := pgx.ForEachRow(rows, []any{&q, &off}, func() error { pos[q] = off; return nil }); err != nil {
			t.Fatal(err)
		}
		var parts []string
		for q, off := range pos {
			parts = append(parts, fmt.Sprintf("%d:%d", q, off))
		}
		want[name] = strings.Join(parts, " ")
	}

	e.reserveN("second", "all", "a", 6, time.Minute)
	var logs logBuf
	e.openSyncer(logs.logger(), pgsync.Settings{Metrics: pgsync.NewMetrics(nil)})
	e.waitConsistent(10*time.Second, skus, nil)
	got := map[string]string{}
	for _, l := range logs.lines("resuming the redo log from the committed positions") {
		got[fmt.Sprint(l["node"])] = fmt.Sprint(l["positions"])
	}
	for _, name := range e.names {
		if got[name] != want[name] {
			t.Errorf("node %s: logged resume positions %q, the database holds %q", name, got[name], want[name])
		}
	}
	if t.Failed() {
		t.Logf("log:\n%s", logs.String())
	}
}
