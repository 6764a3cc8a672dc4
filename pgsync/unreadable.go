package pgsync

import (
	"time"

	"github.com/shardis/shardis/inventory"
)

// A part record that is on its node but cannot be read (a key of another
// type, a packed record whose state code is none: corrupt data, repaired
// by hand) is never read as a part gone (doc.go, "Unreadable part
// records"). The landing stops that queue before its entry and lands the
// node's other queues; the settle pass leaves that part's row pending and
// follows the others. Each is logged when it appears or changes, again
// every unreadableLogEvery while it lasts, and once when the record reads
// again; shardis_sync_unreadable_queues and shardis_sync_unreadable_parts
// count them. A record gone while its node lists the part pending or set
// aside (its record lost while it was pending: its units are reserved
// still) is read and followed the same way (inventory.PartStatesAt).
const unreadableLogEvery = 5 * time.Minute

// unreadable is what a worker found unreadable, by key (a queue number, a
// part id): why, where (a queue's offset) and when it was last logged.
// One goroutine owns each (the landing one its queues', the settle one its
// parts').
type unreadable[K comparable] struct {
	why    map[K]string
	at     map[K]int64
	logged map[K]time.Time
	seen   map[K]bool // found during the walk under way (parts: sweep)
}

// note records k's problem why at offset at (0 for a part) and reports
// whether to log it now: it is new, it changed, or it was last logged
// unreadableLogEvery ago.
func (u *unreadable[K]) note(k K, why string, at int64, now time.Time) bool {
	if u.why == nil {
		u.why, u.at, u.logged, u.seen = map[K]string{}, map[K]int64{}, map[K]time.Time{}, map[K]bool{}
	}
	u.seen[k] = true
	if old, ok := u.why[k]; ok && old == why && u.at[k] == at && now.Sub(u.logged[k]) < unreadableLogEvery {
		return false
	}
	u.why[k], u.at[k], u.logged[k] = why, at, now
	return true
}

// offset returns the offset k's problem was noted at, and whether k has one.
func (u *unreadable[K]) offset(k K) (int64, bool) {
	at, ok := u.at[k]
	return at, ok
}

// clear forgets k's problem and reports whether it had one.
func (u *unreadable[K]) clear(k K) bool {
	if _, ok := u.why[k]; !ok {
		return false
	}
	delete(u.why, k)
	delete(u.at, k)
	delete(u.logged, k)
	delete(u.seen, k)
	return true
}

// reset forgets every problem (the node is at another incarnation).
func (u *unreadable[K]) reset() { *u = unreadable[K]{} }

// startWalk begins a walk: what it does not find again, sweep forgets.
func (u *unreadable[K]) startWalk() { clear(u.seen) }

// sweep ends a walk over every landed pending part: a part it did not find
// unreadable (its row is no longer pending, another instance settled it)
// is forgotten.
func (u *unreadable[K]) sweep() {
	for k := range u.why {
		if !u.seen[k] {
			delete(u.why, k)
			delete(u.at, k)
			delete(u.logged, k)
		}
	}
}

// len is how many keys have a problem.
func (u *unreadable[K]) len() int { return len(u.why) }

// noteUnreadableQueue follows q's problem (inventory.RedoQueueRead.Problem:
// its entries stop before an entry whose part record cannot be read): it
// logs it (when new or changed, and every unreadableLogEvery while it
// lasts) and counts the queue in shardis_sync_unreadable_queues, until a
// read of the queue gets to that offset or past it, which is logged once.
// pos is the queue's committed position the read was made from.
func (w *worker) noteUnreadableQueue(q inventory.RedoQueueRead, pos int64) {
	if p := q.Problem; p != nil {
		w.s.m.setUnreadable(w.node, q.Queue, true)
		if w.unreadQ.note(q.Queue, p.Why, p.Offset, time.Now()) {
			w.s.log.Warn("REDO ENTRY UNREADABLE: the part record of the queue's next entry cannot be read (corrupt, or gone "+
				"while the node lists the part pending or set aside: repair it by hand); the queue is landed up to it and waits "+
				"there, the node's other queues land as usual",
				"node", w.node, "incarnation", w.inc, "queue", q.Queue, "offset", p.Offset, "part", p.PartID, "key", p.Key, "why", p.Why)
		}
		return
	}
	at, ok := w.unreadQ.offset(q.Queue)
	if ok && pos+q.Trimmed+int64(len(q.Entries)) >= at {
		w.unreadQ.clear(q.Queue)
		w.s.m.setUnreadable(w.node, q.Queue, false)
		w.s.log.Info("redo entry readable again: the queue lands past it", "node", w.node, "incarnation", w.inc,
			"queue", q.Queue, "offset", at)
	}
}

// noteUnreadableParts follows the parts of list (landed pending rows)
// whose record states (PartStates' reply for them) says cannot be read:
// each is logged when new or changed, and every unreadableLogEvery while
// it lasts, and once when it reads again; shardis_sync_unreadable_parts
// counts them.
func (w *worker) noteUnreadableParts(list []pendingRow, states []inventory.PartSnapshot) {
	now := time.Now()
	for i, s := range states {
		r := list[i]
		switch {
		case s.State == inventory.PartUnreadable:
			if w.unreadP.note(r.part, s.Problem, 0, now) {
				w.s.log.Warn("PART RECORD UNREADABLE: a landed pending part's record cannot be read (corrupt, or gone while "+
					"the node lists the part pending or set aside: repair it by hand); its row stays pending until it reads "+
					"again, the node's other rows follow their parts",
					"node", w.node, "part", r.part, "order", r.order, "incarnation", r.key.inc, "queue", r.key.queue,
					"offset", r.key.off, "why", s.Problem)
			}
		case w.unreadP.clear(r.part):
			w.s.log.Info("part record readable again: its row follows it", "node", w.node, "part", r.part, "state", s.State.String())
		}
	}
	w.s.m.unreadableParts.WithLabelValues(w.node).Set(float64(w.unreadP.len()))
}
