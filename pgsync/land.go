package pgsync

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
)

// cursor is a committed position in one queue: the last offset landed
// and the part that was at it.
type cursor struct {
	off  int64
	part string
}

// worker lands one node's redo log. Its fields belong to the landing
// goroutine; the settle goroutine uses only s, node and key, and settle
// (its streak), which the landing goroutine does not touch.
type worker struct {
	s    *Syncer
	node string
	key  int32

	inc     string          // the incarnation positions belong to; "" = read it first
	gen     int64           // its acceptance generation
	queues  int             // the queues read: every one the node holds, at least inventory.redo_queues (queues.go)
	heldAt  time.Time       // when the node's queues were last counted (queues.go)
	pos     []cursor        // per queue, as committed (or as another instance committed); len(pos) == queues
	owed    map[int]cursor  // committed but not yet acknowledged in Redis
	unsure  bool            // an acknowledgement of owed failed: the database may have lost it since (checkOwed)
	rot     int             // first queue of the next read (fairness)
	rewound map[int]bool    // queues reported as gone back, paused
	unreadQ unreadable[int] // queues stopped at an entry whose part record cannot be read (unreadable.go)
	locks   lockWait        // queues skipped as locked by another session
	held    time.Duration   // the last read held a queue back: nothing is ready before this (0: none)
	// restored: the node had another incarnation before inc, so a part it
	// hands out may have a row of that one already (conflicts, tx.go)
	restored bool
	// copied: restored, and inc's data descends from an earlier
	// incarnation's (accepted with its data, or not known: a stamp from
	// before data_of), so its redo log continues that one's offsets and
	// what it trimmed may have landed under it (missingTrimmed). Not for
	// a node that came back empty (node.NoEarlierData): its offsets start
	// again with new entries.
	copied bool

	redis, db, ack, settle streak
	// unreadP: landed pending parts whose record cannot be read (the
	// settle goroutine's, unreadable.go)
	unreadP unreadable[string]
}

func newWorker(s *Syncer, node string) *worker {
	w := &worker{s: s, node: node, key: lockKey(node), queues: s.queues, rewound: map[int]bool{}}
	log := s.log.With("node", node)
	w.redis = streak{log: log, what: "reading the redo log"}
	w.db = streak{log: log, what: "landing in PostgreSQL"}
	w.ack = streak{log: log, what: "acknowledging landed entries"}
	w.settle = streak{log: log, what: "re-checking pending parts"}
	return w
}

// landLoop lands until ctx is done: at once while batches come back full
// (and it got a queue's lock), every poll interval when idle, after the retry backoff on failure (or
// as soon as the database answers again, when it was the database that
// failed).
func (w *worker) landLoop(ctx context.Context) {
	for ctx.Err() == nil {
		more, err := w.landStep(ctx)
		switch {
		case err != nil:
			if !w.retry(ctx, err) {
				return
			}
		case !more:
			// A held entry is the oldest that waits: every entry read
			// after it is younger. Nothing lands before it is old enough.
			if !sleep(ctx, max(w.s.set.PollInterval, w.held)) {
				return
			}
		}
	}
}

// landStep reads every queue once and lands what it found in one
// transaction, then acknowledges it. It reports whether more is waiting
// that it can land now: not when another session held every queue it
// read.
func (w *worker) landStep(ctx context.Context) (more bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, w.s.set.StepTimeout)
	defer cancel()
	inv := w.s.inv
	if err := w.countQueues(ctx); err != nil {
		return false, w.failRedis(err)
	}
	if w.inc == "" {
		b, err := inv.ReadRedoBatch(ctx, w.node, "", nil, 1, 0)
		if err == nil && b.Incarnation == "" {
			err = fmt.Errorf("node %s has no incarnation stamp yet", w.node)
		}
		if err != nil {
			return false, w.failRedis(err)
		}
		started := time.Now()
		if err := w.adopt(ctx, b); err != nil {
			return false, w.failDB(err, started)
		}
	}
	if len(w.owed) > 0 {
		w.payAcks(ctx)
		if w.inc == "" {
			return true, nil // the node changed incarnation under the acks
		}
	}
	cursors := make([]inventory.RedoCursor, w.queues)
	for i := range cursors {
		q := (w.rot + i) % w.queues
		cursors[i] = inventory.RedoCursor{Queue: q, After: w.pos[q].off, PartID: w.pos[q].part}
	}
	w.rot = (w.rot + 1) % w.queues
	b, err := inv.ReadRedoBatch(ctx, w.node, w.inc, cursors, w.s.set.Batch, w.s.set.hold())
	if err != nil {
		return false, w.failRedis(err)
	}
	w.held = b.Wait
	w.redis.ok()
	if b.Incarnation != w.inc {
		w.s.log.Warn("node is at another incarnation (it lost data and was accepted): its redo log starts a new position; "+
			"the old incarnation's rows stay as landed", "node", w.node, "old_incarnation", w.inc, "incarnation", b.Incarnation)
		w.leaveIncarnation()
		return true, nil
	}
	work, total := w.workOf(b)
	if len(work) == 0 {
		return false, nil
	}
	started := time.Now() // the database's part of the step (dbHealth.observe)
	gotLock, err := w.land(ctx, work, w.s.cancelReasons(ctx, cancelledParts(work)))
	if err != nil {
		if ne := (nodeError{}); errors.As(err, &ne) {
			return false, w.failRedis(ne.err)
		}
		return false, w.failDB(err, started)
	}
	if w.inc == "" {
		return true, nil // the node was accepted again since the read (superseded): read it
	}
	w.s.health.observe(nil, started)
	w.db.ok("incarnation", w.inc)
	w.payAcks(ctx)
	// a full batch whose queues another session all held moved nothing:
	// read again after the poll interval, not at once
	return gotLock && total >= w.s.set.Batch, nil
}

