package inventory

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The redo log's layout. Queue q of a node hands out offsets 1, 2, 3 …
// (the last one handed out, its head, is field RedoLogKey(q) of
// [RedoOffsetsKey]); the entry at offset o, score o and member the part
// id, is in the segment RedoLogKey(q) + ":s" + o/32, a sorted set of at
// most 32 entries that Redis keeps as a listpack (about 37 bytes an entry
// against 125 in one big sorted set: BENCHMARKS.md, "Record layouts,
// measured"). Two releases before kept a queue's entries elsewhere, and
// those stay where they are until trimmed; nothing is written there any
// more:
//   - the release before the segments kept every entry in RedoLogKey(q)
//     itself;
//   - the release before this one kept them in segments of 100 offsets,
//     RedoLogKey(q) + ":" + o/100 (redoSegmentKeyV1). Adding an entry at
//     the end of a listpack sorted set walks it twice (Redis looks the
//     member up, then the score's place): at 32 offsets an entry costs
//     the node half the instructions it did at 100 (counted under
//     callgrind), and a one-item order 1.3-2.0 µs less script time (in
//     group calls of 20 orders, 12.1 → 10.7 and 13.7 → 11.7 µs).
//
// What the listpacks cost the writes: adding an entry to a listpack
// sorted set walks it twice (Redis's zzlFind looks for the member, then
// zzlInsert walks to the place of the highest score, the end), about
// 7,800 node instructions per entry in a 32-offset segment, where a
// skiplist takes about 1,900 (callgrind, zsetAdd's callees, the reserve
// script's take in 20-call groups). A layout that kept this release's
// entries in one sorted set per queue, made a skiplist by a pad member
// over zset-max-listpack-value bytes (as [RedoOffsetsPad] keeps the
// offsets hash a hash table), was built and measured (2026-11-30): under
// callgrind a take cost 51,100 instructions against 57,600, a local
// reserve 52,500 against 58,500, a take of a cold SKU 127,200 against
// 133,000; but timed, in the bench's interleaved rounds against the
// floor (9 rounds each, the two builds alternating), a minted hot-SKU
// order's node CPU did not move (13.1 µs against 12.9) and a hashed one's
// fell 5 % (29.5 against 31.0), orders/s against the floor 0.773 against
// 0.755 and 0.830 against 0.802, within the rounds' spread, while node
// memory per pending order rose from 303 to 395 bytes (a skiplist entry
// takes 105-126 bytes, a listpack segment's 42-43: the bench's "Record
// layouts, measured", two runs; a log its sync has not landed would take
// about 2.5 times the memory). A skiplist of a hot queue's hundreds of
// thousands of entries is pointer chasing that callgrind does not price.
// Not kept. (Segments of 32 made skiplists by the pad cost 174 bytes an
// entry.)
//
// Field RedoLogKey(q) + ":s" of [RedoOffsetsKey] holds the queue's first
// offset in the 32-offset segments: the first script call of this
// release that hands out an offset of the queue writes it, in the same
// HSET as the head (flush in lua/prelude.lua), and nothing changes it
// after. Offsets below it are in the older places.
//
// What a queue holds at any moment is one run of offsets, low..head, with
// no gap: low-1 and everything under it was trimmed. The run is split in
// up to three parts, in this order: the entries in the queue's own key,
// those in 100-offset segments (each part only after an upgrade, all below
// the next part's first offset), then the 32-offset segments from the
// first one holding an entry to head's. Each kind of segment that holds
// entries holds one run of segments, each with at least one entry, ending
// at the segment of its highest offset (the field's offset - 1 for the
// 100-offset ones, head for the others). The rule that keeps every
// interleaving safe: every step that changes a queue is one script,
// atomic on its node, and keeps the run whole. A reserve appends at
// head+1 to head's segment (checking the segment's type before any
// write, redo_ok); a trim removes only from low up, in the queue's own
// key first, then the 100-offset segments, then the others; nothing else
// writes the entries. So a reader (one script too) finds the entries past
// a cursor by reading the queue's own key, then each kind of segment from
// the cursor's on; when the cursor's segment was trimmed away, the lowest
// segment left is found by a binary search over which segments exist:
// lua/redo_log.lua. An upgrade needs no migration step: the old entries
// are read, acknowledged and trimmed where they are, and a queue with
// none left is all 32-offset segments. An earlier release does not read
// the 32-offset segments: do not go back to one before the log is
// landed and trimmed (README, "Upgrading shardis").

