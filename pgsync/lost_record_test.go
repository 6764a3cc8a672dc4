package pgsync_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/pgsync"
)

// lostPart is a part with a record of its own whose record a test
// deletes while the part is pending.
type lostPart struct {
	node, id, order string
	p               nodePart
	dump            string // the record, as DUMP returned it before the delete
}

// partOfOrder returns a part of order with a record of its own (not
// inline) whose redo entry is in another queue than not's (nil: any).
func (e *env) partOfOrder(ctx context.Context, order string, not *lostPart) lostPart {
	e.t.Helper()
	for _, name := range e.names {
		parts, err := e.nodeParts(ctx, name)
		if err != nil {
			e.t.Fatal(err)
		}
		for id, p := range parts {
			if not != nil && name == not.node && p.queue == not.p.queue {
				continue
			}
			if p.order == order && e.raw[name].Exists(ctx, inventory.PartKey(id)).Val() == 1 {
				return lostPart{node: name, id: id, order: order, p: p}
			}
		}
	}
	e.t.Fatalf("order %s has no part with a record of its own off %+v's queue", order, not)
	return lostPart{}
}

// loseRecord deletes lp's part record, keeping what DUMP read of it.
func (e *env) loseRecord(ctx context.Context, lp *lostPart) {
	e.t.Helper()
	key := inventory.PartKey(lp.id)
	d, err := e.raw[lp.node].Dump(ctx, key).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	lp.dump = d
	if err := e.raw[lp.node].Del(ctx, key).Err(); err != nil {
		e.t.Fatal(err)
	}
}

// repairRecord puts lp's record back as it was before loseRecord.
func (e *env) repairRecord(ctx context.Context, lp lostPart) {
	e.t.Helper()
	if err := e.raw[lp.node].Restore(ctx, inventory.PartKey(lp.id), 0, lp.dump).Err(); err != nil {
		e.t.Fatal(err)
	}
}

// recordOutlived makes part of order on node look like a part settled
// long ago whose records lived out their retention: its record, its
// order's (which may hold it inline) and its pending-index member (its
// row's place, and its id) go. A record gone while the index lists the
// part is a pending part's record lost, not this
// (TestRowOfAPartWhoseRecordIsLostWaitsForItsDecision).
func (e *env) recordOutlived(ctx context.Context, node, part, order string) {
	e.t.Helper()
	var q int32
	var off int64
	if err := e.pool.QueryRow(ctx, "SELECT queue, redo_offset FROM stock_movements WHERE node = $1 AND part_id = $2",
		node, part).Scan(&q, &off); err != nil {
		e.t.Fatal(err)
	}
	c := e.raw[node]
	if err := c.Del(ctx, inventory.PartKey(part), inventory.OrderKey(order)).Err(); err != nil {
		e.t.Fatal(err)
	}
	if err := c.ZRem(ctx, inventory.PendingKey, fmt.Sprintf("%d:%d", q, off), part).Err(); err != nil {
		e.t.Fatal(err)
	}
}

// nodeCounters returns node's reserved and confirmed counters of
// route/sku.
func (e *env) nodeCounters(ctx context.Context, node, route, sku string) (reserved, confirmed int64) {
	e.t.Helper()
	lvl, err := e.inv.GetStock(ctx, route, sku)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, n := range lvl.Nodes {
		if n.Node == node {
			return n.Reserved, n.Confirmed
		}
	}
	e.t.Fatalf("route %s sku %s has no node %s", route, sku, node)
	return 0, 0
}

// dbTotals returns the quantities of node's rows of route/sku that are
// pending and confirmed.
func (e *env) dbTotals(ctx context.Context, node, route, sku string) (pending, confirmed int64) {
	e.t.Helper()
	if err := e.pool.QueryRow(ctx, `SELECT coalesce(sum(quantity) FILTER (WHERE state = 'pending'), 0),
  coalesce(sum(quantity) FILTER (WHERE state = 'confirmed'), 0)
FROM stock_movements WHERE node = $1 AND route = $2 AND sku = $3`, node, route, sku).Scan(&pending, &confirmed); err != nil {
		e.t.Fatal(err)
	}
	return pending, confirmed
}

