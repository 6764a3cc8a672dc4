package pgsync

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardis/shardis/inventory"
)

// sqlPendingParts reads the landed pending rows of a node among some parts
// (the unique index on (node, part_id)).
const sqlPendingParts = `SELECT incarnation, queue, redo_offset, part_id, order_id, coalesce(held_by, incarnation),
  (SELECT coalesce(max(version), 0) FROM shardis_sync_schema) FROM stock_movements
WHERE node = $1 AND part_id = ANY($2) AND state = 'pending'`

// follower is a worker's place in its node's settled log (doc.go,
// "Settled states"); only the settle loop uses it.
type follower struct {
	cur inventory.SettledCursor
	inc string // the node's incarnation when cur was last read; "" before
	// again holds the parts the log named, to be read once more when due
	// (oldest first): a landing that read one as pending before its entry
	// was written commits its row within its step (StepTimeout) after
	// that read, perhaps after this step looked for the row
	again  []againBatch
	againN int // ids in again, at most maxAgain
	// walkDue: every landed pending row must be read again (a gap in the
	// log, a new incarnation)
	walkDue bool
}

// againBatch is the parts of one step's entries and when to look again.
type againBatch struct {
	due time.Time
	ids []string
}

// maxAgain bounds the ids a follower keeps for their second look (a few
// MB): past it, it drops the oldest batch and walks instead, which reads
// every row a second look would.
const maxAgain = inventory.SettledLogCap

// secondLook is how long after a step reads an entry it looks for the
// part's row again: past the step timeout of any landing that read the
// part before the entry was written.
func (s *Settings) secondLook() time.Duration { return s.StepTimeout + time.Second }

// startFollowing places a follower that never read the node's settled log
// before the log's first entry now, not before its first entry ever: the
// walk that follows covers every part that settled earlier (doc.go,
// "Settled states"), so only entries trimmed from now on are a gap. When
// the log cannot be read the follower stays where it is: its first read
// then reports every entry ever trimmed as a gap, and the loop walks once
// more.
func (w *worker) startFollowing(ctx context.Context, f *follower) {
	ctx, cancel := context.WithTimeout(ctx, w.s.set.StepTimeout)
	defer cancel()
	if r, err := w.s.inv.ReadSettled(ctx, w.node, inventory.SettledCursor{}, 1); err == nil {
		f.cur, f.inc = inventory.SettledCursor{Seq: r.Added - r.Length}, r.Incarnation
	}
}

// followStep reads up to settleChunk entries of the node's settled log
// after f's cursor and re-reads every part they name, and every part due
// for its second look, that has a landed pending row, in one transaction
// under the node's settle lock (another instance that holds it does this
// step: then read is -1). On success it moves f past the entries, and
// marks a walk due when the log had a gap or the node is at another
// incarnation.
func (w *worker) followStep(ctx context.Context, f *follower) (read int, err error) {
	ctx, cancel := context.WithTimeout(ctx, w.s.set.StepTimeout)
	defer cancel()
	tx, started, mine, err := w.settleTx(ctx)
	if err != nil {
		return 0, err
	}
	if !mine {
		return -1, nil
	}
	defer w.s.rollback(ctx, tx)
	r, err := w.s.inv.ReadSettled(ctx, w.node, f.cur, settleChunk)
	if err != nil {
		return 0, w.settleFailed(stageSettle, err, started)
	}
	next, gap := f.cur.Advance(r)
	ids := make([]string, 0, len(r.Entries))
	for _, e := range r.Entries {
		ids = append(ids, e.PartID)
	}
	now := time.Now()
	due := f.dueAt(now)
	look := ids
	for _, b := range f.again[:due] {
		look = append(look, b.ids...)
	}
	var upd settleUpdate
	if len(look) > 0 {
		if upd, err = w.settleRows(ctx, tx, look, started); err != nil {
			return 0, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, w.settleFailed(stageDB, err, started)
	}
	w.settle.ok()
	w.settled(upd)
	f.looked(due, ids, now.Add(w.s.set.secondLook()))
	if gap || (f.inc != "" && r.Incarnation != f.inc) {
		f.walkDue = true
	}
	f.cur, f.inc = next, r.Incarnation
	return len(r.Entries), nil
}

// dueAt returns how many of f's batches are due for their second look at
// now (they come first).
func (f *follower) dueAt(now time.Time) int {
	due := 0
	for due < len(f.again) && !f.again[due].due.After(now) {
		due++
	}
	return due
}

// looked records a committed step that looked again at f's first due
// batches and read ids, to be looked at again at next: it keeps at most
// maxAgain ids, dropping the oldest batches past that and marking a walk
// due, which reads every row their second look would.
func (f *follower) looked(due int, ids []string, next time.Time) {
	for _, b := range f.again[:due] {
		f.againN -= len(b.ids)
	}
	f.again = f.again[due:]
	if len(ids) > 0 {
		f.again = append(f.again, againBatch{due: next, ids: ids})
		f.againN += len(ids)
	}
	for f.againN > maxAgain {
		f.againN -= len(f.again[0].ids)
		f.again, f.walkDue = f.again[1:], true
	}
}

// settleRows re-reads on the node those of parts that have a landed
// pending row, and writes the states of the ones that settled, in tx; it
// returns what it wrote.
func (w *worker) settleRows(ctx context.Context, tx pgx.Tx, parts []string, started time.Time) (settleUpdate, error) {
	list, err := pendingRows(ctx, tx, sqlPendingParts, w.node, parts)
	if err != nil {
		return settleUpdate{}, w.settleFailed(stageDB, err, started)
	}
	upd, _, err := w.settleList(ctx, tx, list, started)
	return upd, err
}