// leaveIncarnation forgets the incarnation the worker landed, once the
// node is found at another one (a read, an acknowledgement refused with
// inventory.ErrIncarnation, a landing superseded): the next step adopts
// the node's incarnation, with positions of its own. What belonged to the
// old one goes with it: the acknowledgements owed, and the queues paused
// as gone back or stopped at an unreadable part record (their metrics
// too): the new incarnation's queues start over, and a read of them finds
// its own.
func (w *worker) leaveIncarnation() {
	w.inc, w.owed = "", nil
	w.s.m.clearQueues(w.node)
	clear(w.rewound)
	w.unreadQ.reset()
}

// workOf returns the queues of b with something to land (entries, or
// offsets trimmed past the position) and how many entries they hold; it
// reports the queues that went back (paused) and those that match again,
// the queues stopped at an entry whose part record cannot be read (and
// those read past it again), and each queue's lag.
func (w *worker) workOf(b inventory.RedoBatch) (work []inventory.RedoQueueRead, total int) {
	m := w.s.m
	for _, q := range b.Queues {
		m.setLag(w.node, q.Queue, q.Head-w.pos[q.Queue].off)
		if q.Rewound {
			w.reportRewound(q)
			continue
		}
		if w.rewound[q.Queue] {
			delete(w.rewound, q.Queue)
			m.setRewound(w.node, q.Queue, false)
		}
		w.noteUnreadableQueue(q, w.pos[q.Queue].off)
		if len(q.Entries) > 0 || q.Trimmed > 0 {
			work = append(work, q)
			total += len(q.Entries)
		}
	}
	return work, total
}

// cancelledParts returns the cancelled entries of work: part id → order.
func cancelledParts(work []inventory.RedoQueueRead) map[string]cancelledPart {
	out := map[string]cancelledPart{}
	for _, q := range work {
		for _, e := range q.Entries {
			if e.State == string(inventory.PartCancelled) {
				out[e.PartID] = cancelledPart{order: e.OrderID, at: e.At}
			}
		}
	}
	return out
}

func (w *worker) failRedis(err error) error {
	w.s.m.errors.WithLabelValues(w.node, stageRedis).Inc()
	w.redis.fail(err)
	return err
}

// retry waits out the failure err of a step (landing or settle), and
// reports whether the loop goes on: not once ctx is done, nor after a
// schema at another version (ErrSchema), which stops the syncer.
func (w *worker) retry(ctx context.Context, err error) bool {
	if errors.Is(err, ErrSchema) {
		w.s.halt(err)
		return false
	}
	return ctx.Err() == nil && w.s.health.wait(ctx, w.s.set.RetryBackoff)
}

// failDB records a database failure of the step that started at started.
// A schema at another version is not one: the database answered.
func (w *worker) failDB(err error, started time.Time) error {
	if errors.Is(err, ErrSchema) {
		return err
	}
	w.s.m.errors.WithLabelValues(w.node, stageDB).Inc()
	w.s.health.observe(err, started)
	w.db.fail(err, "incarnation", w.inc)
	return err
}

// reportRewound pauses a queue whose node went back under the committed
// position without a new incarnation (what rollback detection could not
// see): landing past it would skip the entries that now hold its
// offsets. It stays paused until a read no longer finds it behind the
// position (its log caught up again), or the node is accepted with a new
// incarnation (`shardis node accept`), which starts a new position.
func (w *worker) reportRewound(q inventory.RedoQueueRead) {
	w.pauseRewound(q.Queue, "head", q.Head)
}

