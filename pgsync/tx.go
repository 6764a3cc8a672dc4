package pgsync

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardis/shardis/inventory"
)

// The statements of one landing transaction.
const (
	// sqlLockQueues takes the advisory lock of every queue it can; a queue
	// another instance is landing right now is left to it. With them it
	// takes migrateLock shared (tried, not waited for: a migration under
	// way holds it, and the queues are left for the next poll, as when
	// another instance holds them), so no migration commits before this
	// transaction does, and sqlPositions, the next statement, sees every
	// one committed before.
	sqlLockQueues = `SELECT q FROM unnest($2::int[]) AS q
WHERE pg_try_advisory_xact_lock_shared($3::bigint) AND pg_try_advisory_xact_lock($1, q)`
	// sqlPositions re-reads the committed positions under the locks, and
	// the schema version (one row with NULL positions when there are none).
	sqlPositions = `SELECT p.queue, p.redo_offset, p.part_id, s.version
FROM (SELECT coalesce(max(version), 0) AS version FROM shardis_sync_schema) AS s
LEFT JOIN sync_positions p ON p.node = $1 AND p.incarnation = $2 AND p.queue = ANY($3::int[])`
	// sqlInsert lands entries. A part already landed (a replay, or a part
	// a restored node still holds under a new incarnation) keeps its row:
	// only its state moves forward, but for a row lost or expired that a
	// later incarnation of its node hands out again, which is pending
	// again (the settle pass then follows it). A settled row stays
	// settled: one a later incarnation holds in another state is a
	// conflict (sqlConflicts). Every update by another incarnation's
	// landing sets held_by to it, which the settle pass re-reads a
	// pending row against.
	sqlInsert = `INSERT INTO stock_movements
  (node, incarnation, queue, redo_offset, part_id, order_id, route, sku, quantity, state, reserved_at, settled_at, reason)
SELECT $1, $2, u.queue, u.off, u.part, u.ord, u.route, u.sku, u.qty, u.state, u.at, u.settled, u.reason
FROM unnest($3::int[], $4::bigint[], $5::text[], $6::text[], $7::text[], $8::text[], $9::bigint[], $10::text[],
            $11::timestamptz[], $12::timestamptz[], $13::text[]) AS u(queue, off, part, ord, route, sku, qty, state, at, settled, reason)
ON CONFLICT (node, part_id) DO UPDATE SET state = EXCLUDED.state, settled_at = EXCLUDED.settled_at, reason = EXCLUDED.reason,
  held_by = CASE WHEN EXCLUDED.incarnation <> stock_movements.incarnation THEN EXCLUDED.incarnation ELSE stock_movements.held_by END,
  updated_at = now()
WHERE (stock_movements.state IN ('pending', 'lost', 'expired') AND EXCLUDED.state IN ('confirmed', 'cancelled'))
   OR (stock_movements.state = 'pending' AND EXCLUDED.state IN ('lost', 'expired'))
   OR (stock_movements.state IN ('lost', 'expired') AND EXCLUDED.state = 'pending'
       AND stock_movements.incarnation <> EXCLUDED.incarnation)
   OR (stock_movements.state = 'pending' AND EXCLUDED.state = 'pending'
       AND coalesce(stock_movements.held_by, stock_movements.incarnation) <> EXCLUDED.incarnation)`
	// sqlConflicts returns the parts of entries ($2 ids, $3 states) landed
	// at incarnation $4 whose row, of another incarnation of the node, is
	// settled in another state: the node lost the decision the row holds
	// (it went back to an older copy and was accepted), or decided again.
	// Run only for a node with an earlier incarnation (worker.restored).
	sqlConflicts = `SELECT m.part_id, m.state, u.state FROM stock_movements m
JOIN unnest($2::text[], $3::text[]) AS u(part, state) ON m.node = $1 AND m.part_id = u.part
WHERE m.incarnation <> $4 AND m.state IN ('confirmed', 'cancelled') AND m.state <> u.state
  AND m.conflict_in IS DISTINCT FROM $4`
	// sqlConflictsSeen records that the conflicts of parts $2 at
	// incarnation $3 were reported.
	sqlConflictsSeen = `UPDATE stock_movements SET conflict_in = $3 WHERE node = $1 AND part_id = ANY($2::text[])`
	// sqlAdvance moves the positions, in the same transaction.
	sqlAdvance = `INSERT INTO sync_positions (node, incarnation, queue, redo_offset, part_id)
SELECT $1, $2, u.q, u.off, u.part FROM unnest($3::int[], $4::bigint[], $5::text[]) AS u(q, off, part)
ON CONFLICT (node, incarnation, queue) DO UPDATE
SET redo_offset = EXCLUDED.redo_offset, part_id = EXCLUDED.part_id, updated_at = now()`
)

