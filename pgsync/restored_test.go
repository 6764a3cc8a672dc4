package pgsync_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/pgsync"
)

// Parts a node hands out again after it went back to an older copy of
// its data and was accepted (a new incarnation): a lost row follows the
// part again, a settled row keeps its state and the node's other state is
// a conflict, logged and counted.

// copyFile copies the file from to to.
func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// snapshotN2 saves n2's data and returns a copy of its dump file, to
// restart n2 from later (restartN2).
func (e *env) snapshotN2(t *testing.T, ctx context.Context) string {
	t.Helper()
	if err := e.raw["n2"].Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(t.TempDir(), "dump.rdb")
	copyFile(t, filepath.Join(e.srv["n2"].Dir(), "dump.rdb"), snap)
	return snap
}

// restartN2 kills n2 and restarts it from the dump file snap, or empty
// when snap is "".
func (e *env) restartN2(t *testing.T, snap string) {
	t.Helper()
	e.srv["n2"].Kill()
	dump := filepath.Join(e.srv["n2"].Dir(), "dump.rdb")
	if snap == "" {
		if err := os.Remove(dump); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	} else {
		copyFile(t, snap, dump)
	}
	e.srv["n2"].Restart()
}

// orderOnN2 returns an order id whose home node is n2.
func (e *env) orderOnN2(t *testing.T) string {
	t.Helper()
	homes, err := inventory.NewHomes(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if o := fmt.Sprintf("o%d", i); homes.Home(o) == "n2" {
			return o
		}
	}
}

// confirmedN reserves n orders prefix-0.. of 1 unit of one/d each
// (reserveN) and confirms them.
func (e *env) confirmedN(t *testing.T, ctx context.Context, prefix string, n int) {
	t.Helper()
	e.reserveN(prefix, "one", "d", n, time.Minute)
	for i := range n {
		if _, err := e.inv.Confirm(ctx, fmt.Sprintf("%s-%d", prefix, i)); err != nil {
			t.Fatal(err)
		}
	}
}

// goBackN2 snapshots n2, runs after (writes the copy will lack), waits
// until skus are consistent and the peers' marks passed those writes,
// then restarts n2 from the snapshot and accepts it once it is refused as
// gone back.
func (e *env) goBackN2(t *testing.T, ctx context.Context, skus [][2]string, after func()) {
	t.Helper()
	snap := e.snapshotN2(t, ctx)
	after()
	e.waitConsistent(15*time.Second, skus, nil)
	time.Sleep(2 * time.Second) // the peers' marks pass the writes
	e.restartN2(t, snap)
	e.acceptWentBack(t, ctx, "n2 refused as gone back")
}

// acceptWentBack waits until the router refuses n2 for its data, accepts
// it and waits until it is usable.
func (e *env) acceptWentBack(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	n2, _ := e.stack.Router.Node("n2")
	waitFor(t, 15*time.Second, what, func() bool {
		r := n2.DownReason()
		return errors.Is(r, node.ErrRolledBack) || errors.Is(r, node.ErrDataLost)
	})
	if _, err := e.stack.Router.AcceptNode(ctx, "n2"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "n2 usable", n2.Usable)
}

// A confirm landed, then n2 goes back to a snapshot from before it, is
// accepted, and the order expires there: the database keeps the row
// confirmed (a settled row never moves), and the node's other state is
// counted as a conflict. Before, nothing told the operator.
func TestRestoredNodeConflictsWithASettledRow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e.loadStock("one", "d", 100)
	order := e.orderOnN2(t)
	// 8 s: the sync's first landing and n2's snapshot come before the
	// Confirm (3 s ran out on a loaded machine); n2's copy expires later
	if _, err := e.inv.Reserve(ctx, order, []inventory.Item{{Route: "one", SKU: "d", Quantity: 3}}, "", 8*time.Second); err != nil {
		t.Fatal(err)
	}
	m := pgsync.NewMetrics(nil)
	e.syncer(m)
	skus := [][2]string{{"one", "d"}}
	e.waitConsistent(15*time.Second, skus, nil)
	e.goBackN2(t, ctx, skus, func() {
		if _, err := e.inv.Confirm(ctx, order); err != nil {
			t.Fatal(err)
		}
	})
	waitFor(t, 20*time.Second, "the conflict counted", func() bool { return m.Conflicts() == 1 })
	waitFor(t, 20*time.Second, "the part cancelled on n2", func() bool {
		ps, err := e.nodeParts(ctx, "n2")
		if err != nil {
			return false
		}
		for _, p := range ps {
			if p.order == order {
				return p.state == "cancelled"
			}
		}
		return false
	})
	time.Sleep(time.Second) // settle passes
	rows, err := e.dbRows(ctx, "n2")
	if err != nil {
		t.Fatal(err)
	}
	for id, r := range rows {
		if r.state != "confirmed" {
			t.Errorf("row of %s: %+v, want it still confirmed", id, r)
		}
	}
	if len(rows) != 1 {
		t.Errorf("rows of n2: %+v, want the one part's", rows)
	}
	if got := m.Conflicts(); got != 1 {
		t.Errorf("conflicts counted: %v, want 1", got)
	}
}

// A landed pending part that its node lost (accepted empty: the row is
// lost) comes back when the node is restored from a backup and accepted
// again: its row is pending again and follows the part, so a Confirm
// reaches the database. Before, the row stayed lost.
func TestLostPartComesBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e.loadStock("one", "d", 100)
	if _, err := e.inv.Reserve(ctx, "held", []inventory.Item{{Route: "one", SKU: "d", Quantity: 3}}, "", time.Hour); err != nil {
		t.Fatal(err)
	}
	m := pgsync.NewMetrics(nil)
	e.syncer(m)
	skus := [][2]string{{"one", "d"}}
	e.waitConsistent(15*time.Second, skus, nil)
	n2, _ := e.stack.Router.Node("n2")
	inc1 := n2.Incarnation()
	backup := e.snapshotN2(t, ctx)
	time.Sleep(1500 * time.Millisecond)
	e.restartN2(t, "") // restarts empty, accepted: the row becomes lost
	e.acceptWentBack(t, ctx, "n2 refused (empty)")
	inc2 := n2.Incarnation()
	waitFor(t, 15*time.Second, "the row lost", func() bool { return m.Lost() == 1 })
	time.Sleep(1500 * time.Millisecond)
	e.restartN2(t, backup) // restored from its backup, accepted again
	e.acceptWentBack(t, ctx, "n2 refused (restored backup)")
	waitFor(t, 15*time.Second, "the new incarnation landed", func() bool { return m.NewIncarnations("n2") == 2 })
	if _, err := e.inv.Confirm(ctx, "held"); err != nil {
		t.Fatalf("Confirm: %v", err)
	}
	waitFor(t, 15*time.Second, "the row confirmed", func() bool {
		rows, err := e.dbRows(ctx, "n2")
		if err != nil {
			return false
		}
		for _, r := range rows {
			if r.state == "confirmed" {
				return true
			}
		}
		return false
	})
	if mm, err := e.mismatches(ctx, skus, map[string]bool{inc1: true, inc2: true}); err != nil || len(mm) > 0 {
		t.Errorf("mismatches: %v, %v", mm, err)
	}
}
