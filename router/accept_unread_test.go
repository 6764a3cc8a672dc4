package router_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardis/shardis/node"
)

// TestAcceptRefusedWhenOwnTopologyUnread: an accept that cannot read the
// node's own topology stamp refuses (node.ErrUnreachable, nothing
// written) instead of taking it for a node without a token: it accepted
// n1 unfenced, its topology (epoch 1) behind its peers' (epoch 2), so an
// instance of the older topology served it (README: the accept "fails
// closed").
func TestAcceptRefusedWhenOwnTopologyUnread(t *testing.T) {
	r, srvs := reviewRouter(t, "fail", "order")
	for _, n := range []string{"n1", "n2", "n3"} {
		waitState(t, r, n, node.StateUp, 5*time.Second)
	}
	ctx := context.Background()
	c1 := srvs[0].Client(t)
	setEpochs := func() {
		t.Helper()
		for i, s := range srvs {
			tok := "2:current"
			if i == 0 {
				tok = "1:older"
			}
			if err := s.Client(t).HSet(ctx, node.StampKey, "epoch", tok).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	setEpochs()
	if _, err := r.AcceptNode(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if tok := c1.HGet(ctx, node.StampKey, "epoch").Val(); tok != node.FencePrefix+"1:older" {
		t.Fatalf("accepted behind its peers: epoch %q; want fenced %q", tok, node.FencePrefix+"1:older")
	}
	setEpochs()
	before := c1.HGetAll(ctx, node.StampKey).Val()
	// n1 answers nothing for longer than a probe's timeout (300 ms)
	if err := c1.Do(ctx, "CLIENT", "PAUSE", "400", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	_, err := r.AcceptNode(ctx, "n1")
	time.Sleep(500 * time.Millisecond)
	if !errors.Is(err, node.ErrUnreachable) {
		t.Errorf("accept with n1's own topology unreadable: %v; want an error wrapping node.ErrUnreachable", err)
	}
	after := c1.HGetAll(ctx, node.StampKey).Val()
	if after["epoch"] != "1:older" || after["incarnation"] != before["incarnation"] || after["gen"] != before["gen"] {
		t.Errorf("stamp after the refused accept = %v; want it as it was, %v", after, before)
	}
}