// land writes the entries of work in one transaction with the new
// positions of their queues, for the queues whose lock it gets and whose
// committed position is still the worker's (another instance may have
// moved it, or the database gone back: the worker takes the database's
// position and reads again). A database at another schema version is an
// error wrapping ErrSchema (positions).
// Only after the commit does it move the worker's positions and owe the
// acknowledgements. gotLock is false when another session held the lock
// of every queue of work: nothing moved, and reading again at once would
// only read the same entries again (landStep waits its poll interval).
func (w *worker) land(ctx context.Context, work []inventory.RedoQueueRead, reasons map[string]CancelReason) (gotLock bool, err error) {
	queues := make([]int32, len(work))
	for i, q := range work {
		queues[i] = int32(q.Queue)
	}
	tx, err := w.s.pool.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer w.s.rollback(ctx, tx) // a no-op after Commit
	locked, db, err := w.lockQueues(ctx, tx, queues)
	if err != nil {
		return false, err
	}
	w.noteLocked(queues, locked)
	if len(locked) > 0 {
		if gone, err := w.superseded(ctx); err != nil || gone {
			return true, err
		}
	}
	b := w.batch(work, locked, db, reasons)
	if len(b.next) == 0 {
		return len(locked) > 0, tx.Commit(ctx) // releases the locks
	}
	return true, w.write(ctx, tx, work, b)
}

// write writes b (the landBatch of work) in tx, commits, and only then
// moves the worker's positions and owes the acknowledgements.
func (w *worker) write(ctx context.Context, tx pgx.Tx, work []inventory.RedoQueueRead, b landBatch) error {
	missing, err := w.missingTrimmed(ctx, tx, b.trimmed)
	if err != nil {
		return err
	}
	if err := w.recordGaps(ctx, tx, b.trimmed, missing); err != nil {
		return err
	}
	var conflicts []conflict
	if len(b.mv.off) > 0 {
		mv := &b.mv
		if w.restored {
			if conflicts, err = w.conflicts(ctx, tx, mv.part, mv.state); err != nil {
				return err
			}
			if len(conflicts) > 0 {
				ids := make([]string, len(conflicts))
				for i, c := range conflicts {
					ids[i] = c.part
				}
				if _, err := tx.Exec(ctx, sqlConflictsSeen, w.node, ids, w.inc); err != nil {
					return err
				}
			}
		}
		if _, err := tx.Exec(ctx, sqlInsert, w.node, w.inc, mv.queue, mv.off, mv.part, mv.order, mv.route, mv.sku,
			mv.qty, mv.state, mv.at, mv.settled, mv.reason); err != nil {
			return err
		}
	}
	if _, err := tx.Exec(ctx, sqlAdvance, w.node, w.inc, b.pq, b.poff, b.ppart); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	for q, c := range b.next {
		w.pos[q] = c
		w.owed[q] = c
	}
	w.landed(work, b, missing)
	w.reportConflicts(conflicts)
	return nil
}

// superseded reports, under the queue locks taken in tx, whether the
// node is no longer at the incarnation work was read at: it was accepted
// again since, while this instance was held up between its read and its
// landing (a pause, a slow host). The entries then must not land: another
// instance may have landed the same parts under the new incarnation, and
// the old one's states written over those rows would be applied out of
// the incarnations' order (a part cancelled before the node went back,
// written over its pending row of the new incarnation, stays cancelled
// when the node confirms it, and no conflict is seen). The worker drops
// the batch and leaves the incarnation (leaveIncarnation: its debts and
// its paused and stopped queues), as when its read finds the node at
// another incarnation (landStep): the old incarnation's rows stay as
// landed. The
// locks keep the order once the node is found at the incarnation: a
// landing of the new one in a queue this transaction holds waits for it.
func (w *worker) superseded(ctx context.Context) (bool, error) {
	b, err := w.s.inv.ReadRedoBatch(ctx, w.node, "", nil, 1, 0)
	if err != nil {
		return false, nodeError{err}
	}
	if b.Incarnation == w.inc {
		return false, nil
	}
	w.s.log.Warn("node was accepted again since its redo log was read: the batch read at the old incarnation is dropped, "+
		"landing moves to the new one", "node", w.node, "old_incarnation", w.inc, "incarnation", b.Incarnation)
	w.leaveIncarnation()
	return true, nil
}

// nodeError is a failure to read the node inside a landing transaction
// (superseded): landStep counts it as the node's, not the database's.
type nodeError struct{ err error }

func (e nodeError) Error() string { return e.err.Error() }
func (e nodeError) Unwrap() error { return e.err }

