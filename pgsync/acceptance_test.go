package pgsync_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/pgsync"
)

// TestSyncAcceptance is the acceptance run: reserve/confirm/cancel
// load on three AOF redis-server nodes while two sync instances run (one
// in-process, one a subprocess that is kill -9'd at random moments and
// restarted), one node is kill -9'd and restarted, and PostgreSQL is
// kill -9'd and restarted. After healing, every part of every node is one
// row with its final state, the totals per SKU equal the nodes' counters,
// every position is at its queue's head, and nothing was trimmed before it
// landed.
func TestSyncAcceptance(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("acceptance run: skipped with -short")
	}
	e := newEnvOwnPG(t, true)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	skus := [][2]string{{"all", "a"}, {"all", "b"}, {"all", "c"}, {"one", "d"}}
	for _, s := range skus {
		e.loadStock(s[0], s[1], 1_000_000)
	}
	m := pgsync.NewMetrics(nil)
	e.syncer(m)
	logPath := filepath.Join(t.TempDir(), "sync-child.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	child := e.startChild(logf)

	// The load: 4 clients for 8s.
	var (
		stop                         atomic.Bool
		wg                           sync.WaitGroup
		reserved, confirmed, aborted atomic.Int64
	)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(w+2)))
			for i := 0; !stop.Load(); i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				id := fmt.Sprintf("w%d-%d", w, i)
				items := []inventory.Item{{Route: skus[r.IntN(4)][0], SKU: skus[r.IntN(4)][1], Quantity: int64(1 + r.IntN(5))}}
				items[0].Route = map[string]string{"a": "all", "b": "all", "c": "all", "d": "one"}[items[0].SKU]
				if r.IntN(3) == 0 && items[0].SKU != "b" {
					items = append(items, inventory.Item{Route: "all", SKU: "b", Quantity: 1})
				}
				if _, err := e.inv.Reserve(ctx, id, items, "", 2*time.Second); err == nil {
					reserved.Add(1)
					switch x := r.IntN(10); {
					case x < 5:
						if _, err := e.inv.Confirm(ctx, id); err == nil {
							confirmed.Add(1)
						}
					case x < 8:
						_, _ = e.inv.Cancel(ctx, id)
					default: // left to expire: the reconciler cancels it
					}
				} else {
					aborted.Add(1)
					time.Sleep(5 * time.Millisecond)
				}
				cancel()
			}
		}()
	}

	// The invariant that keeps Redis from trimming what the database does
	// not hold, sampled all along: a queue's acknowledged offset, read
	// first, is never past the committed position read after it.
	var ackViolations []string
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		for !stop.Load() {
			if v := e.ackedNotPastLanded(); v != "" && len(ackViolations) < 10 {
				ackViolations = append(ackViolations, v)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()

	// The faults, at random moments.
	pause := func(lo, hi time.Duration) { time.Sleep(lo + time.Duration(rng.Int64N(int64(hi-lo)))) }
	killSync := func() {
		child.kill()
		t.Logf("kill -9 of the sync subprocess at %v", time.Now().Format("15:04:05.000"))
		pause(50*time.Millisecond, 400*time.Millisecond)
		child = e.startChild(logf)
	}
	start := time.Now()
	pause(500*time.Millisecond, 1200*time.Millisecond)
	killSync()
	pause(300*time.Millisecond, 800*time.Millisecond)
	e.srv["n2"].Kill()
	t.Logf("kill -9 of node n2")
	pause(500*time.Millisecond, time.Second)
	e.srv["n2"].Restart()
	pause(200*time.Millisecond, 600*time.Millisecond)
	killSync()
	pause(300*time.Millisecond, 800*time.Millisecond)
	if err := e.pg.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Logf("kill -9 of PostgreSQL")
	pause(300*time.Millisecond, 800*time.Millisecond)
	if err := e.pg.Restart(); err != nil {
		t.Fatal(err)
	}
	pause(200*time.Millisecond, 600*time.Millisecond)
	killSync()
	// 8 s of load, longer on a loaded machine until 100 orders were
	// reserved (at most 30 s: the check below still wants them)
	for time.Since(start) < 8*time.Second || (reserved.Load() < 100 && time.Since(start) < 30*time.Second) {
		time.Sleep(50 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	<-samplerDone
	if len(ackViolations) > 0 {
		t.Errorf("acknowledged past the committed position:\n  %s", strings.Join(ackViolations, "\n  "))
	}
	t.Logf("load: %d orders reserved (%d confirmed), %d reserves failed", reserved.Load(), confirmed.Load(), aborted.Load())
	if reserved.Load() < 100 {
		t.Fatalf("only %d orders were reserved: the load did not run", reserved.Load())
	}

	// Healing: the reconciler cancels what was left to expire; both
	// syncs land the rest and follow every part to its final state.
	waitFor(t, 20*time.Second, "every reservation to be settled on the nodes", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, s := range skus {
			lvl, err := e.inv.GetStock(ctx, s[0], s[1])
			if err != nil || lvl.Reserved != 0 {
				return false
			}
		}
		return true
	})
	e.waitConsistent(30*time.Second, skus, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var rows, unsettled int
	if err := e.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state NOT IN ('confirmed', 'cancelled'))
FROM stock_movements`).Scan(&rows, &unsettled); err != nil {
		t.Fatal(err)
	}
	if unsettled != 0 {
		t.Errorf("%d of %d rows are not confirmed or cancelled after healing", unsettled, rows)
	}
	if m.Trimmed() != 0 {
		t.Errorf("%v entries were trimmed before they landed", m.Trimmed())
	}
	child.kill()
	logs, _ := os.ReadFile(logPath)
	if strings.Contains(string(logs), "trimmed before they landed") || strings.Contains(string(logs), "WENT BACK") {
		t.Errorf("the sync subprocess reported lost entries:\n%s", logs)
	}
	// Most rows come from one instance or the other; both must have
	// landed some (they share the work under the advisory locks).
	t.Logf("%d rows; the in-process instance landed %v of them; subprocess log:\n%s", rows, m.Landed(), tailLines(string(logs), 15))
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// ackedNotPastLanded reads every node's acknowledged offsets, then the
// committed positions, and describes a queue acknowledged past its
// position ("" when there is none, or when a node or the database cannot
// be read right now).
func (e *env) ackedNotPastLanded() string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, name := range e.names {
		n, _ := e.stack.Router.Node(name)
		inc := n.Incarnation()
		acked, err := e.raw[name].HGetAll(ctx, "inv:redo:acked").Result()
		if err != nil {
			continue
		}
		pos := map[string]int64{}
		rows, _ := e.pool.Query(ctx, "SELECT queue, redo_offset FROM sync_positions WHERE node = $1 AND incarnation = $2", name, inc)
		var q int32
		var off int64
		if _, err := pgx.ForEachRow(rows, []any{&q, &off}, func() error {
			pos[inventory.RedoLogKey(int(q))] = off
			return nil
		}); err != nil {
			continue
		}
		for key, a := range acked {
			if !strings.HasPrefix(key, "inv:redo:") {
				// the hash's incarnation field (redoAckedInc), not a queue:
				// an incarnation of decimal digits only once read as one
				continue
			}
			if v, _ := strconv.ParseInt(a, 10, 64); v > pos[key] {
				return fmt.Sprintf("%s %s acknowledged %d, landed %d", name, key, v, pos[key])
			}
		}
	}
	return ""
}