// What a trim removes. An entry goes only once its part is settled, and
// acknowledged or (max age > 0) older than the max age; a part whose
// record is gone counts as settled long ago (a settled record lives out
// its retention and expires; its entry is then an expired one,
// [RedoEntry].State) — except while the node lists the part undecided:
// the pending index holds the entry's place ("queue:offset",
// [PendingKey]) or the part's id, or the stuck index its id (stuck.go;
// pend_listed of lua/pending_index.lua). Then the part was pending when
// its record went (its node lost acknowledged writes, or the record was
// deleted or evicted: a pending record has no TTL), its units are still
// reserved, and the entry is how the index names it: with the entry, the
// expiry lists the part by its id and sets it aside, listed stuck with
// its units, and once its record is repaired a retry
// ([Inventory.RetryStuck]) puts it back in the pending index under its
// place, where the reconciler settles it by its order's decision; without
// it, the place names no part and is dropped as a stale member, the
// units reserved for good and nothing reported. So such an entry stays,
// and the queue's trim stops at it, as at a pending part, until the part
// is settled: by its repaired record, or, set aside, by the operator's
// values of what the record held ([Inventory.SettleStuckLost]), which
// write its record settled (the entry then reads as settled, in that
// state, and goes once acknowledged). A cancel or an abort does not
// write such a part a tombstone when it sees it listed (settleScript: it
// answers "lost"). One that cannot see it (the part listed by its place
// alone, the place not given: a one-round order decided before its
// commit landed) writes it, as it must for a take that has not landed;
// a tombstone of a part the node lists was written over its lost record
// (a take never lands where a record is), so every reader here counts it
// as that record gone (pend_lost): the trim keeps the entry, the expiry
// does not drop the member, neither reads it settled cancelled with qty
// 0. A record that is there but cannot be read stops the trim too (its
// part may be pending). lua/redo_write.lua's trim op is
// the one place this is decided.
//
// The readers hold to the same rule: such a part is never an "expired"
// entry (a consumer lands that as a final state, the part's units counted
// neither reserved nor sold, never corrected once it settles): its record
// is reported as one that cannot be read, its state unknown
// (lua/lib_redo_entry.lua, [Inventory.ReadRedoBatch]'s Problem, the
// [ErrCorrupt] of [Inventory.ReadRedoPage], [PartUnreadable] from
// [Inventory.PartStatesAt]), until it is repaired or settled.

// The offsets hash's encoding. A script call reads a queue's two fields
// (its head and its first offset in the segments) once per queue, and
// writes the head back once: with the default 50 queues the hash has 100
// short fields, which Redis keeps as a listpack (up to
// hash-max-listpack-entries, 128, and values of at most
// hash-max-listpack-value, 64 bytes) and walks from its start for each
// field, about 11,000 node instructions per part on the 3-item rows,
// whose orders' SKUs differ from call to call (callgrind: every new SKU
// of a call reads its queue's fields afresh). Field [RedoOffsetsPad]
// holds redoOffsetsPadText, longer than 64 bytes, so Redis keeps the
// hash as a hash table, for good: a field is then one lookup. The first
// script call that records a queue's first offset (flush, lua/prelude.lua)
// and every stock load (lua/load.lua) set it when it is missing; nothing
// reads it, and [RedoHeads] leaves it out. It only makes the node
// faster: a hash without it (a node whose queues all had their first
// offsets before this release, until its next stock load) reads the same.

// RedoOffsetsPad is the field of [RedoOffsetsKey] that is neither a
// queue's head nor its first offset: its value, redoOffsetsPadText, is
// there only to keep the hash a hash table (see above).
const RedoOffsetsPad = "~encoding"

// redoOffsetsPadText is RedoOffsetsPad's value (REDO_PAD_TEXT of
// lua/prelude.lua): over 64 bytes, so that Redis does not keep the hash
// as a listpack.
const redoOffsetsPadText = "over 64 bytes, so that Redis keeps this hash as a hash table: one lookup per field, not a walk (inventory/redolog.go)"

