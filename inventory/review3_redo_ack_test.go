package inventory

import (
	"errors"
	"strings"
	"testing"

	"github.com/shardis/shardis/node"
)

// Break 2 (the library): a consumer read entries at incarnation A, all
// pending; the node was accepted (incarnation B, its data kept) and the
// parts were confirmed; the consumer, resuming, acknowledges the last
// offset it read. The acknowledgement must not let the trim remove what
// the consumer never read at B (the parts confirmed: its system of record
// would keep them pending for ever). Before AckRedoLogAt, the consumer
// could only call AckRedoLog, which acknowledged at B, and the trim
// removed both entries. Acknowledged at the incarnation it read at, it is
// refused on the node (ErrIncarnation, naming both), nothing is
// acknowledged and nothing trimmed; at B it goes through.
func TestReview3StaleAckTrimsUnreadEntries(t *testing.T) {
	e := newStagedEnv(t)
	one := []Item{{Route: "a", SKU: "s", Quantity: 1}}
	var last Receipt
	for _, id := range []string{"r3-1", "r3-2"} {
		res, err := e.inv.Reserve(e.ctx, id, one, "", stagedTTL)
		if err != nil {
			t.Fatal(err)
		}
		last = res.Receipts[0]
	}
	q := invQueue(t, last.RedoLog)
	read, err := e.inv.ReadRedoPage(e.ctx, last.Node, q, 0, 10)
	if err != nil || len(read.Entries) != 2 || read.Entries[1].State != "pending" || read.Incarnation == "" {
		t.Fatalf("ReadRedoPage = %+v, %v; want two pending entries and the incarnation", read, err)
	}
	if _, err := e.r.AcceptNode(e.ctx, last.Node); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"r3-1", "r3-2"} {
		if _, err := e.inv.Confirm(e.ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	incB := e.clients[last.Node].HGet(e.ctx, stampKey, "incarnation").Val()
	_, err = e.inv.AckRedoLogAt(e.ctx, last.Node, read.Incarnation, RedoCursor{Queue: q, After: last.Offset})
	if !errors.Is(err, ErrIncarnation) || !strings.Contains(err.Error(), read.Incarnation) || !strings.Contains(err.Error(), incB) {
		t.Fatalf("AckRedoLogAt(%s) on a node at %s: %v; want ErrIncarnation naming both", read.Incarnation, incB, err)
	}
	if v, _ := e.clients[last.Node].HGet(e.ctx, keyRedoAcked, last.RedoLog).Result(); v != "" {
		t.Errorf("acknowledged offset %q after the refused ack; want none", v)
	}
	if n, err := e.inv.TrimRedoLog(e.ctx, last.Node, 0, 100); err != nil || n != 0 {
		t.Fatalf("TrimRedoLog after an acknowledgement of what was read at the earlier incarnation = %d, %v; want 0: the confirmed entries were never read", n, err)
	}
	// reread at B: the confirmed entries are there; acknowledged at B, trimmed
	again, err := e.inv.ReadRedoPage(e.ctx, last.Node, q, 0, 10)
	if err != nil || again.Incarnation != incB || len(again.Entries) != 2 || again.Entries[1].State != "confirmed" {
		t.Fatalf("ReadRedoPage at B = %+v, %v; want both entries confirmed at %s", again, err, incB)
	}
	if a, err := e.inv.AckRedoLogAt(e.ctx, last.Node, incB, RedoCursor{Queue: q, After: last.Offset}); err != nil || a != last.Offset {
		t.Fatalf("AckRedoLogAt(%s) = %d, %v; want %d", incB, a, err, last.Offset)
	}
	if n, err := e.inv.TrimRedoLog(e.ctx, last.Node, 0, 100); err != nil || n != 2 {
		t.Fatalf("TrimRedoLog after the acknowledgement at B = %d, %v; want 2", n, err)
	}
}

// The incarnation ReadRedoPage reports is the node's stamp, read in the
// same script call as the entries, not the router's cached one: after
// another process accepted the node (its stamp written here, so no probe
// of this process saw it), the page is labelled with the node's.
func TestReview3ReadRedoPageIncarnationIsTheNodes(t *testing.T) {
	e := newStagedEnv(t)
	res, err := e.inv.Reserve(e.ctx, "r3-inc", []Item{{Route: "a", SKU: "s", Quantity: 1}}, "", stagedTTL)
	if err != nil {
		t.Fatal(err)
	}
	r := res.Receipts[0]
	n, err := e.r.Node(r.Node)
	if err != nil {
		t.Fatal(err)
	}
	cached := n.Incarnation()
	if err := e.clients[r.Node].HSet(e.ctx, node.StampKey, "incarnation", "review3-other").Err(); err != nil {
		t.Fatal(err)
	}
	p, err := e.inv.ReadRedoPage(e.ctx, r.Node, invQueue(t, r.RedoLog), 0, 10)
	if err != nil || p.Incarnation != "review3-other" || len(p.Entries) != 1 {
		t.Fatalf("ReadRedoPage = %+v, %v; want the node's incarnation review3-other (cached: %s) and the entry", p, err, cached)
	}
}

// ReadRedoPage reports trimmed and rewound as ReadRedoBatch does, and
// refuses a negative after naming it; ReadRedoLog still reads a negative
// after from the start.
func TestReview3ReadRedoPageTrimmedRewound(t *testing.T) {
	e := newStagedEnv(t)
	var rs []Receipt
	for _, id := range []string{"r3-a", "r3-b", "r3-c"} {
		res, err := e.inv.Reserve(e.ctx, id, []Item{{Route: "a", SKU: "s", Quantity: 1}}, "", stagedTTL)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.inv.Confirm(e.ctx, id); err != nil {
			t.Fatal(err)
		}
		rs = append(rs, res.Receipts[0])
	}
	nn, q := rs[0].Node, invQueue(t, rs[0].RedoLog)
	if _, err := e.inv.AckRedoLogAt(e.ctx, nn, "", RedoCursor{Queue: q, After: rs[1].Offset}); err != nil {
		t.Fatal(err)
	}
	if n, err := e.inv.TrimRedoLog(e.ctx, nn, 0, 100); err != nil || n != 2 {
		t.Fatalf("TrimRedoLog = %d, %v; want 2", n, err)
	}
	b, err := e.inv.ReadRedoBatch(e.ctx, nn, "", []RedoCursor{{Queue: q}}, 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.inv.ReadRedoPage(e.ctx, nn, q, 0, 10)
	if err != nil || p.Trimmed != rs[1].Offset || p.Trimmed != b.Queues[0].Trimmed || p.Head != rs[2].Offset ||
		p.Rewound || len(p.Entries) != 1 || p.Entries[0].Offset != rs[2].Offset {
		t.Fatalf("ReadRedoPage after 0 = %+v, %v; want trimmed %d (ReadRedoBatch: %d), head %d, the last entry", p, err, rs[1].Offset, b.Queues[0].Trimmed, rs[2].Offset)
	}
	if p, err := e.inv.ReadRedoPage(e.ctx, nn, q, rs[2].Offset, 10); err != nil || p.Trimmed != 0 || p.Rewound || len(p.Entries) != 0 {
		t.Fatalf("ReadRedoPage at the head = %+v, %v; want nothing missed, no entry", p, err)
	}
	if p, err := e.inv.ReadRedoPage(e.ctx, nn, q, rs[2].Offset+1, 10); err != nil || !p.Rewound || len(p.Entries) != 0 {
		t.Fatalf("ReadRedoPage past the head = %+v, %v; want rewound", p, err)
	}
	if _, err := e.inv.ReadRedoPage(e.ctx, nn, q, -1, 10); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "after -1") {
		t.Fatalf("ReadRedoPage after -1: %v; want ErrInvalid naming after", err)
	}
	if en, err := e.inv.ReadRedoLog(e.ctx, nn, q, -5, 10); err != nil || len(en) != 1 {
		t.Fatalf("ReadRedoLog after -5 = %+v, %v; want the entry left (read from the start)", en, err)
	}
}
