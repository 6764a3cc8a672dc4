package inventory

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// What a database consumer of the redo log needs beyond ReadRedoLog and
// AckRedoLog (package pgsync is one): every queue of a node in one round
// trip, tied to the node's incarnation so that offsets of two
// incarnations are never mixed, a check that the node did not go back in
// time under the consumer's position, an acknowledgement that only
// applies to the incarnation it was meant for, and the current state of
// parts landed while pending.
//
// A part record that is on its node but cannot be read (a key of another
// type, a packed record whose state code is none) is never read as a part
// gone (expired, PartMissing), which a consumer would land as a final
// state: lua/part_codec.lua's part_read fails on it with SHARDIS_CORRUPT
// naming the key ([ErrCorrupt]), and the reads that go on past it report
// it instead: ReadRedoBatch stops that queue before its entry
// ([RedoQueueRead].Problem) and reads the others, PartStates reads it
// [PartUnreadable] ([PartSnapshot].Problem) and the others as usual.
//
// Nor is a part whose record is gone while the node lists it undecided
// (the pending index holds its place or id, or the stuck index its id):
// it was pending when its record went (deleted, evicted, lost with the
// node's writes), its units are reserved still, and it settles once the
// record is repaired and the part retried (stuck.go). The reads report
// it as they report a record that cannot be read (its state unknown):
// ReadRedoBatch stops its queue before the entry, ReadRedoPage and
// ReadRedoLog fail with [ErrCorrupt] naming it, PartStatesAt reads it
// [PartUnreadable] (redolog.go, "What a trim removes").

var (
	// ErrIncarnation is wrapped by [Inventory.AckRedoBatch] and
	// [Inventory.AckRedoLogAt] (with an incarnation given) when the node
	// is no longer at the incarnation the acknowledgement was for (it was
	// accepted with new data since): nothing was acknowledged.
	ErrIncarnation = errors.New("node incarnation changed")
	// ErrRewound is wrapped by [Inventory.AckRedoBatch] and
	// [Inventory.AckRedoLogAt] (with a part id given) when the queue no
	// longer holds, at an acknowledged offset, the part the consumer
	// landed there (redo_position.go): the node went back in time under
	// the same incarnation.
	ErrRewound = errors.New("redo log went back under the consumer's position")
)

// RedoCursor is a consumer's position in one queue: every entry up to
// After was landed, and the entry at After was PartID ("" when After is
// 0 or the part is not known, [RedoPartTrimmed] when it was trimmed
// unread).
type RedoCursor struct {
	Queue  int    // the queue number, 0 ≤ Queue < MaxRedoQueues (ReadRedoBatch, AckRedoBatch) or inventory.redo_queues (the one-queue calls)
	After  int64  // the offset of the last entry landed; 0 before the first
	PartID string // the part id of the entry at After, as above
}

// RedoPartTrimmed is the PartID of a cursor whose entry at After was
// trimmed when the consumer passed it (it never read it). It is no part
// id (those hold "|"), so an entry found at After later (the node went
// back to an older copy and handed the offset out again: trimming never
// brings an entry back) reads as another part: [ErrRewound], Rewound.
const RedoPartTrimmed = "trimmed"

// RedoBatch is one read of several queues of a node.
type RedoBatch struct {
	// Incarnation is the node's stamp incarnation when it was read.
	Incarnation string
	// Generation is the node's stamp generation (the acceptance
	// generation, [node.Mark].Gen) when it was read.
	Generation int64
	// DataOf is the incarnation the node's data descends from, as its
	// last stamp or accept found it (the stamp's data_of): another
	// incarnation, or this one's, for a node accepted with its data (a
	// copy, or data that went back); [node.NoEarlierData] for one that
	// came back empty, whose offsets start again with new entries; "" when
	// unknown (stamped by a release that did not record it).
	DataOf string
	// Queues is one result per cursor, in the cursors' order; empty when
	// the node was not at the incarnation asked for.
	Queues []RedoQueueRead
	// Wait, when a queue was held back (RedoQueueRead.Held), is how long
	// until the first held part of any queue is pending for hold; 0 when
	// none was held.
	Wait time.Duration
}

