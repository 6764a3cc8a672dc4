package main

// What redo-log says on stderr about a read beyond its entries: the
// node's incarnation (what `redo-log ack --incarnation` fences on), the
// offsets trimmed before they were read, and a position past the queue's
// head. stdout stays the entries.

import (
	"fmt"

	"github.com/shardis/shardis/inventory"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

// notes reports res's incarnation (once, in the human form), a trimmed
// range (and moves the offset past it, so that it is said once, its part
// id then RedoPartTrimmed) and a rewound queue (a position past the head,
// or another part at the position than the one read there; once until
// the queue passes it again) on stderr.
func (f *redoFollower) notes(res *v1.ReadRedoLogResponse) {
	if !f.c.out.json && !f.saidInc && res.Incarnation != "" {
		fmt.Fprintf(f.c.stderr, "%s on %s: incarnation %s (acknowledge with redo-log ack --incarnation %s)\n",
			res.RedoLog, res.Node, res.Incarnation, res.Incarnation)
		f.saidInc = true
	}
	if res.Trimmed > 0 {
		from := f.req.AfterOffset + 1
		fmt.Fprintf(f.c.stderr, "%s on %s: offsets %d..%d are gone, not read (trimmed: acknowledged, or older than inventory.redo_max_age)\n",
			res.RedoLog, res.Node, from, from+res.Trimmed-1)
		f.req.AfterOffset += res.Trimmed
		f.req.AfterPartId = inventory.RedoPartTrimmed // its entry was not read
	}
	switch {
	case !res.Rewound || f.rewound:
	case f.req.AfterOffset > res.Head:
		fmt.Fprintf(f.c.stderr, "%s on %s: offset %d is past the queue's last offset %d: the queue went back under it (the node came back with older data) or the offset is not this node's\n",
			res.RedoLog, res.Node, f.req.AfterOffset, res.Head)
	default:
		fmt.Fprintf(f.c.stderr, "%s on %s: offset %d now holds another part than the one read there: the queue went back under it (the node came back with older data)\n",
			res.RedoLog, res.Node, f.req.AfterOffset)
	}
	f.rewound = res.Rewound
}
