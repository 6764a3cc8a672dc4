package inventory

import (
	"context"
	"fmt"
)

// The settled log. A consumer that keeps parts' states elsewhere (pgsync
// lands each part as a row while it is pending) must learn when a part
// leaves pending. Re-reading every pending part on every pass costs the
// node and the consumer in proportion to how many are pending, which in a
// sale with a long payment window is most of them. So every write that
// takes a part out of pending (part_put of lua/part_codec.lua writing a
// confirmed or cancelled record that is not a tombstone: a Confirm, a
// Cancel, an expiry, a refused attempt giving back) also appends the
// part's id to the node's settled log, a Redis stream at [SettledLogKey],
// in the same script: an entry exists exactly when such a write happened,
// and after it.
//
// The log is a hint, never the record: a consumer reads the part's state
// from its record ([Inventory.PartStates]) when an entry names it. It is
// bounded (about [SettledLogCap] entries, the oldest trimmed first), and
// it is lost with a node's data, so a consumer must re-read every pending
// part when entries it did not read were trimmed or the log is not the one
// it read (deleted; [SettledCursor.Advance] reports either gap) and at a
// new incarnation, and now and then anyway: a part's state also changes
// without an entry when its record outlives inventory.retention (it reads
// as missing) or when a release before this one settled it.

// SettledLogCap is about how many entries a node's settled log keeps
// (XADD MAXLEN ~, SETTLED_CAP of lua/part_codec.lua): a consumer that
// reads it every second falls behind only past this many settles in a
// second. Full, it holds about 4.5 MB of a node's memory (measured with
// 25-byte part ids, MEMORY USAGE, Redis 7.0).
const SettledLogCap = 100000

// SettledEntry is one entry of a node's settled log.
type SettledEntry struct {
	// ID is the stream entry's id ("ms-seq" by the node's clock), what a
	// cursor names.
	ID string
	// PartID is the part that left pending.
	PartID string
}

// SettledRead is one read of a node's settled log ([Inventory.ReadSettled]).
type SettledRead struct {
	// Incarnation is the node's incarnation when it was read.
	Incarnation string
	// Added is how many entries the log was given since it was created
	// (XINFO STREAM's entries-added), Length how many it holds.
	Added, Length int64
	// Entries are the entries after the cursor, oldest first.
	Entries []SettledEntry
	// Held reports that the log holds the cursor's own entry (an entry
	// whose id is the cursor's ID; never for a cursor with no ID).
	Held bool
	// First is the id of the log's first entry; "" when it holds none.
	First string
}

// SettledCursor is a consumer's place in a node's settled log: the last
// entry it read (ID; "" before the first) and how many entries the log had
// been given up to that one (Seq). The zero cursor is before the log's
// first entry.
type SettledCursor struct {
	ID  string // the stream id of the last entry read; "" before the first
	Seq int64  // the number of entries the log had been given up to ID's; 0 before the first
}

// start is the XRANGE start for a read after c: c's own entry, inclusive
// (the read reports whether the log holds it, and leaves it out), or 0-0,
// which no entry has, before the first.
func (c SettledCursor) start() string {
	if c.ID == "" {
		return "0-0"
	}
	return c.ID
}

