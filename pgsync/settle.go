package pgsync

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/shardis/shardis/inventory"
)

// settleChunk is how many landed pending parts one settle step re-checks.
const settleChunk = 1000

// settleKey orders landed rows of a node: the pass walks them in
// (incarnation, queue, offset) order.
type settleKey struct {
	inc   string
	queue int32
	off   int64
}

// The statements of a settle step.
const (
	sqlPending = `SELECT incarnation, queue, redo_offset, part_id, order_id, coalesce(held_by, incarnation),
  (SELECT coalesce(max(version), 0) FROM shardis_sync_schema) FROM stock_movements
WHERE node = $1 AND state = 'pending' AND (incarnation, queue, redo_offset) > ($2, $3, $4)
ORDER BY incarnation, queue, redo_offset LIMIT $5`
	// sqlSettle writes what a step read, only to a row still pending and
	// still held by the incarnation whose state it read: a landing that
	// handed the row to a later incarnation since (held_by) leaves it to
	// the next pass, which reads the part there.
	sqlSettle = `UPDATE stock_movements m SET state = u.state, settled_at = u.settled, reason = u.reason, updated_at = now()
FROM unnest($2::text[], $3::int[], $4::bigint[], $5::text[], $6::timestamptz[], $7::text[], $8::text[]) AS u(inc, q, off, state, settled, reason, holder)
WHERE m.node = $1 AND m.incarnation = u.inc AND m.queue = u.q AND m.redo_offset = u.off AND m.state = 'pending'
  AND coalesce(m.held_by, m.incarnation) = u.holder`
)

// settleLoop keeps the node's landed pending rows' states current until
// ctx is done (doc.go, "Settled states"): it walks every pending row in
// chunks at start, when the node's settled log had a gap or the node is at
// another incarnation, and every settle_walk_interval; between walks it
// follows the log every settle_interval, re-reading only the parts its
// entries name.
func (w *worker) settleLoop(ctx context.Context) {
	var from settleKey
	var still int64
	var f follower
	walking, walked := true, time.Time{}
	for ctx.Err() == nil {
		if !walking {
			read, err := w.followStep(ctx, &f)
			switch {
			case err != nil:
				if !w.retry(ctx, err) {
					return
				}
				continue
			case f.walkDue || time.Since(walked) >= w.s.set.SettleWalkInterval:
				walking, f.walkDue = true, false
				continue
			case read < settleChunk:
				if !sleep(ctx, w.s.set.SettleInterval) {
					return
				}
			}
			continue
		}
		if from == (settleKey{}) {
			w.unreadP.startWalk()
			if f.inc == "" {
				w.startFollowing(ctx, &f) // before the walk: it covers what came before
			}
		}
		scanned, pending, err := w.settleStep(ctx, &from)
		if err != nil {
			if !w.retry(ctx, err) {
				return
			}
			continue
		}
		if scanned < 0 { // another instance holds this node's settle pass
			from, still = settleKey{}, 0
			if !sleep(ctx, w.s.set.SettleInterval) {
				return
			}
			continue
		}
		still += pending
		if scanned < settleChunk {
			w.unreadP.sweep() // what the walk did not find unreadable again is not (or not pending)
			w.s.m.unreadableParts.WithLabelValues(w.node).Set(float64(w.unreadP.len()))
			w.s.m.unsettled.WithLabelValues(w.node).Set(float64(still))
			from, still = settleKey{}, 0
			walking, walked = false, time.Now()
			w.s.m.walks.WithLabelValues(w.node).Inc()
		}
	}
}

// settleTx begins a settle step's transaction and tries the node's settle
// lock in it: mine is false (and tx rolled back) when another instance
// holds it. started is when the step began (dbHealth.observe).
func (w *worker) settleTx(ctx context.Context) (tx pgx.Tx, started time.Time, mine bool, err error) {
	started = time.Now()
	tx, err = w.s.pool.Begin(ctx)
	if err != nil {
		return nil, started, false, w.settleFailed(stageDB, err, started)
	}
	// with migrateLock shared, tried: a migration under way leaves the
	// step for later, as another instance's lock does (sqlLockQueues)
	if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock_shared($2::bigint) AND pg_try_advisory_xact_lock($1, -1)",
		w.key, migrateLock).Scan(&mine); err != nil {
		w.s.rollback(ctx, tx)
		return nil, started, false, w.settleFailed(stageDB, err, started)
	}
	w.s.health.observe(nil, started)
	if !mine {
		w.s.rollback(ctx, tx)
		w.settle.ok() // the database answered: another instance does this pass
	}
	return tx, started, mine, nil
}

// settleFailed counts a settle step's failure at stage and returns err.
// A schema at another version is not one: the database answered.
func (w *worker) settleFailed(stage string, err error, started time.Time) error {
	if errors.Is(err, ErrSchema) {
		return err
	}
	w.s.m.errors.WithLabelValues(w.node, stage).Inc()
	if stage == stageDB {
		w.s.health.observe(err, started)
	}
	w.settle.fail(err)
	return err
}

// settleStep re-checks up to settleChunk landed pending parts after from,
// in one transaction under the node's settle lock (another instance that
// holds it does this pass: then scanned is -1). It moves from past them
// and returns how many it scanned and how many are still pending.
func (w *worker) settleStep(ctx context.Context, from *settleKey) (scanned, pending int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, w.s.set.StepTimeout)
	defer cancel()
	tx, started, mine, err := w.settleTx(ctx)
	if err != nil {
		return 0, 0, err
	}
	if !mine {
		return -1, 0, nil
	}
	defer w.s.rollback(ctx, tx)
	list, err := pendingRows(ctx, tx, sqlPending, w.node, from.inc, from.queue, from.off, settleChunk)
	if err != nil {
		return 0, 0, w.settleFailed(stageDB, err, started)
	}
	upd, pending, err := w.settleList(ctx, tx, list, started)
	if err != nil {
		return 0, 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, 0, w.settleFailed(stageDB, err, started)
	}
	w.settle.ok()
	w.settled(upd)
	if len(list) > 0 {
		*from = list[len(list)-1].key
	}
	return int64(len(list)), pending, nil
}