// lostPartsSetAside reserves two orders over several nodes and loses a
// part record of each while pending: early's before the sync reads its
// entry, late's once its row landed pending. It checks the rows wait
// (none for early, pending for late, each reported unreadable), confirms
// both orders and waits until both parts are set aside, their units
// reserved. It returns the sync's metrics and rowsWait, which checks the
// rows still wait.
func (e *env) lostPartsSetAside(ctx context.Context) (m *pgsync.Metrics, early, late lostPart, rowsWait func(when string)) {
	t := e.t
	t.Helper()
	for i := range 8 {
		e.loadStock("all", fmt.Sprintf("k%d", i), 1000)
	}
	e.loadStock("one", "b", 1000)
	reserve := func(order string, k int) {
		// an order over several nodes: its parts have records of their own
		items := []inventory.Item{{Route: "all", SKU: fmt.Sprintf("k%d", k), Quantity: 3},
			{Route: "all", SKU: fmt.Sprintf("k%d", k+3), Quantity: 2}, {Route: "one", SKU: "b", Quantity: 1}}
		if _, err := e.inv.Reserve(ctx, order, items, "", 6*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// early: its record lost before the sync reads its entry
	reserve("o-early", 0)
	early = e.partOfOrder(ctx, "o-early", nil)
	e.loseRecord(ctx, &early)
	// late: landed pending (and acknowledged), then its record lost
	reserve("o-late", 1)
	late = e.partOfOrder(ctx, "o-late", &early)
	m = pgsync.NewMetrics(nil)
	e.syncer(m)
	waitFor(t, 20*time.Second, "o-late's part landed pending", func() bool { return e.partRowState(ctx, late.node, late.id) == "pending" })
	e.loseRecord(ctx, &late)
	rowsWait = func(when string) {
		t.Helper()
		walks := m.Walks()
		waitFor(t, 20*time.Second, "three more walks", func() bool { return m.Walks() >= walks+3 })
		if st := e.partRowState(ctx, early.node, early.id); st != "" {
			t.Errorf("%s: part %s, its record lost before it landed, has a row %q; want none yet", when, early.id, st)
		}
		if st := e.partRowState(ctx, late.node, late.id); st != "pending" {
			t.Errorf("%s: row of part %s, its record lost after it landed: %q; want pending", when, late.id, st)
		}
	}
	rowsWait("record lost")
	// the landed part's record is read again on the re-check of pending
	// rows, a cadence of its own, not the walks': it may report after them
	// (a clean-clone CI saw the three walks end 0.6 s before it did)
	waitFor(t, 20*time.Second, "an unreadable queue on "+early.node+" and an unreadable part on "+late.node+" reported", func() bool {
		return m.UnreadableQueues(early.node) >= 1 && m.UnreadableParts(late.node) >= 1
	})
	// both orders paid: their parts with records confirmed, the lost ones
	// left (DATA LOSS), set aside once due, their units reserved
	for _, o := range []string{"o-early", "o-late"} {
		if _, err := e.inv.Confirm(ctx, o); err != nil && !errors.Is(err, inventory.ErrDataLoss) {
			t.Fatalf("Confirm %s: %v", o, err)
		}
	}
	for _, lp := range []lostPart{early, late} {
		waitFor(t, 30*time.Second, "part "+lp.id+" set aside", func() bool {
			stuck, err := e.inv.StuckParts(ctx, lp.node, 100)
			if err != nil {
				t.Fatal(err)
			}
			return slices.ContainsFunc(stuck, func(s inventory.StuckPart) bool { return s.PartID == lp.id })
		})
		if res, _ := e.nodeCounters(ctx, lp.node, lp.p.route, lp.p.sku); res < lp.p.qty {
			t.Fatalf("node %s reserves %d of %s; want at least part %s's %d", lp.node, res, lp.p.sku, lp.id, lp.p.qty)
		}
	}
	return m, early, late, rowsWait
}

// TestRowOfAPartWhoseRecordIsLostWaitsForItsDecision: a pending part
// whose record is lost (deleted, evicted) keeps its units reserved: the
// reconciler sets it aside, and once the record is repaired and the part
// retried it settles by its order's decision, here confirmed. The
// database follows: a row landed pending stays pending, an entry not
// landed yet stops its queue (reported as an unreadable record), and once
// the part is confirmed both rows are confirmed, the database's totals
// those of the node's counters. Before, the entry landed expired and the
// landed row was written expired, for good: the units counted neither
// held nor sold while the node held them reserved, then sold. And the
// repaired part was never confirmed: its redo entry, landed and
// acknowledged, was trimmed once the part was set aside, so the retry put
// it back under a place that named no part, and the reconciler dropped it
// from the pending index, its units reserved for good.
func TestRowOfAPartWhoseRecordIsLostWaitsForItsDecision(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	_, early, late, rowsWait := e.lostPartsSetAside(ctx)
	// a trim, as the reconciler's (every 5 passes): late's entry is
	// acknowledged, its record gone, its part no longer in the pending
	// index
	for _, lp := range []lostPart{early, late} {
		if _, err := e.inv.TrimRedoLog(ctx, lp.node, 0, 1000); err != nil {
			t.Fatal(err)
		}
	}
	rowsWait("set aside")
	// the records repaired, the parts retried: they settle by their
	// orders' decision
	for _, lp := range []lostPart{early, late} {
		e.repairRecord(ctx, lp)
		if ok, err := e.inv.RetryStuck(ctx, lp.node, lp.id); err != nil || !ok {
			t.Fatalf("RetryStuck %s: %v, %v", lp.id, ok, err)
		}
	}
	for _, lp := range []lostPart{early, late} {
		waitFor(t, 20*time.Second, "part "+lp.id+" confirmed on its node", func() bool {
			_, st, err := e.inv.PartStates(ctx, lp.node, []string{lp.id})
			return err == nil && st[0].State == inventory.PartConfirmed
		})
		waitFor(t, 20*time.Second, "part "+lp.id+"'s row confirmed", func() bool { return e.partRowState(ctx, lp.node, lp.id) == "confirmed" })
	}
	for _, lp := range []lostPart{early, late} {
		waitFor(t, 20*time.Second, "the database's totals of "+lp.node+"/"+lp.p.sku+" at the node's counters", func() bool {
			res, conf := e.nodeCounters(ctx, lp.node, lp.p.route, lp.p.sku)
			pend, sold := e.dbTotals(ctx, lp.node, lp.p.route, lp.p.sku)
			return res == pend && conf == sold
		})
	}
}

// TestRowOfAPartWhoseRecordIsLostLandsTheOperatorsDecision: a part whose
// record was lost while pending, set aside, is settled by an operator
// with the route, SKU and quantity its record held (SettleStuckLost, as
// pgsync's row of it, or the order, tells them): early's confirmed, late's
// cancelled. The database follows: early's entry, which stopped its
// queue, lands confirmed and the queue moves on (an order reserved after
// lands too), late's pending row is cancelled, and the database's totals
// are the node's counters. Before, nothing but a hand-made record settled
// such a part: the queue stayed stopped, the row pending, the units
// reserved.
func TestRowOfAPartWhoseRecordIsLostLandsTheOperatorsDecision(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	_, early, late, rowsWait := e.lostPartsSetAside(ctx)
	rowsWait("set aside")
	for _, s := range []struct {
		lp     lostPart
		action inventory.Action
	}{{early, inventory.Confirm}, {late, inventory.Cancel}} {
		res, err := e.inv.SettleStuckLost(ctx, s.lp.node, s.lp.id, s.action,
			inventory.StuckUnits{Route: s.lp.p.route, SKU: s.lp.p.sku, Quantity: s.lp.p.qty})
		if err != nil || res != "done" {
			t.Fatalf("SettleStuckLost(%s, %s) = %q, %v; want done", s.lp.id, s.action, res, err)
		}
	}
	// an order reserved after the stop: it lands behind early's entry
	after := []inventory.Item{{Route: "all", SKU: early.p.sku, Quantity: 1}}
	if _, err := e.inv.Reserve(ctx, "o-after", after, "", time.Minute); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "part "+early.id+"'s row confirmed", func() bool {
		return e.partRowState(ctx, early.node, early.id) == "confirmed"
	})
	waitFor(t, 20*time.Second, "part "+late.id+"'s row cancelled", func() bool {
		return e.partRowState(ctx, late.node, late.id) == "cancelled"
	})
	waitFor(t, 20*time.Second, "o-after's rows landed", func() bool {
		var n int
		if err := e.pool.QueryRow(ctx, "SELECT count(*) FROM stock_movements WHERE order_id = 'o-after'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
	for _, lp := range []lostPart{early, late} {
		waitFor(t, 20*time.Second, "the database's totals of "+lp.node+"/"+lp.p.sku+" at the node's counters", func() bool {
			res, conf := e.nodeCounters(ctx, lp.node, lp.p.route, lp.p.sku)
			pend, sold := e.dbTotals(ctx, lp.node, lp.p.route, lp.p.sku)
			return res == pend && conf == sold
		})
	}
}