// RedoQueueRead is what one queue held past a cursor.
type RedoQueueRead struct {
	Queue int // the queue number, as its cursor named it
	// Head is the last offset the queue handed out; Acked the offset a
	// consumer acknowledged.
	Head, Acked int64
	// Rewound reports that the queue no longer matches the cursor: its
	// head is below After, or it no longer holds the cursor's part at
	// After (redo_position.go). The
	// node went back in time without a new incarnation; Entries is empty.
	Rewound bool
	// Entries are in offset order, from After+Trimmed+1 on.
	Entries []RedoEntry
	// Trimmed counts the offsets right past the cursor whose entries were
	// trimmed before this read (inventory.redo_max_age, or another
	// consumer's acknowledgement): they cannot be read any more. 0 when
	// the queue was not read (the limit was reached on earlier queues).
	Trimmed int64
	// Held reports that Entries stop before an entry whose part was
	// pending for less than the read's hold (by the node's clock), which
	// is left out with every entry after it.
	Held bool
	// Problem, when not nil, is the entry Entries stop before because its
	// part's record exists but cannot be read (a key of another type, a
	// packed record whose state code is none), or is gone while the node
	// lists the part pending or set aside (lost while pending, its units
	// reserved still: redolog.go, "What a trim removes"): it is left out
	// with every entry after it, as a held one is (a consumer's position
	// stays a prefix), until the record is repaired (or, gone, the part
	// leaves both indexes); the other queues of the read are read as
	// usual. Never read as a part gone (State "expired").
	Problem *RedoProblem
}

// RedoProblem is a redo-log entry whose part record is on its node but
// cannot be read, or is gone while the node lists the part undecided
// ([RedoQueueRead].Problem).
type RedoProblem struct {
	Offset int64  // the entry's offset in its queue
	PartID string // the part the entry names
	Key    string // the part's record key on the node
	Why    string // why it cannot be read, as the node's script said
}

// String names the offset, the part, its key and why.
func (p RedoProblem) String() string {
	return fmt.Sprintf("offset %d: part %s: its record %s cannot be read: %s", p.Offset, p.PartID, p.Key, p.Why)
}

// redoBatchScript reads several queues of a node.
// KEYS: 1 stamp, 2 offsets hash, 3 acked hash, then one queue key per
// cursor. ARGV: 4 incarnation expected ("" = any), 5 most entries in
// all, 6 hold ms (0: none), then per cursor: after, part id at after.
// Returns {incarnation, gen, per cursor {head, acked, rewound, entries,
// trimmed, held, problem}, wait ms, data_of}, with no queues when the
// incarnation differs;
// trimmed counts the offsets past the cursor with no entry (trimmed), for
// a queue read; held is 1 when the entries stop before a part pending for
// less than hold ms (the node's clock), and wait is the least time until
// such a part of any queue is pending for hold (0: none held); problem is
// {} or, when the entries stop before an entry whose part record cannot
// be read or is gone while its part is listed undecided (redoEntryLua),
// {offset, part id, record key, why}.
var redoBatchScript = newScript("redo-batch", false, redoEntryLua+luaFile("redo_batch.lua"))

// ReadRedoBatch reads, in one atomic step on node, every queue named by
// cursors past its cursor (any queue up to MaxRedoQueues-1, so that a
// consumer reads the queues a node kept from a larger
// inventory.redo_queues: [Inventory.RedoQueuesHeld]), at most limit entries in all (queues earlier in
// cursors first: rotate them for fairness). When incarnation is not ""
// and the node is at another one, it returns the node's incarnation and
// no queues: the cursors belong to the old incarnation and must not be
// applied to the new one.
//
// A hold > 0 (at most MaxRedoHold) stops each queue before its first part
// that is still pending and was taken less than hold ago by the node's
// clock (RedoQueueRead.Held, RedoBatch.Wait): what a consumer that lands
// only decided attempts reads, so that an attempt refused after taking
// has given its parts back by then (pgsync, "Refused attempts").
//
// An entry whose part record is on the node but cannot be read, or is
// gone while the node lists the part pending or set aside, stops its
// queue likewise, reported in RedoQueueRead.Problem; it fails neither the
// read nor the other queues (a read that failed for one bad record would
// land nothing of the node, for as long as the record stays bad).
//
// With durability replica or aof, a read that returns an entry or a
// trimmed offset returns only once a replica has everything it read
// ([ErrNotDurable] otherwise: durability.go, "Reads a consumer lands").
func (inv *Inventory) ReadRedoBatch(ctx context.Context, nodeName, incarnation string, cursors []RedoCursor, limit int, hold time.Duration) (RedoBatch, error) {
	if limit <= 0 || limit > 10000 {
		return RedoBatch{}, fmt.Errorf("%w: limit %d, want 1..10000", ErrInvalid, limit)
	}
	if hold < 0 || hold > MaxRedoHold {
		return RedoBatch{}, fmt.Errorf("%w: hold %v, want 0..%v", ErrInvalid, hold, MaxRedoHold)
	}
	n, err := inv.ownNode(nodeName)
	if err != nil {
		return RedoBatch{}, err
	}
	keys := make([]string, 0, 2+len(cursors))
	keys = append(keys, RedoOffsetsKey, keyRedoAcked)
	args := make([]any, 0, 2+2*len(cursors))
	args = append(args, incarnation, limit, hold.Milliseconds())
	for _, c := range cursors {
		if c.Queue < 0 || c.Queue >= MaxRedoQueues {
			return RedoBatch{}, fmt.Errorf("%w: queue %d, want 0..%d", ErrInvalid, c.Queue, MaxRedoQueues-1)
		}
		if c.After < 0 || c.After > maxRedoOffset {
			return RedoBatch{}, fmt.Errorf("%w: queue %d: offset %d, want 0..%d", ErrInvalid, c.Queue, c.After, int64(maxRedoOffset))
		}
		keys = append(keys, RedoLogKey(c.Queue))
		args = append(args, c.After, c.PartID)
	}
	readOn := n.ServerRun() // before the read: the fence's check (durability.go)
	v, err := inv.run(ctx, n, redoBatchScript, keys, args...)
	if err != nil {
		return RedoBatch{}, err
	}
	b, err := decodeRedoBatch(nodeName, v, cursors)
	if err != nil || !b.landable() {
		return b, err
	}
	if err := inv.durableFence(ctx, n, readOn); err != nil { // durability.go
		return RedoBatch{}, err
	}
	return b, nil
}