// conflict is a part whose settled row a later incarnation of its node
// holds in another state.
type conflict struct{ part, row, node string }

// conflicts runs sqlConflicts in tx for the entries parts (in states).
func (w *worker) conflicts(ctx context.Context, tx pgx.Tx, parts, states []string) ([]conflict, error) {
	rows, _ := tx.Query(ctx, sqlConflicts, w.node, parts, states, w.inc)
	var c conflict
	var out []conflict
	_, err := pgx.ForEachRow(rows, []any{&c.part, &c.row, &c.node}, func() error {
		out = append(out, c)
		return nil
	})
	return out, err
}

// reportConflicts logs and counts the conflicts of a committed landing.
func (w *worker) reportConflicts(cs []conflict) {
	if len(cs) == 0 {
		return
	}
	w.s.m.conflicts.WithLabelValues(w.node).Add(float64(len(cs)))
	for _, c := range cs {
		w.s.log.Error("CONFLICT: a settled part is in another state on its node, which went back to an older copy of its data and was accepted: "+
			"the database keeps its settled state; the node lost that decision and its counters follow its own (reconcile by hand)",
			"node", w.node, "incarnation", w.inc, "part", c.part, "database_state", c.row, "node_state", c.node)
	}
}

// lockQueues takes the advisory lock of each of queues it can get in tx
// (another instance holds the others) and reads their committed positions
// (positions: a schema at another version is an error wrapping ErrSchema).
func (w *worker) lockQueues(ctx context.Context, tx pgx.Tx, queues []int32) (map[int]bool, map[int]cursor, error) {
	rows, _ := tx.Query(ctx, sqlLockQueues, w.key, queues, migrateLock)
	lockedList, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, nil, err
	}
	locked := map[int]bool{}
	for _, q := range lockedList {
		locked[int(q)] = true
	}
	db, err := w.positions(ctx, tx, w.inc, lockedList)
	if err != nil {
		return nil, nil, err
	}
	return locked, db, nil
}