// settleList re-reads list's parts on the node and writes the states of
// the ones that settled (sqlSettle) in tx; it returns what it wrote and
// how many are still pending. A failure is counted (settleFailed).
func (w *worker) settleList(ctx context.Context, tx pgx.Tx, list []pendingRow, started time.Time) (upd settleUpdate, pending int64, err error) {
	if len(list) == 0 {
		return upd, 0, nil
	}
	if upd, pending, err = w.recheck(ctx, list); err != nil {
		return upd, 0, w.settleFailed(stageSettle, err, started)
	}
	if len(upd.st) > 0 {
		if _, err := tx.Exec(ctx, sqlSettle, w.node, upd.incs, upd.qs, upd.offs, upd.st, upd.settled, upd.why, upd.holders); err != nil {
			return upd, 0, w.settleFailed(stageDB, err, started)
		}
	}
	return upd, pending, nil
}

// settled counts and logs what a committed step wrote (upd).
func (w *worker) settled(upd settleUpdate) {
	for _, s := range upd.st {
		w.s.m.settled.WithLabelValues(w.node, s).Inc()
	}
	if upd.lost > 0 {
		w.s.m.lost.WithLabelValues(w.node).Add(float64(upd.lost))
		w.s.log.Error("landed pending parts are gone from their node, which is at a new incarnation: state set to lost",
			"node", w.node, "incarnation", upd.nodeInc, "parts", upd.lost)
	}
}

// pendingRow is one landed pending part settleStep re-checks.
type pendingRow struct {
	key         settleKey
	part, order string
	holder      string // the incarnation that last handed the part out
}

// pendingRows reads the landed pending parts query selects (sqlPending:
// up to a chunk of a node's after a key, in key order; sqlPendingParts:
// those of a node among some parts), inside tx, under migrateLock
// (settleTx). Each row carries the schema version: rows read from a
// database at another version are an error wrapping ErrSchema (with none,
// the step writes nothing).
func pendingRows(ctx context.Context, tx pgx.Tx, query string, args ...any) ([]pendingRow, error) {
	var list []pendingRow
	var r pendingRow
	version := SchemaVersion
	rows, _ := tx.Query(ctx, query, args...)
	_, err := pgx.ForEachRow(rows, []any{&r.key.inc, &r.key.queue, &r.key.off, &r.part, &r.order, &r.holder, &version}, func() error {
		list = append(list, r)
		return nil
	})
	if err == nil && version != SchemaVersion {
		err = schemaChanged(version)
	}
	return list, err
}

// settleUpdate is sqlSettle's arguments for the parts of one step that
// are no longer pending, column by column, with the step's tallies.
type settleUpdate struct {
	incs, st []string
	holders  []string // the incarnation each row was held by when read
	qs       []int32
	offs     []int64
	settled  []pgtype.Timestamptz
	why      []pgtype.Text
	lost     int    // parts gone from a node at a new incarnation
	nodeInc  string // the node's incarnation when it was read
}

// recheck reads the node's state of every part of list and returns the
// update for those no longer pending, and how many still are. A part the
// node no longer holds is "expired" under the incarnation that landed it
// (it outlived inventory.retention) and "lost" under a newer one. A part
// whose record is there but cannot be read, or is gone while the node
// lists the part pending or set aside (inventory.PartUnreadable: its
// record lost while it was pending, its units reserved still), is left
// pending, and reported (noteUnreadableParts): the others are written as
// usual.
func (w *worker) recheck(ctx context.Context, list []pendingRow) (upd settleUpdate, pending int64, err error) {
	// each part with its row's place: a part whose record is gone while
	// the node lists it pending (by that place, or by id) or set aside
	// reads unreadable, not missing (its units are reserved still), and
	// stays pending (inventory.PartStatesAt)
	parts := make([]inventory.RedoCursor, len(list))
	for i, r := range list {
		parts[i] = inventory.RedoCursor{Queue: int(r.key.queue), After: r.key.off, PartID: r.part}
	}
	nodeInc, states, err := w.s.inv.PartStatesAt(ctx, w.node, parts)
	if err != nil {
		return upd, 0, err
	}
	upd.nodeInc = nodeInc
	w.noteUnreadableParts(list, states)
	cancelled := map[string]cancelledPart{} // landed rows: their time is not needed
	for i, s := range states {
		if s.State == inventory.PartCancelled {
			cancelled[list[i].part] = cancelledPart{order: list[i].order}
		}
	}
	reasons := w.s.cancelReasons(ctx, cancelled)
	for i, s := range states {
		state := string(s.State)
		switch s.State {
		case inventory.PartPending, inventory.PartUnreadable:
			pending++ // an unreadable one stays as it is: its state is not known
			continue
		case inventory.PartMissing:
			state = "expired"
			if list[i].holder != nodeInc {
				state = "lost"
				upd.lost++
			}
		}
		upd.incs = append(upd.incs, list[i].key.inc)
		upd.holders = append(upd.holders, list[i].holder)
		upd.qs = append(upd.qs, list[i].key.queue)
		upd.offs = append(upd.offs, list[i].key.off)
		upd.st = append(upd.st, state)
		upd.settled = append(upd.settled, ts(s.SettledAt))
		upd.why = append(upd.why, reasonText(reasons[list[i].part]))
	}
	return upd, pending, nil
}
