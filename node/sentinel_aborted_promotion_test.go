package node_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/internal/redistest"
)

// A failover that aborted after it sent REPLICAOF NO ONE: the master
// looks down to the sentinels (it refuses their PING) while it still
// takes writes and streams them to r (replica-priority 0); a leader is
// elected and picks p, which freezes right then, so the leader's
// REPLICAOF NO ONE waits in p's socket and the leader, never seeing p
// report master, aborts after failover-timeout (no configuration
// announced: its configuration, and every sentinel's, is still the
// old one, and no failover is under way anywhere). p then thaws and runs
// the command: a master nobody named, without the writes the old master
// takes from then on, that the sentinels do not convert back while the
// old master looks down to them. The next election picks p (r cannot be
// promoted): a write acknowledged on the old master in between is gone
// once the old master is converted to a replica of p. ConfirmMaster must
// not end the vote of the aborted election while the master it names
// looks down to a sentinel (a later election may promote the replica the
// aborted one left as master).
func TestAbortedPromotionDoesNotEndItsVoteWhileTheMasterLooksDown(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	h := startPriorityGroup(t, ctx, redistest.GroupOptions{Name: "abortpromo", Replicas: 2, FailoverTimeout: 6 * time.Second})
	n, mc, run := h.watch(t, ctx)
	h.abortWithPFrozen(t, ctx, mc)
	h.p.Resume()
	pc := h.g.Client(t, h.p.Addr())
	waitFor(t, 5*time.Second, "p ran the aborted failover's REPLICAOF NO ONE", func() bool {
		role, err := pc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(role, "role:master")
	})

	acked, refused := confirmWrite(ctx, n, mc, run, 4*time.Second)
	if !acked {
		t.Logf("ConfirmMaster refused the write on the master the sentinels see down: %v", refused)
		return
	}
	h.waitPromotedAndResynced(t, ctx, mc, h.p.Port())
	if v, err := pc.Get(ctx, "reservation").Result(); err != nil || v != "acked" {
		t.Fatalf("a write ConfirmMaster acknowledged on the old master %s is gone from p %s, which the aborted failover left as master (GET: %q, %v)",
			h.m.Addr(), h.p.Addr(), v, err)
	}
}