// redoSegmentSize is how many consecutive offsets one segment of a queue
// holds (REDO_SEG of lua/redo_log.lua); redoSegmentSizeV1 is the release
// before's (REDO_SEG_V1).
const (
	redoSegmentSize   = 32
	redoSegmentSizeV1 = 100
)

// redoSegmentKey is the segment of queue key queueKey that holds offset
// off (redo_seg of lua/redo_log.lua): where this release writes it.
func redoSegmentKey(queueKey string, off int64) string {
	return queueKey + ":s" + strconv.FormatInt(off/redoSegmentSize, 10)
}

// redoSegmentKeyV1 is the segment of queue key queueKey where the release
// before this one wrote offset off (redo_segkey_v1 of lua/redo_log.lua).
func redoSegmentKeyV1(queueKey string, off int64) string {
	return queueKey + ":" + strconv.FormatInt(off/redoSegmentSizeV1, 10)
}

// RedoFirstSuffix ends the field of [RedoOffsetsKey] that holds a queue's
// first offset in 32-offset segments (the queue's key, then this:
// redo_first_field of lua/prelude.lua); every other field but
// [RedoOffsetsPad] is a queue's head ([RedoHeads]).
const RedoFirstSuffix = ":s"

// RedoHeads returns the queue heads (queue key → last offset handed out)
// in fields, a node's [RedoOffsetsKey] hash as HGETALL reads it, leaving
// out its other fields (a queue's first offset in the segments of this
// release, and [RedoOffsetsPad]: redolog.go). A head that is not an
// integer is an ErrCorrupt error naming the field.
func RedoHeads(node string, fields map[string]string) (map[string]int64, error) {
	heads := make(map[string]int64, len(fields))
	for q, h := range fields {
		if strings.HasSuffix(q, RedoFirstSuffix) || q == RedoOffsetsPad {
			continue
		}
		head, err := strconv.ParseInt(h, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: node %s: %s %s holds %q, not an integer", ErrCorrupt, node, RedoOffsetsKey, q, h)
		}
		heads[q] = head
	}
	return heads, nil
}

// redoReadScript reads one redo-log queue.
// KEYS: 1 stamp, 2 offsets hash, 3 queue, 4 acked hash. ARGV: 4 after
// offset (0 or more), 5 limit, 6 part id at after ("" = not checked;
// absent reads as ""). Returns {incarnation, head, rewound 0/1, entries,
// trimmed}: the node's incarnation and the queue's head, read in the
// same call; rewound 1 (and no entries) when after is past the head, or
// when ARGV 6 is set, after > 0 and the queue no longer holds that part
// at after (redo_position.go); the entries with offset > after,
// each in the form redoEntryLua builds; and
// how many offsets right past after have no entry left (trimmed), as
// redoBatchScript counts them. SHARDIS_CORRUPT when the queue's head is
// not an integer, or when an entry's part record is there but cannot be
// read, or is gone while the node lists the part undecided (naming the
// queue, the offset, the part and its key).
var redoReadScript = newScript("redo-read", false, redoEntryLua+luaFile("redo_read.lua"))

// redoEntryLua defines redoEntry(part id, offset, queue key): one redo
// entry as {offset, part id, order, sku, qty, state, at, settled_at,
// counter key}, read from the part's record (partPrefix .. id, see
// lua.go); state "expired" when the record is gone. A record that is
// there but cannot be read is no entry: nil, its key and why (part_try),
// which the reading script reports, never an entry read as expired; and
// so is a record gone while the node lists the part undecided ("What a
// trim removes").
var redoEntryLua = luaFile("lib_redo_entry.lua")