// landable reports whether a consumer could move a position on by b:
// an entry, or offsets trimmed past a cursor. Only such a read needs the
// durability fence (durability.go, "Reads a consumer lands"): an idle
// poll costs no write.
func (b RedoBatch) landable() bool {
	for _, q := range b.Queues {
		if len(q.Entries) > 0 || q.Trimmed > 0 {
			return true
		}
	}
	return false
}

// MaxRedoHold is the longest hold [Inventory.ReadRedoBatch] accepts.
const MaxRedoHold = time.Minute

// decodeRedoBatch reads redoBatchScript's reply to cursors: {incarnation,
// generation, queues, wait ms, data_of}, queues empty or one {head, acked,
// rewound 0/1, entries, trimmed, held 0/1, problem} per cursor, problem
// {} or {offset, part id, key, why} (why not "").
func decodeRedoBatch(nodeName string, v any, cursors []RedoCursor) (RedoBatch, error) {
	r := newReplyReader(nodeName, redoBatchScript.name)
	raw := r.list(v, 5)
	if r.err != nil {
		return RedoBatch{}, r.err
	}
	b := RedoBatch{Incarnation: r.str(raw, 0), Generation: r.int(raw, 1), Wait: time.Duration(r.int(raw, 3)) * time.Millisecond,
		DataOf: r.str(raw, 4)}
	queues := r.listAt(raw, 2, -1)
	if r.err == nil && len(queues) != 0 && len(queues) != len(cursors) {
		r.enter(2)
		r.fail(-1, fmt.Sprintf("an empty list or a list of %d (one per cursor)", len(cursors)), queues)
	}
	if r.err != nil {
		return RedoBatch{}, r.err
	}
	r.enter(2)
	defer r.leave()
	b.Queues = make([]RedoQueueRead, len(queues))
	for i := range queues {
		t := r.listAt(queues, i, 7)
		if r.err != nil {
			return RedoBatch{}, r.err
		}
		r.enter(i)
		q := RedoQueueRead{Queue: cursors[i].Queue, Head: r.int(t, 0), Acked: r.int(t, 1), Trimmed: r.int(t, 4),
			Rewound: r.flag(t, 2), Held: r.flag(t, 5)}
		entries := r.listAt(t, 3, -1)
		q.Entries = make([]RedoEntry, 0, len(entries))
		r.enter(3)
		for j := range entries {
			q.Entries = append(q.Entries, readRedoEntry(r, entries, j))
		}
		r.leave()
		q.Problem = readRedoProblem(r, t, 6)
		r.leave()
		if r.err != nil {
			return RedoBatch{}, r.err
		}
		b.Queues[i] = q
	}
	return b, nil
}

// readRedoProblem reads element i of t, a queue's problem: {} (nil) or
// {offset, part id, key, why}, why not "".
func readRedoProblem(r *replyReader, t []any, i int) *RedoProblem {
	f := r.listAt(t, i, -1)
	if r.err != nil || len(f) == 0 {
		return nil
	}
	if len(f) != 4 {
		r.fail(i, "an empty list or {offset, part id, key, why}", f)
		return nil
	}
	r.enter(i)
	defer r.leave()
	p := &RedoProblem{Offset: r.int(f, 0), PartID: r.str(f, 1), Key: r.str(f, 2), Why: r.str(f, 3)}
	if r.err == nil && p.Why == "" {
		r.fail(3, "why a record cannot be read (not empty)", f[3])
	}
	return p
}

// redoAckBatchScript acknowledges several queues of a node for one
// incarnation. KEYS: 1 stamp, 2 offsets hash, 3 acked hash, then one
// queue key per ack. ARGV: 4 incarnation, then per ack: offset, part id at
// offset. Everything is checked before anything is written.
var redoAckBatchScript = newScript("redo-ack-batch", true, luaFile("redo_ack_batch.lua"))