// Advance returns the cursor past r, a read after c, and whether entries
// after c may be unknown: they were trimmed before r read them, or the log
// is not the one c was in (it was deleted and written again, or the node
// went back to data older than c's entry). Then the consumer must re-read
// every part it holds as pending.
//
// The rule. The log's entries are numbered from 1 in the order they were
// given (stream ids only grow, and trimming, MAXLEN ~, removes only the
// oldest): its first entry is number Added-Length+1, and c's entry is
// number c.Seq.
//
//   - c with an ID: the log is the one c was in, every entry after c
//     still there, when it still holds c's entry (Held) and the numbers
//     agree (Added-Length < c.Seq ≤ Added); then the cursor moves past
//     r's entries, numbered from c.Seq+1, with no gap. A log deleted and
//     written again numbers its entries from 1 anew and takes its ids
//     from the node's clock, so a count cannot tell it from the log c
//     was in once it has been given c.Seq entries; c's own entry can.
//     Otherwise there is a gap, and the cursor moves past r's entries
//     numbered from the log's first when r read from the log's first
//     entry on (its first entry is the log's First, or the log is
//     empty), else (r read after an entry with c's id in another log)
//     back to before the log's first entry, with no ID. A log trimmed
//     just up to c's entry, its next one now first, is a gap too:
//     nothing tells it from a new log trimmed at that number, and a
//     consumer meets it only when it is about [SettledLogCap] entries
//     behind.
//   - c with no ID (before the first entry it reads: the zero cursor, or
//     Seq Added-Length of an earlier read): r read from the log's first
//     entry on, so the cursor moves past r's entries numbered from the
//     log's first; there is a gap when entries after c.Seq were trimmed
//     (Added-Length > c.Seq) or the log was given fewer than c.Seq
//     (another log).
func (c SettledCursor) Advance(r SettledRead) (SettledCursor, bool) {
	first := r.Added - r.Length // entries given before the log's first
	n := int64(len(r.Entries))
	last := ""
	if n > 0 {
		last = r.Entries[n-1].ID
	}
	switch {
	case c.ID == "":
		return SettledCursor{ID: last, Seq: first + n}, first > c.Seq || c.Seq > r.Added
	case r.Held && first < c.Seq && c.Seq <= r.Added:
		next := SettledCursor{ID: c.ID, Seq: c.Seq + n}
		if n > 0 {
			next.ID = last
		}
		return next, false
	case r.Length == 0 || (n > 0 && r.Entries[0].ID == r.First):
		return SettledCursor{ID: last, Seq: first + n}, true
	}
	return SettledCursor{Seq: first}, true
}

// settledReadScript reads the settled log after a cursor. KEYS: 1 stamp,
// 2 the log. ARGV: 4 the cursor's id (read inclusive, then left out) or
// 0-0, 5 the most entries. Returns {incarnation, entries-added, length,
// {id, part id, …}, held (1: the log holds the cursor's entry), the
// log's first entry id (empty when it holds none)}.
var settledReadScript = newScript("settled-read", false, luaFile("settled_read.lua"))

// ReadSettled returns up to limit entries of node's settled log after
// cursor, with what [SettledCursor.Advance] needs to tell a gap (the
// log's counts, its first entry's id, and whether it still holds the
// cursor's own entry), in one atomic step: a range read from the cursor's
// entry on, O(log n + limit) on the node. limit is 1 to 10000.
func (inv *Inventory) ReadSettled(ctx context.Context, nodeName string, cursor SettledCursor, limit int) (SettledRead, error) {
	if limit <= 0 || limit > 10000 {
		return SettledRead{}, fmt.Errorf("%w: limit %d, want 1 to 10000", ErrInvalid, limit)
	}
	n, err := inv.ownNode(nodeName)
	if err != nil {
		return SettledRead{}, err
	}
	v, err := inv.run(ctx, n, settledReadScript, []string{SettledLogKey}, cursor.start(), limit)
	if err != nil {
		return SettledRead{}, err
	}
	return decodeSettledRead(n.Name(), v)
}

// decodeSettledRead reads settledReadScript's reply.
func decodeSettledRead(nodeName string, v any) (SettledRead, error) {
	r := newReplyReader(nodeName, settledReadScript.name)
	raw := r.list(v, 6)
	if r.err != nil {
		return SettledRead{}, r.err
	}
	out := SettledRead{Incarnation: r.str(raw, 0), Added: r.int(raw, 1), Length: r.int(raw, 2),
		Held: r.flag(raw, 4), First: r.str(raw, 5)}
	flat := r.pairsAt(raw, 3, "a list of entry id, part id pairs")
	r.enter(3)
	out.Entries = make([]SettledEntry, len(flat)/2)
	for i := range out.Entries {
		out.Entries[i] = SettledEntry{ID: r.str(flat, 2*i), PartID: r.str(flat, 2*i+1)}
	}
	r.leave()
	if r.err != nil {
		return SettledRead{}, r.err
	}
	return out, nil
}