// redoWriteScript acknowledges and trims a node's redo log.
// KEYS: 1 stamp, 2 acked hash, 3 offsets hash, then queue keys. ARGV: 4
// op:
//
//	ack   5 offset (KEYS[4]), 6 incarnation ("" = any), 7 part id at
//	      the offset ("" = not checked): raise the acknowledged offset;
//	      never lowers it. Returns the acknowledged offset. At another
//	      incarnation than 6 (when not ""), refused with
//	      SHARDIS_INCARNATION naming both, before anything else is read;
//	      when the queue no longer holds part 7 at the offset
//	      (redo_position.go), SHARDIS_REWOUND. An offset past the queue's head
//	      (the last offset handed out, in inv:redo:offsets) is refused with
//	      SHARDIS_RANGE naming both; a head or acknowledged offset that is
//	      not an integer with SHARDIS_CORRUPT.
//	trim  5 max age ms, 6 batch: from the head of each queue, remove up to
//	      batch entries whose part is settled (or gone, and listed
//	      neither pending nor stuck: "What a trim removes" above) and that are
//	      acknowledged or, when max age > 0, older than max age; stop at
//	      the first that is not. Returns {count, full}: full is 1 when
//	      some queue had batch entries removed and met none that must
//	      stay (it may hold more that may go), else 0.
//
// Trimming only ever removes a prefix, so the offsets left stay gap-free.
var redoWriteScript = newScript("redo-write", true, luaFile("redo_write.lua"))

// RedoEntry is one deduction in a redo log.
type RedoEntry struct {
	// Offset is the entry's place in its queue: from 1, gap-free per
	// (node, queue).
	Offset int64
	// PartID is the id of the part whose take the entry records.
	PartID string
	// OrderID is the order the part belongs to; "" when the part's
	// record is gone.
	OrderID string
	// SKU is the SKU the part took; "" when the part's record is gone.
	SKU string
	// Quantity is the units the part took; 0 when its record is gone.
	Quantity int64
	// State is the part's state now: "pending", "confirmed", "cancelled",
	// or "expired" when its record is gone (it outlived
	// inventory.retention). A record that is there but cannot be read is
	// never an entry, nor is a record gone while the node lists its part
	// pending or set aside (lost while pending, its units reserved still:
	// "What a trim removes"): the reads report it instead
	// ([RedoQueueRead].Problem; [ErrCorrupt] from ReadRedoLog and
	// ReadRedoPage).
	State string
	// At is when the deduction was made, by the node's clock.
	At time.Time
	// SettledAt is when the part was confirmed or cancelled, by the
	// node's clock; zero while it is pending or when its record is gone.
	SettledAt time.Time
	// Route is the route key of the SKU; "" when the part's record is
	// gone.
	Route string
}

// ReadRedoLog returns up to limit entries of queue (0 ≤ queue <
// inventory.redo_queues) on node with offset > after, in offset order. A
// consumer replays them and resumes from the last offset it saw;
// offsets are gap-free per (node, queue). A queue whose head on the node
// is not an integer is [ErrCorrupt], not an empty queue, and so is an
// entry whose part record is there but cannot be read (the error names
// the offset, the part and its key; the entries before it are not
// returned: read up to it with a smaller limit), or gone while the node
// lists its part pending or set aside ("What a trim removes"). It reports
// neither the node's incarnation nor offsets trimmed past after: a
// consumer uses [Inventory.ReadRedoPage], which does. A negative after
// reads from the start, and an after of [MaxRedoOffset] or more returns
// no entries (no offset is past it), where ReadRedoPage refuses both
// with [ErrInvalid]. With durability replica or aof, entries are
// returned only once a replica has them, as ReadRedoPage's.
func (inv *Inventory) ReadRedoLog(ctx context.Context, nodeName string, queue int, after int64, limit int) ([]RedoEntry, error) {
	if _, err := inv.redoReadable(nodeName, queue, limit); err != nil {
		return nil, err
	}
	if after >= maxRedoOffset {
		// no offset is past it (a larger after reached Lua as a negative
		// number, and the queue was read from its start)
		return []RedoEntry{}, nil
	}
	p, err := inv.ReadRedoPage(ctx, nodeName, queue, max(after, 0), limit)
	if err != nil {
		return nil, err
	}
	return p.Entries, nil
}

