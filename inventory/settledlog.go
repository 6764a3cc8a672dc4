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
// part when entries it did not read were trimmed ([SettledCursor.Advance]
// reports the gap) and at a new incarnation, and now and then anyway: a
// part's state also changes without an entry when its record outlives
// inventory.retention (it reads as missing) or when a release before this
// one settled it.

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
}

// SettledCursor is a consumer's place in a node's settled log: the last
// entry it read (ID; "" before the first) and how many entries the log had
// been given up to that one (Seq). The zero cursor is before the log's
// first entry.
type SettledCursor struct {
	ID  string // the stream id of the last entry read; "" before the first
	Seq int64  // the number of entries the log had been given up to ID's; 0 before the first
}

// after is the XRANGE start after c: exclusive of c's entry.
func (c SettledCursor) after() string {
	if c.ID == "" {
		return "0-0"
	}
	return c.ID
}

// Advance returns the cursor past r, a read after c, and whether entries
// after c were trimmed before r read them, or the log is not the one c was
// in (it was deleted, or the node went back to older data): then the
// entries between c and r's are unknown, and the consumer must re-read
// every part it holds as pending. The rule: the log's first entry is entry
// number Added-Length+1; the entries after c start at number c.Seq+1.
func (c SettledCursor) Advance(r SettledRead) (SettledCursor, bool) {
	first := r.Added - r.Length // entries given before the log's first
	n := int64(len(r.Entries))
	next := c
	if n > 0 {
		next.ID = r.Entries[n-1].ID
	}
	switch {
	case r.Added < c.Seq:
		// not the log c read: start again before its first entry (what r
		// read after c's id may not be all of it)
		return SettledCursor{Seq: first}, true
	case first > c.Seq:
		// trimmed past c: r read from the log's first entry on
		next.Seq = first + n
		return next, true
	}
	next.Seq = c.Seq + n
	return next, false
}

// settledReadScript reads the settled log after a cursor. KEYS: 1 stamp,
// 2 the log. ARGV: 4 the cursor's id (exclusive), 5 the most entries.
// Returns {incarnation, entries-added, length, {id, part id, …}}.
var settledReadScript = newScript("settled-read", false, luaFile("settled_read.lua"))

// ReadSettled returns up to limit entries of node's settled log after
// cursor, with what [SettledCursor.Advance] needs to tell a gap, in one
// atomic step. limit is 1 to 10000.
func (inv *Inventory) ReadSettled(ctx context.Context, nodeName string, cursor SettledCursor, limit int) (SettledRead, error) {
	if limit <= 0 || limit > 10000 {
		return SettledRead{}, fmt.Errorf("%w: limit %d, want 1 to 10000", ErrInvalid, limit)
	}
	n, err := inv.ownNode(nodeName)
	if err != nil {
		return SettledRead{}, err
	}
	v, err := inv.run(ctx, n, settledReadScript, []string{SettledLogKey}, cursor.after(), limit)
	if err != nil {
		return SettledRead{}, err
	}
	return decodeSettledRead(n.Name(), v)
}

// decodeSettledRead reads settledReadScript's reply.
func decodeSettledRead(nodeName string, v any) (SettledRead, error) {
	r := newReplyReader(nodeName, settledReadScript.name)
	raw := r.list(v, 4)
	if r.err != nil {
		return SettledRead{}, r.err
	}
	out := SettledRead{Incarnation: r.str(raw, 0), Added: r.int(raw, 1), Length: r.int(raw, 2)}
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