// AckRedoBatch records, for the incarnation a consumer read, that it
// durably landed each cursor's queue up to the cursor's offset (whose
// entry was PartID), so settled entries up to there may be trimmed. It
// never lowers an acknowledgement and returns the acknowledged offsets,
// like the cursors. Nothing is acknowledged, and the error wraps
// [ErrIncarnation], when the node is at another incarnation; [ErrRewound]
// when the queue no longer holds a cursor's part at its offset (the
// entry there holds another, or is gone unacknowledged while the part's
// record is not on the node at that place: redo_position.go); [ErrInvalid] when an
// offset is past its queue's head.
func (inv *Inventory) AckRedoBatch(ctx context.Context, nodeName, incarnation string, acks []RedoCursor) ([]int64, error) {
	if incarnation == "" {
		return nil, fmt.Errorf("%w: empty incarnation", ErrInvalid)
	}
	if len(acks) == 0 {
		return nil, nil
	}
	n, err := inv.ownNode(nodeName)
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, 2+len(acks))
	keys = append(keys, RedoOffsetsKey, keyRedoAcked)
	args := make([]any, 0, 1+2*len(acks))
	args = append(args, incarnation)
	for _, c := range acks {
		if c.Queue < 0 || c.Queue >= MaxRedoQueues {
			return nil, fmt.Errorf("%w: queue %d, want 0..%d", ErrInvalid, c.Queue, MaxRedoQueues-1)
		}
		if c.After < 0 || c.After > maxRedoOffset {
			return nil, fmt.Errorf("%w: queue %d: offset %d, want 0..%d", ErrInvalid, c.Queue, c.After, int64(maxRedoOffset))
		}
		keys = append(keys, RedoLogKey(c.Queue))
		args = append(args, c.After, c.PartID)
	}
	v, err := inv.run(ctx, n, redoAckBatchScript, keys, args...)
	if err != nil {
		return nil, err
	}
	out, err := asInt64s(n, redoAckBatchScript, v)
	if err == nil && len(out) != len(acks) {
		err = malformed(n, redoAckBatchScript, v, fmt.Sprintf("a list of %d acknowledged offsets (one per ack)", len(acks)))
	}
	return out, err
}

// RedoQueues returns the number of redo-log queues per node
// (inventory.redo_queues): new entries go to queues 0..RedoQueues()-1. A
// node keeps every queue it ever wrote, also those of an earlier, larger
// setting ([Inventory.RedoQueuesHeld]).
func (inv *Inventory) RedoQueues() int { return inv.cfg.RedoQueues }

// MaxRedoQueues is the most redo-log queues per node: inventory.redo_queues
// is 1..MaxRedoQueues, so a node's queues are numbered below it.
const MaxRedoQueues = 1024

// RedoQueuesHeld returns how many redo-log queues node holds: one more
// than the highest queue with a head (a field of [RedoOffsetsKey]), 0 when
// none. It is more than [Inventory.RedoQueues] when the node was written
// with a larger inventory.redo_queues, or by a service configured with
// more queues than this one: the entries of those queues are read and
// acknowledged like the others ([Inventory.ReadRedoBatch] and
// [Inventory.AckRedoBatch] take any queue below MaxRedoQueues), and
// [Inventory.TrimRedoLog] trims them. A field named like a queue past
// MaxRedoQueues-1, or whose number is not one, is [ErrCorrupt].
func (inv *Inventory) RedoQueuesHeld(ctx context.Context, nodeName string) (int, error) {
	n, err := inv.ownNode(nodeName)
	if err != nil {
		return 0, err
	}
	fields, err := n.Client().HKeys(ctx, RedoOffsetsKey).Result()
	if err != nil {
		return 0, nodeErr(n, err)
	}
	return redoQueuesOf(n.Name(), fields)
}

// redoQueuesOf is RedoQueuesHeld's count of the offsets hash's fields.
func redoQueuesOf(node string, fields []string) (int, error) {
	held := 0
	for _, f := range fields {
		if f == RedoOffsetsPad || strings.HasSuffix(f, RedoFirstSuffix) {
			continue
		}
		q, err := strconv.Atoi(strings.TrimPrefix(f, redoLogKeyPrefix))
		if !strings.HasPrefix(f, redoLogKeyPrefix) || err != nil || q < 0 || q >= MaxRedoQueues || f != RedoLogKey(q) {
			return 0, fmt.Errorf("%w: node %s: %s has field %q, not a redo queue 0..%d", ErrCorrupt, node, RedoOffsetsKey, f, MaxRedoQueues-1)
		}
		held = max(held, q+1)
	}
	return held, nil
}
