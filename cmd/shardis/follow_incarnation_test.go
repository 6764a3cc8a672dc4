package main

import (
	"strings"
	"testing"

	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

// A follower whose node comes back at a new incarnation (it lost its data
// and was accepted: offsets start again from 1) says so on stderr and
// follows from offset 0, its page unprinted; before, it kept its offset,
// printed nothing until the new head passed it, then skipped the new
// incarnation's first entries without a word. The first read, a read at
// the same incarnation and a one-shot read are not affected.
func TestFollowerRestartsAtANewIncarnation(t *testing.T) {
	var errOut strings.Builder
	f := &redoFollower{c: &client{stderr: &errOut}, follow: true,
		req: &v1.ReadRedoLogRequest{Node: "n1", Queue: 3, AfterOffset: 40}}
	page := func(inc string) *v1.ReadRedoLogResponse {
		return &v1.ReadRedoLogResponse{Node: "n1", Queue: 3, RedoLog: "inv:redo:3", Incarnation: inc}
	}
	if f.newIncarnation(page("aaa")) || f.newIncarnation(page("aaa")) {
		t.Fatal("the first read, or a read at the same incarnation, taken as a new incarnation")
	}
	if f.req.AfterOffset != 40 {
		t.Fatalf("offset %d after reads at one incarnation, want 40", f.req.AfterOffset)
	}
	if !f.newIncarnation(page("bbb")) {
		t.Fatal("a read at a new incarnation not noticed")
	}
	if f.req.AfterOffset != 0 || !strings.Contains(errOut.String(), "new incarnation bbb (was aaa)") {
		t.Fatalf("after a new incarnation: offset %d, stderr %q; want 0 and the change named", f.req.AfterOffset, errOut.String())
	}
	once := &redoFollower{c: f.c, req: &v1.ReadRedoLogRequest{AfterOffset: 7}}
	once.newIncarnation(page("aaa"))
	if once.newIncarnation(page("ccc")) || once.req.AfterOffset != 7 {
		t.Fatal("a one-shot read (no --follow) restarted")
	}
}
