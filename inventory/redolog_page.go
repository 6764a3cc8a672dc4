package inventory

import (
	"context"
	"fmt"

	"github.com/shardis/shardis/node"
)

// What a consumer of one queue (AdminService.ReadRedoLog and AckRedoLog)
// needs to land the log exactly: the node's incarnation read in the same
// atomic step as the entries (a cached one may be another incarnation's:
// the node was accepted since this process last probed it), the offsets
// trimmed under its position and a position past the queue's head
// reported as ReadRedoBatch reports them, and an acknowledgement fenced
// on the incarnation it read at, checked on the node by the script that
// writes it.

// RedoPage is one read of a redo-log queue by [Inventory.ReadRedoPage]
// or [Inventory.ReadRedoPageFrom].
type RedoPage struct {
	// Incarnation is the node's stamp incarnation when the entries were
	// read (in the same script call): the offsets are this incarnation's.
	// "" when the node is not stamped.
	Incarnation string
	// Head is the last offset the queue handed out (0: none).
	Head int64
	// Rewound reports that after is past Head, or (read with a part id,
	// [Inventory.ReadRedoPageFrom]) that the entry at after holds another
	// part: the queue went back under the reader's position (the node
	// came back with older data under the same incarnation:
	// [RedoQueueRead].Rewound's notion), or the position is not this
	// node's. Entries is empty.
	Rewound bool
	// Trimmed counts the offsets right past after whose entries were
	// trimmed before this read (acknowledged, or older than
	// inventory.redo_max_age): they cannot be read any more, and Entries
	// start at after+Trimmed+1 ([RedoQueueRead].Trimmed's notion). 0 when
	// nothing past after was missed.
	Trimmed int64
	// Entries are the entries with offset > after, in offset order, at
	// most the read's limit; never nil.
	Entries []RedoEntry
}

// ReadRedoPage reads, in one atomic step on node, up to limit (1..10000)
// entries of queue (0 ≤ queue < inventory.redo_queues) with offset >
// after, with the node's incarnation, the queue's head, and what the
// queue lost under after (RedoPage.Trimmed, RedoPage.Rewound). after must
// be 0..2^53 ([ErrInvalid] naming it otherwise). A consumer resumes from
// the last offset it landed while the incarnation stays the same, and
// acknowledges with [Inventory.AckRedoLogAt] at that incarnation. A queue
// whose head on the node is not an integer is [ErrCorrupt], and so is an
// entry within the limit whose part record is there but cannot be read
// (a key of another type, a state code that is none) or is gone while the
// node lists the part pending or set aside (redolog.go, "What a trim
// removes"): the error names the queue, the offset, the part and its key,
// never an entry read as expired. It is
// [Inventory.ReadRedoPageFrom] with no part id at after: a queue that went
// back to a point at or beyond after is not seen (see there); durability
// as there.
func (inv *Inventory) ReadRedoPage(ctx context.Context, nodeName string, queue int, after int64, limit int) (RedoPage, error) {
	return inv.ReadRedoPageFrom(ctx, nodeName, RedoCursor{Queue: queue, After: after}, limit)
}

// ReadRedoPageFrom is [Inventory.ReadRedoPage] from cursor c (c.Queue,
// c.After), checking c.PartID as [Inventory.ReadRedoBatch] does, in the
// same script call: when c.PartID is not "", c.After > 0 and the queue no
// longer holds that part at c.After (redo_position.go: the entry there
// holds another part, or is gone without an acknowledgement at or past
// c.After while the part's record is not on the node at that place), the
// queue went back under the consumer (the node came back with older data
// and handed the offset out again) and the page is Rewound, with no
// entries; [RedoPartTrimmed], for a cursor whose entry was trimmed
// unread, reads any entry found there as another.
//
// With durability replica or aof, a page that returns an entry or a
// trimmed offset returns only once a replica (or the AOFs) has
// everything it read, by ReadRedoBatch's fence; otherwise the error
// wraps [ErrNotDurable] and [ErrUnavailable], and the consumer reads
// again later (durability.go, "Reads a consumer lands"). A page with
// neither (an idle poll, a rewound queue) costs no fence.
func (inv *Inventory) ReadRedoPageFrom(ctx context.Context, nodeName string, c RedoCursor, limit int) (RedoPage, error) {
	n, err := inv.redoReadable(nodeName, c.Queue, limit)
	if err != nil {
		return RedoPage{}, err
	}
	if c.After < 0 || c.After > maxRedoOffset {
		return RedoPage{}, fmt.Errorf("%w: after %d, want 0..%d", ErrInvalid, c.After, int64(maxRedoOffset))
	}
	readOn := n.ServerRun() // before the read: the fence's check (durability.go)
	v, err := inv.run(ctx, n, redoReadScript, []string{RedoOffsetsKey, RedoLogKey(c.Queue), keyRedoAcked}, c.After, limit, c.PartID)
	if err != nil {
		return RedoPage{}, err
	}
	p, err := decodeRedoPage(nodeName, v)
	if err != nil || !p.landable() {
		return p, err
	}
	if err := inv.durableFence(ctx, n, readOn); err != nil { // durability.go
		return RedoPage{}, err
	}
	return p, nil
}

