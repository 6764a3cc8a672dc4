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
	var q batchQueue[*int]
	calls := make([]*int, 6)
	for i := range calls {
		calls[i] = new(int)
		*calls[i] = i
	}
	if !q.enter(calls[0], "a", 1) {
		t.Fatal("the first call did not get the free slot")
	}
	for i, tok := range []string{"a", "a", "a", "b", "a"} {
		if q.enter(calls[i+1], tok, 1) {
			t.Fatalf("call %d got a slot while one batch was under way", i+1)
		}
	}
	if !q.leave(calls[5]) || q.leave(calls[5]) {
		t.Fatal("leave: a queued call is taken off once")
	}
	var sent []string
	q.drain(context.Background(), 2, true, func(_ context.Context, token string, batch []*int) {
		s := token + ":"
		for _, c := range batch {
			s += fmt.Sprint(*c)
		}
		sent = append(sent, s)
	})
	if fmt.Sprint(sent) != "[a:12 a:3 b:4]" {
		t.Errorf("batches %v, want [a:12 a:3 b:4]", sent)
	}
	if q.inflight != 0 || len(q.queue) != 0 || len(q.tokens) != 0 {
		t.Errorf("after drain: %d under way, %d queued, %d tokens", q.inflight, len(q.queue), len(q.tokens))
	}
	if q.leave(calls[1]) {
		t.Error("leave found a call that was sent")
	}
}
