package pgsync

import (
	"context"
	"time"
)

// A node keeps every redo-log queue it ever wrote (fields of
// inventory.RedoOffsetsKey), whatever inventory.redo_queues is now: the
// setting was larger when it was written, or the service that writes it
// is configured with more queues than this sync. Each worker reads every
// queue its node holds, at least the configured ones, so no entry is
// left unlanded and unacknowledged because of the setting. That is safe
// whichever order the queues land in: a part has one entry, in the queue
// of its SKU at its take (a settle writes no entry: a read takes the
// part's state from its record), rows are one per (node, part_id) and
// only move forward (sqlInsert), so a SKU's parts, some in an old queue
// and later ones in a new queue, land in any order to the same rows.
// Offsets are per queue, so positions need nothing new.

// queuesEvery is how often a worker counts its node's queues again
// (inventory.RedoQueuesHeld, one HKEYS): a queue written by a service
// with more queues than this sync starts landing within about this.
const queuesEvery = time.Second

// countQueues makes the worker read every queue its node holds: before
// an incarnation is adopted (adopt sizes the positions), and every
// queuesEvery. A node that holds more queues than inventory.redo_queues
// is logged once per count it grows to.
func (w *worker) countQueues(ctx context.Context) error {
	if w.inc != "" && time.Since(w.heldAt) < queuesEvery {
		return nil
	}
	held, err := w.s.inv.RedoQueuesHeld(ctx, w.node)
	if err != nil {
		return err
	}
	w.heldAt = time.Now()
	if held <= w.queues {
		return nil
	}
	w.s.log.Warn("the node holds redo-log queues past inventory.redo_queues (written with a larger setting, or by a service configured with more queues): "+
		"they are landed and acknowledged like the others", "node", w.node, "redo_queues", w.s.queues, "queues_held", held)
	w.queues = held
	if w.inc != "" {
		// positions of the new queues: 0 until a landing reads the
		// database's under the locks (batch: dbMoved)
		w.pos = append(w.pos, make([]cursor, held-len(w.pos))...)
	}
	return nil
}