// landable reports whether a consumer could move its position on by p
// ([RedoBatch].landable's rule): an entry, or offsets trimmed past after.
// Only such a page needs the durability fence.
func (p RedoPage) landable() bool { return len(p.Entries) > 0 || p.Trimmed > 0 }

// redoReadable checks a read's queue, limit and node, in that order, and
// returns the node.
func (inv *Inventory) redoReadable(nodeName string, queue, limit int) (*node.Node, error) {
	if queue < 0 || queue >= inv.cfg.RedoQueues {
		return nil, fmt.Errorf("%w: queue %d, want 0..%d", ErrInvalid, queue, inv.cfg.RedoQueues-1)
	}
	if limit <= 0 || limit > 10000 {
		return nil, fmt.Errorf("%w: limit %d, want 1..10000", ErrInvalid, limit)
	}
	n, err := inv.ownNode(nodeName)
	if err != nil {
		return nil, err
	}
	return n, nil
}

// decodeRedoPage reads redoReadScript's reply: {incarnation, head,
// rewound 0/1, entries, trimmed}.
func decodeRedoPage(nodeName string, v any) (RedoPage, error) {
	r := newReplyReader(nodeName, redoReadScript.name)
	raw := r.list(v, 5)
	if r.err != nil {
		return RedoPage{}, r.err
	}
	p := RedoPage{Incarnation: r.str(raw, 0), Head: r.int(raw, 1), Rewound: r.flag(raw, 2), Trimmed: r.int(raw, 4)}
	entries := r.listAt(raw, 3, -1)
	if r.err != nil {
		return RedoPage{}, r.err
	}
	r.enter(3)
	defer r.leave()
	p.Entries = make([]RedoEntry, 0, len(entries))
	for i := range entries {
		e := readRedoEntry(r, entries, i)
		if r.err != nil {
			return RedoPage{}, r.err
		}
		p.Entries = append(p.Entries, e)
	}
	return p, nil
}

// AckRedoLogAt records that a consumer has durably applied c.Queue's
// entries up to c.After on node, read at incarnation, allowing them to be
// trimmed once settled. It never lowers an acknowledgement; it returns
// the acknowledged offset.
//
// When incarnation is not "" and the node is at another one, nothing is
// acknowledged and the error wraps [ErrIncarnation], naming both: the
// check is made by the script that writes, against the node's own stamp,
// so no accept can come between them. incarnation "" is unfenced: the
// acknowledgement is taken at whatever incarnation the node is at
// ([Inventory.AckRedoLog]). When c.PartID is not "" and the queue no
// longer holds that part at c.After ([Inventory.AckRedoBatch]'s rule,
// redo_position.go; [RedoPartTrimmed] reads any entry found there as
// another), nothing is acknowledged and the error wraps [ErrRewound].
//
// An offset past the queue's head (the last offset handed out) is refused
// with [ErrInvalid] naming both: acknowledging entries nobody read yet
// would let them be trimmed unseen; so is one over 2^53 or below 0. A
// head or acknowledged offset on the node that is not an integer is
// [ErrCorrupt].
func (inv *Inventory) AckRedoLogAt(ctx context.Context, nodeName, incarnation string, c RedoCursor) (int64, error) {
	if c.Queue < 0 || c.Queue >= inv.cfg.RedoQueues {
		return 0, fmt.Errorf("%w: queue %d, want 0..%d", ErrInvalid, c.Queue, inv.cfg.RedoQueues-1)
	}
	if c.After < 0 || c.After > maxRedoOffset {
		return 0, fmt.Errorf("%w: offset %d, want 0..%d", ErrInvalid, c.After, int64(maxRedoOffset))
	}
	n, err := inv.ownNode(nodeName)
	if err != nil {
		return 0, err
	}
	v, err := inv.run(ctx, n, redoWriteScript, []string{keyRedoAcked, RedoOffsetsKey, RedoLogKey(c.Queue)}, "ack", c.After, incarnation, c.PartID)
	if err != nil {
		return 0, err
	}
	return asInt64(n, redoWriteScript, v)
}