// readRedoEntry reads element i of t as one entry built by redoEntryLua:
// {offset, part id, order, sku, qty, state, at, settled_at, counter key}.
func readRedoEntry(r *replyReader, t []any, i int) RedoEntry {
	f := r.listAt(t, i, 9)
	if r.err != nil {
		return RedoEntry{}
	}
	r.enter(i)
	defer r.leave()
	e := RedoEntry{Offset: r.int(f, 0), PartID: r.str(f, 1), OrderID: r.str(f, 2), SKU: r.str(f, 3),
		Quantity: r.int(f, 4), State: r.str(f, 5), At: time.UnixMilli(r.int(f, 6))}
	if settled := r.int(f, 7); settled > 0 {
		e.SettledAt = time.UnixMilli(settled)
	}
	e.Route, _, _ = ParseStockKey(r.str(f, 8)) // "" if the record is gone (counter '')
	return e
}

// maxRedoOffset is the largest offset the scripts hold exactly (Lua
// numbers are doubles).
const maxRedoOffset = 1 << 53

// MaxRedoOffset is the largest redo-log offset a cursor may name (2^53,
// the largest the scripts hold exactly): the reads and acknowledgements
// that take a cursor ([Inventory.ReadRedoPage], ReadRedoPageFrom,
// ReadRedoBatch, [Inventory.AckRedoLogAt], AckRedoBatch) refuse one past
// it, or below 0, with [ErrInvalid]. The older calls do not:
// [Inventory.ReadRedoLog] reads a negative after from the start and
// returns no entries for one of MaxRedoOffset or more, and
// [Inventory.AckRedoLog] acknowledges nothing for a negative offset. A
// caller that names the offset's field otherwise (the service's
// after_offset) checks it first.
const MaxRedoOffset int64 = maxRedoOffset

// AckRedoLog records that a consumer has durably applied queue's entries up
// to offset on node, allowing them to be trimmed once settled: it is
// [Inventory.AckRedoLogAt] with no incarnation (unfenced). The
// acknowledgement is taken at the node's incarnation when it runs
// (redo_log.lua, redo_acks_own): a consumer that read before the node was
// accepted, and acknowledges after, acknowledges what it did not read at
// the new incarnation. Consumers use AckRedoLogAt with the incarnation
// they read at ([RedoPage].Incarnation), or [Inventory.AckRedoBatch].
// A negative offset acknowledges nothing and returns the acknowledged
// offset; one over [MaxRedoOffset] is [ErrInvalid].
func (inv *Inventory) AckRedoLog(ctx context.Context, nodeName string, queue int, offset int64) (int64, error) {
	// a negative offset acknowledges nothing and answers the acknowledged
	// offset, as it always did
	return inv.AckRedoLogAt(ctx, nodeName, "", RedoCursor{Queue: queue, After: max(offset, 0)})
}

// RedoUnacked returns how many redo-log entries of node, over all its
// queues, no consumer has acknowledged yet: for each queue, the last
// offset handed out minus the acknowledged offset.
func (inv *Inventory) RedoUnacked(ctx context.Context, nodeName string) (int64, error) {
	n, err := inv.ownNode(nodeName)
	if err != nil {
		return 0, err
	}
	pipe := n.Client().Pipeline()
	heads := pipe.HGetAll(ctx, RedoOffsetsKey)
	acked := pipe.HGetAll(ctx, keyRedoAcked)
	inc := pipe.HGet(ctx, stampKey, "incarnation")
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return 0, nodeErr(n, err)
	}
	hs, err := RedoHeads(n.Name(), heads.Val())
	if err != nil {
		return 0, err
	}
	// acknowledgements of another incarnation count as none (redo_log.lua,
	// redo_acks_current)
	ackedAt, tagged := acked.Val()[redoAckedInc]
	current := !tagged || ackedAt == inc.Val()
	var total int64
	for q, head := range hs {
		var a int64
		if s, ok := acked.Val()[q]; ok && current {
			if a, err = strconv.ParseInt(s, 10, 64); err != nil {
				return 0, fmt.Errorf("%w: node %s: %s %s holds %q, not an integer", ErrCorrupt, n.Name(), keyRedoAcked, q, s)
			}
		}
		total += max(head-a, 0)
	}
	return total, nil
}