// pauseRewound pauses queue as reportRewound does; attrs say what showed
// it (the read's head, or the acknowledgement's refusal: payAcks has no
// head to log).
func (w *worker) pauseRewound(queue int, attrs ...any) {
	if w.rewound[queue] {
		return
	}
	w.rewound[queue] = true
	w.s.m.setRewound(w.node, queue, true)
	p := w.pos[queue]
	w.s.log.Error("REDO LOG WENT BACK: the queue no longer holds what was landed at the committed position; "+
		"queue paused (nothing is landed or acknowledged past it) until it matches again or the node is accepted with `shardis node accept` (a new incarnation, a new position)",
		append([]any{"node", w.node, "incarnation", w.inc, "queue", queue, "position", p.off, "part_at_position", p.part}, attrs...)...)
}

// adopt makes the incarnation b was read at the worker's: it records the
// incarnation (reporting one that follows another), loads its committed
// positions and owes an acknowledgement of each (a sync killed between a
// commit and its acknowledgement left them behind; acknowledging is
// idempotent).
func (w *worker) adopt(ctx context.Context, b inventory.RedoBatch) error {
	inc, gen := b.Incarnation, b.Generation
	var db map[int]cursor
	var inserted bool
	var previous []string
	err := pgx.BeginFunc(ctx, w.s.pool, func(tx pgx.Tx) error {
		// a migration commits before this transaction or after it, and
		// positions sees it (the version); taken before the first write,
		// so a migration never waits on this transaction's rows while it
		// waits for the migration's lock
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock_shared($1)", migrateLock); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `INSERT INTO sync_incarnations (node, incarnation, generation) VALUES ($1, $2, $3)
ON CONFLICT DO NOTHING`, w.node, inc, gen)
		if err != nil {
			return err
		}
		inserted = tag.RowsAffected() == 1
		rows, _ := tx.Query(ctx, `SELECT incarnation FROM sync_incarnations WHERE node = $1 AND incarnation <> $2
ORDER BY first_seen`, w.node, inc) // every earlier one, not only at a first sight: worker.restored
		if previous, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return err
		}
		// every queue's: the node may hold more than it did when they
		// were committed, or fewer than this instance's redo_queues
		db, err = w.positions(ctx, tx, inc, allQueues(inventory.MaxRedoQueues))
		return err
	})
	if err != nil {
		return fmt.Errorf("loading the positions of node %s incarnation %s: %w", w.node, inc, err)
	}
	switch {
	case inserted && len(previous) > 0:
		w.s.m.incarnations.WithLabelValues(w.node).Inc()
		w.s.log.Warn("NEW INCARNATION: the node lost data and was accepted; its redo log is landed from a new position, "+
			"never merged into the old one (rows of parts it still holds keep their first landing; pending and lost ones follow their state, settled ones stay)",
			"node", w.node, "incarnation", inc, "generation", gen, "previous_incarnations", strings.Join(previous, ","))
	case inserted:
		w.s.log.Info("landing a node's redo log", "node", w.node, "incarnation", inc, "generation", gen)
	}
	n := w.queues
	for q := range db {
		n = max(n, q+1) // a queue the node no longer holds: read, it is found gone back
	}
	pos := make([]cursor, n)
	for q, c := range db {
		pos[q] = c
	}
	w.queues = n
	w.s.log.Info("resuming the redo log from the committed positions", "node", w.node, "incarnation", inc,
		"positions", positionsText(pos))
	w.inc, w.gen, w.pos, w.restored = inc, gen, pos, len(previous) > 0
	w.copied = w.restored && b.DataOf != node.NoEarlierData
	w.owed, w.unsure = map[int]cursor{}, false
	for q, c := range pos {
		if c.off > 0 {
			w.owed[q] = c
		}
	}
	w.s.m.generation.WithLabelValues(w.node).Set(float64(gen))
	return nil
}

// allQueues is 0..n-1.
func allQueues(n int) []int32 {
	qs := make([]int32, n)
	for i := range qs {
		qs[i] = int32(i)
	}
	return qs
}

// positionsText is each queue's committed position, "queue:offset"
// separated by spaces ("0:120 1:0 2:87"): where landing resumes.
func positionsText(pos []cursor) string {
	var b strings.Builder
	for q, c := range pos {
		if q > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d:%d", q, c.off)
	}
	return b.String()
}

// payAcks acknowledges what was committed. A failure leaves the debt for
// the next step: the entries are in the database, Redis only keeps them
// longer. A debt left by a failure is checked against the database's
// positions before it is paid (checkOwed).
func (w *worker) payAcks(ctx context.Context) {
	if w.unsure && !w.checkOwed(ctx) {
		return
	}
	acks := make([]inventory.RedoCursor, 0, len(w.owed))
	for q, c := range w.owed {
		acks = append(acks, inventory.RedoCursor{Queue: q, After: c.off, PartID: c.part})
	}
	_, err := w.s.inv.AckRedoBatch(ctx, w.node, w.inc, acks)
	switch {
	case err == nil:
		clear(w.owed)
		w.ack.ok()
		return
	case errors.Is(err, inventory.ErrIncarnation):
		w.leaveIncarnation() // re-read the incarnation; nothing of the new one was landed
		return
	case errors.Is(err, inventory.ErrRewound) || errors.Is(err, inventory.ErrInvalid):
		// One queue went back: acknowledge the others one by one and
		// pause it.
		for _, a := range acks {
			_, err := w.s.inv.AckRedoBatch(ctx, w.node, w.inc, []inventory.RedoCursor{a})
			switch {
			case err == nil:
				delete(w.owed, a.Queue)
			case errors.Is(err, inventory.ErrRewound) || errors.Is(err, inventory.ErrInvalid):
				delete(w.owed, a.Queue)
				w.pauseRewound(a.Queue, "acknowledgement_refused", err.Error())
			default:
				w.unsure = true
			}
		}
		return
	}
	w.unsure = true
	w.s.m.errors.WithLabelValues(w.node, stageAck).Inc()
	w.ack.fail(err)
}

// checkOwed re-reads the committed positions of the queues owed an
// acknowledgement that failed: the database may have lost the commit
// since (restored from a backup, an asynchronous replica promoted). An
// acknowledgement past the database's position is dropped, never sent
// (the node would trim entries the database does not hold), and the queue
// is read again from that position (dbMoved): the entries, still in the
// node's redo log, land again. It reports whether the debt may be paid; a
// failure to read leaves it, unsure, for the next step.
func (w *worker) checkOwed(ctx context.Context) bool {
	queues := make([]int32, 0, len(w.owed))
	for q := range w.owed {
		queues = append(queues, int32(q))
	}
	started := time.Now()
	db, err := w.positions(ctx, w.s.pool, w.inc, queues)
	if err != nil {
		if errors.Is(err, ErrSchema) {
			w.s.halt(err) // the database answered: at another schema version
		}
		_ = w.failDB(err, started)
		return false
	}
	w.s.health.observe(nil, started)
	for _, q := range queues {
		if c := db[int(q)]; w.owed[int(q)].off > c.off {
			w.dbMoved(int(q), c)
		}
	}
	w.unsure = false
	return true
}

// dbMoved takes c, the committed position of queue q read from the
// database, when it is not the worker's: another instance landed past it,
// or the database went back under it. The worker reads the queue again
// from there, and drops an acknowledgement owed past it: the database
// does not hold those entries (any more), so the node must keep them.
func (w *worker) dbMoved(q int, c cursor) {
	if o, ok := w.owed[q]; ok && o.off > c.off {
		delete(w.owed, q)
		w.s.log.Warn("the database no longer holds entries landed and not yet acknowledged (restored from a backup, or a replica promoted): "+
			"their acknowledgement is dropped and they are landed again from the committed position",
			"node", w.node, "incarnation", w.inc, "queue", q, "owed", o.off, "position", c.off)
	}
	w.pos[q] = c
}

// movements are the rows of stock_movements to write, by column.
type movements struct {
	queue   []int32
	off     []int64
	part    []string
	order   []string
	route   []string
	sku     []string
	qty     []int64
	state   []string
	at      []pgtype.Timestamptz
	settled []pgtype.Timestamptz
	reason  []pgtype.Text
}

func (mv *movements) add(q int, e inventory.RedoEntry, r CancelReason) {
	mv.queue = append(mv.queue, int32(q))
	mv.off = append(mv.off, e.Offset)
	mv.part = append(mv.part, e.PartID)
	mv.order = append(mv.order, e.OrderID)
	mv.route = append(mv.route, e.Route)
	mv.sku = append(mv.sku, e.SKU)
	mv.qty = append(mv.qty, e.Quantity)
	mv.state = append(mv.state, e.State)
	mv.at = append(mv.at, ts(e.At))
	mv.settled = append(mv.settled, ts(e.SettledAt))
	mv.reason = append(mv.reason, reasonText(r))
}

// ts is a nullable timestamp: NULL for the zero time and the epoch (a
// part record that was gone when read).
func ts(t time.Time) pgtype.Timestamptz {
	if t.IsZero() || t.UnixMilli() == 0 {
		return pgtype.Timestamptz{}
	}
	return pgtype.Timestamptz{Time: t, Valid: true}
}
