package inventory

import (
	"context"
	"fmt"
	"testing"
)

// The queue's rules, without nodes: one slot, calls queued behind it,
// batches of one epoch token each and at most size calls, a call taken
// off before it is sent, the slot given back.
func TestBatchQueue(t *testing.T) {
	var q batchQueue[string, *int]
	calls := make([]*int, 6)
	for i := range calls {
		calls[i] = new(int)
		*calls[i] = i
	}
	if !q.enter("s", calls[0], "a", 1) {
		t.Fatal("the first call did not get the free slot")
	}
	for i, tok := range []string{"a", "a", "a", "b", "a"} {
		if q.enter("s", calls[i+1], tok, 1) {
			t.Fatalf("call %d got a slot while one batch was under way", i+1)
		}
	}
	if !q.leave("s", calls[5]) || q.leave("s", calls[5]) {
		t.Fatal("leave: a queued call is taken off once")
	}
	var sent []string
	q.drain(context.Background(), 2, nil, func(_ context.Context, _ string, token string, batch []*int) {
		s := token + ":"
		for _, c := range batch {
			s += fmt.Sprint(*c)
		}
		sent = append(sent, s)
	})
	if fmt.Sprint(sent) != "[a:12 a:3 b:4]" {
		t.Errorf("batches %v, want [a:12 a:3 b:4]", sent)
	}
	if q.inflight != 0 || q.waiting != 0 || len(q.lines[0].queue) != 0 || len(q.lines[0].tokens) != 0 {
		t.Errorf("after drain: %d under way, %d waiting, %d queued, %d tokens", q.inflight, q.waiting, len(q.lines[0].queue), len(q.lines[0].tokens))
	}
	if q.leave("s", calls[1]) {
		t.Error("leave found a call that was sent")
	}
}

// The lines share the node's slots: a call of another line queues while
// they are taken (and takes a free one only when no call waits, of any
// line), and the batches that follow take the lines in turn, each batch of
// one line.
func TestBatchQueueLinesShareSlots(t *testing.T) {
	var q batchQueue[string, *int]
	calls := make([]*int, 8)
	for i := range calls {
		calls[i] = new(int)
		*calls[i] = i
	}
	if !q.enter("x", calls[0], "a", 2) || !q.enter("y", calls[1], "a", 2) {
		t.Fatal("two lines did not get the node's two free slots")
	}
	for i, line := range []string{"x", "y", "z", "x", "x", "y"} {
		if q.enter(line, calls[i+2], "a", 2) {
			t.Fatalf("call %d of line %s got a slot while both were taken", i+2, line)
		}
	}
	if q.waiting != 6 {
		t.Fatalf("%d calls waiting, want 6", q.waiting)
	}
	var sent []string
	send := func(_ context.Context, line, token string, batch []*int) {
		s := line + ":"
		for _, c := range batch {
			s += fmt.Sprint(*c)
		}
		sent = append(sent, s)
	}
	q.drain(context.Background(), 32, nil, send)
	if fmt.Sprint(sent) != "[x:256 y:37 z:4]" {
		t.Errorf("batches %v, want [x:256 y:37 z:4] (each line's calls in one batch, the lines in turn)", sent)
	}
	if q.inflight != 1 || q.waiting != 0 {
		t.Errorf("after one drain: %d under way (want the other batch's 1), %d waiting", q.inflight, q.waiting)
	}
	if q.enter("z", calls[7], "a", 2) != true {
		t.Error("a call found a free slot and no call waiting, but was queued")
	}
}
