package pgsync_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/pgsync"
)

// Replays, rewinds and restored copies: what the sync must tell apart
// (each found by a review, failing before its fix).

// drainN2 waits until n2's redo log is acknowledged up to every head,
// then trims it empty (every entry is settled).
func (e *env) drainN2(t *testing.T, ctx context.Context) {
	t.Helper()
	waitFor(t, 10*time.Second, "n2's landed entries acknowledged", func() bool {
		fields, _ := e.raw["n2"].HGetAll(ctx, inventory.RedoOffsetsKey).Result()
		heads, _ := inventory.RedoHeads("n2", fields)
		acked, _ := e.raw["n2"].HGetAll(ctx, "inv:redo:acked").Result()
		for k, h := range heads {
			if acked[k] != strconv.FormatInt(h, 10) {
				return false
			}
		}
		return true
	})
	waitFor(t, 10*time.Second, "n2's redo log trimmed empty", func() bool {
		if _, err := e.inv.TrimRedoLog(ctx, "n2", 0, 1000); err != nil {
			t.Fatal(err)
		}
		left, err := e.inv.RedoLogLen(ctx, "n2")
		return err == nil && left == 0
	})
}

// partsOf returns n2's part id of each order.
func (e *env) partsOf(t *testing.T, ctx context.Context) map[string]nodePart {
	t.Helper()
	ps, err := e.nodeParts(ctx, "n2")
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// A position committed past entries trimmed before the sync read them
// (every entry past it was trimmed: here a position set back, README
// "Nothing trimmed before it landed") names inventory.RedoPartTrimmed as
// its part, so the rewind check still holds there: n2 then goes back under
// the position without a new incarnation (simulated as
// TestSyncLandsAndSettles does, by its head) and hands the offsets out
// again to new reservations, and the queue stays paused once the head
// passes the position again. Saved as "" (unknown), the position let the
// queue resume past it, and the reservations at the offsets up to it never
// got a row.
func TestTrimmedPositionStillSeesARewind(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	skus := [][2]string{{"one", "d"}}
	e.loadStock("one", "d", 100)
	e.confirmedN(t, ctx, "a", 3)
	st := e.openSyncer(quiet(), pgsync.Settings{Metrics: pgsync.NewMetrics(nil)})
	e.waitConsistent(15*time.Second, skus, nil)
	q := queueOf(t, e, "n2")
	key := inventory.RedoLogKey(q)
	head, err := e.raw["n2"].HGet(ctx, inventory.RedoOffsetsKey, key).Int64()
	if err != nil || head != 3 {
		t.Fatalf("head of %s: %d %v, want 3", key, head, err)
	}
	e.drainN2(t, ctx)
	st.Close()
	// the database restored from a backup older than its acknowledgements
	if _, err := e.pool.Exec(ctx, "UPDATE sync_positions SET redo_offset = 0, part_id = '' WHERE node = 'n2'"); err != nil {
		t.Fatal(err)
	}
	m := pgsync.NewMetrics(nil)
	e.openSyncer(testLog(t), pgsync.Settings{Metrics: m})
	var part string
	waitFor(t, 10*time.Second, "n2's position back at the head", func() bool {
		var off int64
		err := e.pool.QueryRow(ctx, "SELECT redo_offset, part_id FROM sync_positions WHERE node = 'n2' AND queue = $1", q).Scan(&off, &part)
		return err == nil && off == head
	})
	t.Logf("committed position of n2 queue %d: offset %d, part %q", q, head, part)

	// n2 goes back to a copy whose head is 1, unseen by rollback detection
	e.raw["n2"].HSet(ctx, inventory.RedoOffsetsKey, key, 1)
	waitFor(t, 5*time.Second, "the queue reported as gone back", func() bool { return m.Rewound("n2") == 1 })
	// and hands offsets 2..5 out to new reservations
	e.reserveN("b", "one", "d", 4, time.Minute)
	time.Sleep(2 * time.Second) // decide_wait, polls, settle passes

	parts := e.partsOf(t, ctx)
	rows, err := e.dbRows(ctx, "n2")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		order := fmt.Sprintf("b-%d", i)
		for id, p := range parts {
			if p.order != order {
				continue
			}
			if _, ok := rows[id]; !ok && m.Rewound("n2") == 0 {
				t.Errorf("reservation %s: part %s at offset %d has no row, and the queue is not paused (rewound metric 0)", order, id, p.offset)
			}
		}
	}
}

// A node restored from a copy whose redo log was landed, acknowledged
// and trimmed, and accepted (a new incarnation), is read from offset 0
// under the new incarnation: its trimmed offsets have rows under the old
// incarnation only, which count as landed (they were reported as trimmed
// before they landed).
func TestAcceptedCopyReportsNothingTrimmedUnlanded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	skus := [][2]string{{"one", "d"}}
	e.loadStock("one", "d", 100)
	e.confirmedN(t, ctx, "a", 3)
	m := pgsync.NewMetrics(nil)
	e.syncer(m)
	e.waitConsistent(15*time.Second, skus, nil)
	e.drainN2(t, ctx)
	n2, _ := e.stack.Router.Node("n2")
	inc1 := n2.Incarnation()
	e.goBackN2(t, ctx, skus, func() {
		e.reserveN("b", "one", "d", 1, time.Hour) // the copy is behind this
	})
	waitFor(t, 15*time.Second, "the new incarnation landed", func() bool { return m.NewIncarnations("n2") == 1 })
	e.waitConsistent(15*time.Second, skus, map[string]bool{inc1: true})
	if got := m.Trimmed(); got != 0 {
		t.Errorf("shardis_sync_trimmed_unlanded_entries_total = %v, want 0: every entry of the restored copy was landed (under %s)", got, inc1)
	}
}

