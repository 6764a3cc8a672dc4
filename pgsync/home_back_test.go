package pgsync_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/pgsync"
)

// An acknowledged reservation is cancelled by its user while the sync is
// not running (stopped, restarting, or lagging: the part is read only once
// it is cancelled). Then the order's home node (not the part's node) goes
// back to a copy of its data from before the order and is accepted: the
// order's record is lost with it, the part on n2 stays cancelled, its
// units available again. The sync reads the part cancelled, finds no
// record of the order on any node (every node read, topology stable) and
// takes it for a refused attempt's: no row. The part was a reservation,
// acknowledged and cancelled by its user; its row must land (reason
// unknown at worst), or the system of record misses it (found by a
// review): the home was accepted after the part was taken, so a missing
// record is no proof of a refused attempt (reason.go, acceptMargin).
func TestCancelledReservationLandsAfterItsHomeWentBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e.loadStock("one", "b", 10)
	homes, err := inventory.NewHomes(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	var order string
	for i := 0; order == ""; i++ {
		if id := fmt.Sprintf("hb-%d", i); homes.Home(id) != "n2" {
			order = id
		}
	}
	home := homes.Home(order)

	// the home's copy, from before the order
	if err := e.raw[home].Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(t.TempDir(), "dump.rdb")
	copyFile(t, filepath.Join(e.srv[home].Dir(), "dump.rdb"), snap)

	// reserved (acknowledged), then cancelled by the user: no sync runs
	if _, err := e.inv.Reserve(ctx, order, []inventory.Item{{Route: "one", SKU: "b", Quantity: 1}}, "", time.Minute); err != nil {
		t.Fatalf("Reserve %s: %v", order, err)
	}
	rec, err := inventory.ReadOrder(ctx, e.raw[home], order).Fields()
	if err != nil {
		t.Fatal(err)
	}
	token := rec["token"]
	if _, err := e.inv.Cancel(ctx, order); err != nil {
		t.Fatalf("Cancel %s: %v", order, err)
	}
	if rec, err = inventory.ReadOrder(ctx, e.raw[home], order).Fields(); err != nil || rec["status"] != string(inventory.OrderCancelled) {
		t.Fatalf("the order's record on %s: %v, %v", home, rec, err)
	}
	var part string
	waitFor(t, 10*time.Second, "the part cancelled on n2", func() bool {
		ps, err := e.nodeParts(ctx, "n2")
		if err != nil {
			return false
		}
		for id, p := range ps {
			if p.order == order && pgsync.PartToken(order, id) == token {
				part = id
				return p.state == "cancelled"
			}
		}
		return false
	})
	t.Logf("order %s (home %s, attempt %s): part %s on n2 cancelled by the user", order, home, token, part)

	// the home goes back to its copy (the order's record lost) and is accepted
	time.Sleep(2 * time.Second) // the peers' marks pass the writes
	e.srv[home].Kill()
	copyFile(t, snap, filepath.Join(e.srv[home].Dir(), "dump.rdb"))
	e.srv[home].Restart()
	hn, _ := e.stack.Router.Node(home)
	waitFor(t, 15*time.Second, home+" refused as gone back", func() bool {
		r := hn.DownReason()
		return errors.Is(r, node.ErrRolledBack) || errors.Is(r, node.ErrDataLost)
	})
	if _, err := e.stack.Router.AcceptNode(ctx, home); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, home+" usable", hn.Usable)
	if rec, _ := inventory.ReadOrder(ctx, e.raw[home], order).Fields(); len(rec) != 0 {
		t.Fatalf("the order's record survived the go-back: %v", rec)
	}

	// the sync starts (again) and lands n2's queue past the part
	m := pgsync.NewMetrics(nil)
	e.openSyncer(testLog(t), pgsync.Settings{Metrics: m})
	waitFor(t, 20*time.Second, "n2's queue landed past the part", func() bool {
		var n int
		err := e.pool.QueryRow(ctx, `SELECT count(*) FROM sync_positions WHERE node = 'n2' AND redo_offset > 0`).Scan(&n)
		return err == nil && n > 0
	})
	time.Sleep(time.Second)
	rows, err := e.dbRows(ctx, "n2")
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := rows[part]; !ok {
		t.Errorf("part %s of the acknowledged reservation %s of %s (cancelled by its user) has no row: "+
			"left out as a refused attempt's (skipped %v) because its home %s went back and lost the record",
			part, token, order, m.SkippedRefused(), home)
	} else if r.state != "cancelled" {
		t.Errorf("row of %s: %+v, want cancelled", part, r)
	}
}
