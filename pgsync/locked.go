package pgsync

import "time"

// A queue another session holds locked is skipped (its advisory lock is
// tried, never waited for). Normally that session is another instance
// landing a batch and lets go within milliseconds; a queue skipped for
// lockedLogAfter in a row is held by a session that does not let go (a
// hung instance mid-transaction, cut by PostgreSQL after
// Settings.IdleInTransactionTimeout). It is logged then, and at most every
// lockedLogEvery while it lasts, and once more when the lock is free.
const (
	lockedLogAfter = time.Second
	lockedLogEvery = 30 * time.Second
)

// lockWait is when each queue of a worker was first skipped as locked
// (in the current run of skips) and when that was last logged.
type lockWait struct {
	since  map[int]time.Time
	logged map[int]time.Time
}

// noteLocked records which of queues (those with something to land) the
// worker locked, and logs a queue skipped too long and its release.
func (w *worker) noteLocked(queues []int32, locked map[int]bool) {
	lw := &w.locks
	if lw.since == nil {
		lw.since, lw.logged = map[int]time.Time{}, map[int]time.Time{}
	}
	now := time.Now()
	tried := map[int]bool{}
	for _, q32 := range queues {
		q := int(q32)
		tried[q] = true
		since, waiting := lw.since[q]
		switch {
		case locked[q] && waiting:
			if _, logged := lw.logged[q]; logged {
				w.s.log.Info("queue lock free again: landing it", "node", w.node, "queue", q,
					"locked_for", now.Sub(since).Round(time.Millisecond))
			}
			delete(lw.since, q)
			delete(lw.logged, q)
		case locked[q]:
		case !waiting:
			lw.since[q] = now
		case now.Sub(since) >= lockedLogAfter && now.Sub(lw.logged[q]) >= lockedLogEvery:
			lw.logged[q] = now
			w.s.log.Warn("queue skipped: another session holds its advisory lock (a hung sync instance mid-transaction?); "+
				"PostgreSQL ends such a session after idle_in_transaction_session_timeout",
				"node", w.node, "queue", q, "locked_for", now.Sub(since).Round(time.Millisecond),
				"idle_in_transaction_session_timeout", w.s.set.IdleInTransactionTimeout)
		}
	}
	for q := range lw.since {
		if !tried[q] { // nothing to land there any more: the run of skips is over
			delete(lw.since, q)
			delete(lw.logged, q)
		}
	}
}