// A lost row that a later incarnation hands out again is pending again,
// and is read against that incarnation (held_by): when the part's settled
// record outlives inventory.retention before the settle pass reads it (the
// sync was down), the row is expired, not lost (it kept its first
// incarnation and read as lost, counted and logged, though the node that
// holds the part now never lost it).
func TestPendingAgainRowExpires(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e.loadStock("one", "d", 100)
	if _, err := e.inv.Reserve(ctx, "held", []inventory.Item{{Route: "one", SKU: "d", Quantity: 3}}, "", time.Hour); err != nil {
		t.Fatal(err)
	}
	m := pgsync.NewMetrics(nil)
	st := e.openSyncer(testLog(t), pgsync.Settings{Metrics: m})
	skus := [][2]string{{"one", "d"}}
	e.waitConsistent(15*time.Second, skus, nil)
	backup := e.snapshotN2(t, ctx)
	time.Sleep(1500 * time.Millisecond)
	e.restartN2(t, "") // restarts empty, accepted: the row becomes lost
	e.acceptWentBack(t, ctx, "n2 refused (empty)")
	waitFor(t, 15*time.Second, "the row lost", func() bool { return m.Lost() == 1 })
	time.Sleep(1500 * time.Millisecond)
	e.restartN2(t, backup) // restored from its backup, accepted again
	e.acceptWentBack(t, ctx, "n2 refused (restored backup)")
	waitFor(t, 15*time.Second, "the new incarnation landed", func() bool { return m.NewIncarnations("n2") == 2 })
	var id string
	waitFor(t, 15*time.Second, "the row pending again", func() bool {
		rows, _ := e.dbRows(ctx, "n2")
		for pid, r := range rows {
			if r.order == "held" && r.state == "pending" {
				id = pid
				return true
			}
		}
		return false
	})
	st.Close() // the sync is down for a while
	if _, err := e.inv.Confirm(ctx, "held"); err != nil {
		t.Fatalf("Confirm: %v", err)
	}
	// retention passes: the settled part's record goes
	e.raw["n2"].Del(ctx, "inv:part:"+id)
	if _, ps, err := e.inv.PartStates(ctx, "n2", []string{id}); err != nil || ps[0].State != inventory.PartMissing {
		t.Fatalf("part %s on n2: %+v %v, want it missing", id, ps, err)
	}
	m2 := pgsync.NewMetrics(nil)
	e.openSyncer(testLog(t), pgsync.Settings{Metrics: m2})
	var state string
	waitFor(t, 15*time.Second, "the row settled", func() bool {
		err := e.pool.QueryRow(ctx, "SELECT state FROM stock_movements WHERE node = 'n2' AND part_id = $1", id).Scan(&state)
		return err == nil && state != "pending"
	})
	if state != "expired" || m2.Lost() != 0 {
		t.Errorf("row of %s: %s (lost counted %v), want expired: n2 still at the incarnation that handed it out, it outlived retention", id, state, m2.Lost())
	}
}

// A conflict is counted (and logged) once per part and incarnation
// (conflict_in): a replay of a restored node's redo log (its position set
// back: the database restored from a backup older than its positions,
// README "Exactly once") changes no row and counts nothing again.
func TestConflictCountedOncePerIncarnation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e.loadStock("one", "d", 100)
	order := e.orderOnN2(t)
	if _, err := e.inv.Reserve(ctx, order, []inventory.Item{{Route: "one", SKU: "d", Quantity: 3}}, "", time.Minute); err != nil {
		t.Fatal(err)
	}
	m := pgsync.NewMetrics(nil)
	st := e.openSyncer(testLog(t), pgsync.Settings{Metrics: m})
	skus := [][2]string{{"one", "d"}}
	e.waitConsistent(15*time.Second, skus, nil)
	e.goBackN2(t, ctx, skus, func() {
		if _, err := e.inv.Confirm(ctx, order); err != nil {
			t.Fatal(err)
		}
	})
	waitFor(t, 20*time.Second, "the conflict counted", func() bool { return m.Conflicts() == 1 })
	st.Close()
	n2, _ := e.stack.Router.Node("n2")
	if _, err := e.pool.Exec(ctx, "UPDATE sync_positions SET redo_offset = 0, part_id = '' WHERE node = 'n2' AND incarnation = $1",
		n2.Incarnation()); err != nil {
		t.Fatal(err)
	}
	e.openSyncer(testLog(t), pgsync.Settings{Metrics: m})
	time.Sleep(2 * time.Second)
	if got := m.Conflicts(); got != 1 {
		t.Errorf("conflicts counted: %v, want 1 (one part, one conflict; the replay changed nothing)", got)
	}
}