// TrimRedoLog removes, from the start of every queue on node (its lowest
// offsets, the oldest entries; the queues of an earlier, larger
// inventory.redo_queues too: [Inventory.RedoQueuesHeld]), up to batch
// (1..10000) entries per queue whose part is settled and that are
// acknowledged or, when maxAge > 0, older than maxAge (maxAge 0 never
// trims an unacknowledged entry). A part whose record is gone while the
// node lists it undecided (its entry's place or its id in the pending
// index, its id in the stuck index) is pending, not settled: its entry
// stays while it is listed (see "What a trim removes" in redolog.go). It
// returns how many it removed. Only a
// prefix is ever removed, so what remains stays gap-free. A queue's head
// (the last offset handed out) or acknowledged offset on the node that is
// not an integer is [ErrCorrupt] naming the node and the field, and
// nothing is removed from any queue. It is [Inventory.TrimRedoLogStep]'s
// Removed: a queue may hold more entries that may go once it returns.
func (inv *Inventory) TrimRedoLog(ctx context.Context, nodeName string, maxAge time.Duration, batch int) (int, error) {
	t, err := inv.TrimRedoLogStep(ctx, nodeName, maxAge, batch)
	return t.Removed, err
}

// RedoTrim is what one [Inventory.TrimRedoLogStep] did.
type RedoTrim struct {
	// Removed is how many entries it removed, over all queues.
	Removed int
	// More reports that some queue had a whole batch of entries removed
	// without meeting one that must stay: it may hold more that may go,
	// which another call removes. False when every queue stopped at an
	// entry that must stay, or ran out, before its batch.
	More bool
}

// TrimRedoLogStep is [Inventory.TrimRedoLog], reporting also whether a
// queue may hold more entries that may go (RedoTrim.More): a caller that
// trims a log growing faster than batch entries per queue between its
// trims calls again while it does, or the log grows without bound. The
// same rules decide what is removed: only settled entries, acknowledged
// or (maxAge > 0) older than maxAge, and only a prefix of each queue; and
// a head or acknowledged offset that is not an integer is [ErrCorrupt],
// nothing removed.
func (inv *Inventory) TrimRedoLogStep(ctx context.Context, nodeName string, maxAge time.Duration, batch int) (RedoTrim, error) {
	if batch < 1 || batch > 10000 {
		// 0 reached ZRANGE as the range 0..-1: the whole queue
		return RedoTrim{}, fmt.Errorf("%w: batch %d, want 1..10000", ErrInvalid, batch)
	}
	n, err := inv.ownNode(nodeName)
	if err != nil {
		return RedoTrim{}, err
	}
	held, err := inv.RedoQueuesHeld(ctx, nodeName)
	if err != nil {
		return RedoTrim{}, err
	}
	keys := []string{keyRedoAcked, RedoOffsetsKey}
	for q := 0; q < max(inv.cfg.RedoQueues, held); q++ {
		keys = append(keys, RedoLogKey(q))
	}
	v, err := inv.run(ctx, n, redoWriteScript, keys, "trim", ms(maxAge), batch)
	if err != nil {
		return RedoTrim{}, err
	}
	r := newReplyReader(n.Name(), redoWriteScript.name)
	raw := r.list(v, 2)
	if r.err != nil {
		return RedoTrim{}, r.err
	}
	t := RedoTrim{Removed: int(r.int(raw, 0)), More: r.flag(raw, 1)}
	return t, r.err
}

// redoLenScript counts the entries of redo-log queues.
// KEYS: 1 stamp, 2 offsets hash, then queue keys. Returns the count.
var redoLenScript = newScript("redo-len", false, luaFile("redo_len.lua"))

// RedoLogLen returns the number of entries in every queue of node (those
// of an earlier, larger inventory.redo_queues too:
// [Inventory.RedoQueuesHeld]). A queue whose head on the node is not an
// integer is [ErrCorrupt] naming the node and the field, not an empty
// queue.
func (inv *Inventory) RedoLogLen(ctx context.Context, nodeName string) (int64, error) {
	n, err := inv.ownNode(nodeName)
	if err != nil {
		return 0, err
	}
	held, err := inv.RedoQueuesHeld(ctx, nodeName)
	if err != nil {
		return 0, err
	}
	keys := []string{RedoOffsetsKey}
	for q := 0; q < max(inv.cfg.RedoQueues, held); q++ {
		keys = append(keys, RedoLogKey(q))
	}
	v, err := inv.run(ctx, n, redoLenScript, keys)
	if err != nil {
		return 0, err
	}
	return asInt64(n, redoLenScript, v)
}