// querier runs a query: a transaction or the pool.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// positions reads the committed positions of incarnation inc's queues
// (sqlPositions) and checks the schema version in the same statement: a database migrated
// to another version since this syncer started (a newer build's
// `shardis sync migrate`) is an error wrapping ErrSchema that names both
// versions, and the syncer stops (Syncer.halt) rather than write what
// this build writes into it.
func (w *worker) positions(ctx context.Context, q querier, inc string, queues []int32) (map[int]cursor, error) {
	rows, _ := q.Query(ctx, sqlPositions, w.node, inc, queues)
	db := map[int]cursor{}
	var queue *int32
	var off *int64
	var part *string
	var version int
	if _, err := pgx.ForEachRow(rows, []any{&queue, &off, &part, &version}, func() error {
		if queue != nil {
			db[int(*queue)] = cursor{off: *off, part: *part}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if version != SchemaVersion {
		return nil, schemaChanged(version)
	}
	return db, nil
}

// landBatch is what one land writes: the movements, the new position of
// each queue (pq, poff, ppart as the SQL's arrays; next by queue) and the
// offsets trimmed before they could be read (first, last by queue).
type landBatch struct {
	mv      movements
	pq      []int32
	poff    []int64
	ppart   []string
	next    map[int]cursor
	trimmed map[int][2]int64
	skipped int // entries of refused attempts left out (skipRefused)
}

// batch builds the landBatch of work (reasons: of its cancelled parts) for the locked queues whose database
// position db is still the worker's; a queue moved by another instance,
// or set back (the database went back: dbMoved drops an acknowledgement
// owed past it), takes the database's position and is left for the next
// read.
func (w *worker) batch(work []inventory.RedoQueueRead, locked map[int]bool, db map[int]cursor, reasons map[string]CancelReason) landBatch {
	b := landBatch{next: map[int]cursor{}, trimmed: map[int][2]int64{}}
	for _, r := range work {
		if !locked[r.Queue] {
			continue
		}
		if db[r.Queue] != w.pos[r.Queue] {
			w.dbMoved(r.Queue, db[r.Queue]) // read again from there
			continue
		}
		after := w.pos[r.Queue].off
		if r.Trimmed > 0 {
			// Gone before they could be read: the position moves past
			// them (reported below), or it would wait for them forever.
			b.trimmed[r.Queue] = [2]int64{after + 1, after + r.Trimmed}
		}
		last := cursor{off: after + r.Trimmed}
		if r.Trimmed > 0 {
			// its entry is gone: one there later is the node gone back
			last.part = inventory.RedoPartTrimmed
		}
		for _, e := range r.Entries {
			last = cursor{off: e.Offset, part: e.PartID}
			if skipRefused(e, reasons) {
				b.skipped++
				continue
			}
			b.mv.add(r.Queue, e, reasons[e.PartID])
		}
		b.next[r.Queue] = last
		b.pq = append(b.pq, int32(r.Queue))
		b.poff = append(b.poff, last.off)
		b.ppart = append(b.ppart, last.part)
	}
	return b
}

// missingTrimmed counts, per queue, the trimmed offsets that never
// landed: those with a row were landed before (a position set back), the
// others are lost to the database. An offset skipped as a refused
// attempt's (skipRefused) has no row either: after a position set back
// over one, it is counted too.
//
// A node accepted with its data (restored from a copy, w.copied) keeps
// its redo log, offsets and acknowledgements: what the copy had trimmed
// was handled, and acknowledged, under an earlier incarnation. Its rows
// count, and so does its committed position: every offset up to it was
// landed, left out as a refused attempt's, or recorded as a gap then
// (copiedUpTo). A node that came back empty hands its offsets out again
// to new entries: only its own incarnation's rows count.
func (w *worker) missingTrimmed(ctx context.Context, tx pgx.Tx, trimmed map[int][2]int64) (map[int]int64, error) {
	missing := map[int]int64{}
	for q, r := range trimmed {
		first, err := w.copiedUpTo(ctx, tx, q)
		if err != nil {
			return nil, err
		}
		first = max(first+1, r[0])
		if first > r[1] {
			continue
		}
		var have int64
		if err := tx.QueryRow(ctx, `SELECT count(DISTINCT redo_offset) FROM stock_movements
WHERE node = $1 AND (incarnation = $2 OR $6) AND queue = $3 AND redo_offset BETWEEN $4 AND $5`,
			w.node, w.inc, q, first, r[1], w.copied).Scan(&have); err != nil {
			return nil, err
		}
		if n := r[1] - first + 1 - have; n > 0 {
			missing[q] = n
		}
	}
	return missing, nil
}

// copiedUpTo is, for a node accepted with its data (w.copied), the
// highest position committed in queue q under its earlier incarnations:
// the copy's offsets up to there were handled then. 0 otherwise.
func (w *worker) copiedUpTo(ctx context.Context, tx pgx.Tx, q int) (int64, error) {
	if !w.copied {
		return 0, nil
	}
	var upTo int64
	err := tx.QueryRow(ctx, `SELECT coalesce(max(redo_offset), 0) FROM sync_positions
WHERE node = $1 AND incarnation <> $2 AND queue = $3`, w.node, w.inc, q).Scan(&upTo)
	return upTo, err
}

// recordGaps writes a sync_gaps row per queue of missing in tx, the
// transaction that moves the position past the range: the loss is in the
// database exactly when the position is (a crash after the commit loses
// only the log line and the metric, which landed reports). A range found
// again (a position set back over it, the same first offset) keeps its
// first row; a set back to another offset may record an overlapping one.
func (w *worker) recordGaps(ctx context.Context, tx pgx.Tx, trimmed map[int][2]int64, missing map[int]int64) error {
	for q, n := range missing {
		r := trimmed[q]
		if _, err := tx.Exec(ctx, `INSERT INTO sync_gaps (node, incarnation, queue, first_offset, last_offset, missing)
VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`, w.node, w.inc, q, r[0], r[1], n); err != nil {
			return err
		}
	}
	return nil
}

// landed reports a committed land: the metrics, the landing delay of each
// movement, an error per queue that lost trimmed entries, and each queue's
// lag.
func (w *worker) landed(work []inventory.RedoQueueRead, b landBatch, missing map[int]int64) {
	now := time.Now()
	m := w.s.m
	m.landed.WithLabelValues(w.node).Add(float64(len(b.mv.off)))
	m.skipped.WithLabelValues(w.node).Add(float64(b.skipped))
	delay := m.delay.WithLabelValues(w.node)
	for _, at := range b.mv.at {
		if at.Valid {
			delay.Observe(now.Sub(at.Time).Seconds())
		}
	}
	for q, n := range missing {
		r := b.trimmed[q]
		m.trimmed.WithLabelValues(w.node).Add(float64(n))
		w.s.log.Error("redo-log entries were trimmed before they landed (inventory.redo_max_age, another consumer acknowledged them, or the database was restored from an older backup): "+
			"they are not in the database (sync_gaps has the range)", "node", w.node, "incarnation", w.inc, "queue", q, "from", r[0], "to", r[1], "missing_entries", n)
	}
	for _, r := range work {
		if c, ok := b.next[r.Queue]; ok {
			m.setLag(w.node, r.Queue, r.Head-c.off)
		}
	}
}
