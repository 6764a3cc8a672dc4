package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/shardis/shardis/internal/redistest"
)

// A failover that aborted with its REPLICAOF NO ONE still unrun: the
// master looks down to the sentinels (it refuses their PING), a leader is
// elected and picks p, which freezes right then, so the command waits in
// p's socket and the leader, never seeing p report master, aborts after
// failover-timeout. The master then answers PING again: every sentinel
// is idle with the old configuration, sees the master up, and lists p
// with the role it last reported (replica: p answers nothing). A write
// confirmed on the master now, within electionBound of the vote, is gone
// once p thaws and runs the command (a master without it) while the
// master looks down again (before the sentinels convert p back, which
// they do only 8 s after seeing it master, and only while the master
// looks up): their next election promotes p (r has replica-priority 0)
// and the old master is resynced from it.
func TestFrozenReplicaOfAnAbortedFailoverDoesNotEndItsVote(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	h := startPriorityGroup(t, ctx, redistest.GroupOptions{Name: "frozenpromo", Replicas: 2, FailoverTimeout: 6 * time.Second})
	n, mc, run := h.watch(t, ctx)
	h.abortWithPFrozen(t, ctx, mc)
	setPing(t, ctx, mc, true)
	acked, refused := confirmWrite(ctx, n, mc, run, 6*time.Second)
	if !acked {
		t.Logf("ConfirmMaster refused the write while p, frozen, holds the aborted failover's REPLICAOF NO ONE: %v", refused)
		return
	}
	setPing(t, ctx, mc, false)
	if err := h.p.Resume(); err != nil {
		t.Fatal(err)
	}
	pc := h.g.Client(t, h.p.Addr())
	h.waitPromotedAndResynced(t, ctx, mc, h.p.Port())
	if v, err := pc.Get(ctx, "reservation").Result(); err != nil || v != "acked" {
		t.Fatalf("a write ConfirmMaster acknowledged on the master %s, while p %s held the aborted failover's REPLICAOF NO ONE, "+
			"is gone from p, which a later election promoted (GET: %q, %v)", h.m.Addr(), h.p.Addr(), v, err)
	}
}
