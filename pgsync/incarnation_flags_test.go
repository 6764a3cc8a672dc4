package pgsync_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/pgsync"
)

// TestNewIncarnationFoundByAckForgetsUnreadableQueue checks that a node
// found at a new incarnation by an owed acknowledgement (payAcks:
// inventory.ErrIncarnation) has the old incarnation's stopped queues
// forgotten, as when a read finds it (leaveIncarnation): a queue stopped
// at an unreadable part record is counted in
// shardis_sync_unreadable_queues, the node loses everything and is
// accepted, and at the new incarnation (whose queues hold nothing
// unreadable) the gauge is 0. Found by a review: that path dropped only
// the incarnation and the debts, so the old queue stayed counted at the
// new incarnation (until the new queue reached the old offset, when a
// spurious "redo entry readable again" was logged).
func TestNewIncarnationFoundByAckForgetsUnreadableQueue(t *testing.T) {
	t.Parallel() // its own nodes and database
	e := newEnv(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e.reserveSpread(ctx, 8)
	parts, err := e.nodeParts(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	var part string
	for id, p := range parts {
		if p.offset >= 2 && e.raw["n1"].Exists(ctx, inventory.PartKey(id)).Val() == 1 {
			part = id
			break
		}
	}
	if part == "" {
		t.Fatal("no part of n1 with a record of its own past offset 1")
	}
	key := inventory.PartKey(part)
	v, err := e.raw["n1"].Get(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.raw["n1"].Set(ctx, key, "Z"+v[1:], 0).Err(); err != nil { // state code garbled: unreadable
		t.Fatal(err)
	}

	faults := &failAcks{node: "n1"}
	faults.on.Store(true) // every acknowledgement of n1 fails: owed
	m := e.startFaultedSync(ctx, faults)
	waitFor(t, 15*time.Second, "n1's queue stopped at the unreadable record", func() bool { return m.UnreadableQueues("n1") == 1 })
	waitFor(t, 15*time.Second, "an acknowledgement of n1 failed (owed)", func() bool { return faults.cut.Load() > 0 })

	// n1 loses everything (no AOF) and an operator accepts it; the
	// acknowledgements answer again before it is back.
	n1, _ := e.stack.Router.Node("n1")
	e.srv["n1"].Kill()
	faults.on.Store(false)
	e.srv["n1"].Restart()
	waitFor(t, 10*time.Second, "n1 to be refused for lost data", func() bool { return errors.Is(n1.DownReason(), node.ErrDataLost) })
	if _, err := e.stack.Router.AcceptNode(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "n1 usable again", n1.Usable)
	waitFor(t, 10*time.Second, "the new incarnation adopted", func() bool { return m.NewIncarnations("n1") == 1 })
	time.Sleep(2 * time.Second) // many landing steps at the new incarnation
	st, err := pgsync.Status(ctx, e.inv, e.pool)
	if err != nil {
		t.Fatal(err)
	}
	problems := 0
	for _, ns := range st {
		for _, q := range ns.Queues {
			if ns.Node == "n1" && q.Problem != "" {
				problems++
			}
		}
	}
	if got := m.UnreadableQueues("n1"); got != 0 {
		t.Errorf("shardis_sync_unreadable_queues{node=n1} = %v at the new incarnation (Status shows %d queues with a problem, the node came back empty); want 0",
			got, problems)
	}
}
