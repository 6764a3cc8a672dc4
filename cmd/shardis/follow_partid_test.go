package main

import (
	"strings"
	"testing"

	"github.com/shardis/shardis/inventory"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

// A follower's notes: a trimmed range moves the offset past it with the
// part id RedoPartTrimmed (its entry was not read), and a rewound page
// is told as a position past the head, or, at or below the head, as
// another part at the position than the one read there (the rewind the
// read's after_part_id reveals), once until the queue passes it.
func TestFollowerNotesTrimmedAndRewoundByPart(t *testing.T) {
	var errOut strings.Builder
	f := &redoFollower{c: &client{stderr: &errOut}, follow: true,
		req: &v1.ReadRedoLogRequest{Node: "n1", Queue: 3, AfterOffset: 4, AfterPartId: "p4"}}
	page := &v1.ReadRedoLogResponse{Node: "n1", Queue: 3, RedoLog: "inv:redo:3", Head: 9, Trimmed: 2}
	f.notes(page)
	if f.req.AfterOffset != 6 || f.req.AfterPartId != inventory.RedoPartTrimmed {
		t.Fatalf("after 2 trimmed past 4: offset %d part %q; want 6 and %q", f.req.AfterOffset, f.req.AfterPartId, inventory.RedoPartTrimmed)
	}
	if !strings.Contains(errOut.String(), "offsets 5..6 are gone, not read") {
		t.Fatalf("stderr %q; want the trimmed range 5..6", errOut.String())
	}
	errOut.Reset()
	f.req.AfterPartId = "p6"
	rewound := &v1.ReadRedoLogResponse{Node: "n1", Queue: 3, RedoLog: "inv:redo:3", Head: 9, Rewound: true}
	f.notes(rewound)
	f.notes(rewound)
	if got := strings.Count(errOut.String(), "offset 6 now holds another part than the one read there"); got != 1 {
		t.Fatalf("stderr %q; want the rewind by part said once", errOut.String())
	}
	errOut.Reset()
	f.notes(&v1.ReadRedoLogResponse{Node: "n1", Queue: 3, RedoLog: "inv:redo:3", Head: 9})
	f.notes(&v1.ReadRedoLogResponse{Node: "n1", Queue: 3, RedoLog: "inv:redo:3", Head: 3, Rewound: true})
	if !strings.Contains(errOut.String(), "offset 6 is past the queue's last offset 3") {
		t.Fatalf("stderr %q; want a position past the head told as such", errOut.String())
	}
}
