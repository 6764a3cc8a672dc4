package node_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
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
	n := newNode(t, node.Options{
		Name:         "s1",
		Sentinel:     &node.SentinelOptions{Master: "abortpromo", Addrs: h.g.SentinelAddrs()},
		ProbeTimeout: 2 * time.Second,
	}, nil)
	probeUntil(t, n, 10*time.Second, "first probe", func(err error) bool { return err == nil })
	mc := h.g.Client(t, h.m.Addr())
	info, err := mc.Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	run := node.InfoRunID(info)

	if err := mc.Do(ctx, "acl", "setuser", "default", "-ping").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "a leader started a failover", func() bool {
		for i := range h.sentinels {
			if _, _, under, ok := h.vote(ctx, i); ok && under {
				return true
			}
		}
		return false
	})
	h.p.Pause()
	waitFor(t, 30*time.Second, "the failover aborted", func() bool {
		aborted := false
		for i := range h.sentinels {
			config, vote, under, ok := h.vote(ctx, i)
			if !ok || under {
				return false
			}
			aborted = aborted || vote > config
		}
		return aborted
	})
	h.p.Resume()
	pc := h.g.Client(t, h.p.Addr())
	waitFor(t, 5*time.Second, "p ran the aborted failover's REPLICAOF NO ONE", func() bool {
		role, err := pc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(role, "role:master")
	})

	acked, refused := false, error(nil)
	for end := time.Now().Add(4 * time.Second); !acked && time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if mc.Set(ctx, "reservation", "acked", 0).Err() != nil {
			continue
		}
		if w, err := mc.Wait(ctx, 1, time.Second).Result(); err != nil || w < 1 {
			continue
		}
		refused = n.ConfirmMaster(ctx, run)
		acked = refused == nil
	}
	if !acked {
		t.Logf("ConfirmMaster refused the write on the master the sentinels see down: %v", refused)
		return
	}
	waitFor(t, 60*time.Second, "a later election promoted p", func() bool {
		named := 0
		for _, c := range h.sentinels {
			if v, err := c.GetMasterAddrByName(ctx, h.g.Name()).Result(); err == nil && len(v) == 2 && v[1] == strconv.Itoa(h.p.Port()) {
				named++
			}
		}
		return named >= 2
	})
	if err := mc.Do(ctx, "acl", "setuser", "default", "+ping").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the old master resynced from p", func() bool {
		role, err := mc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(role, "role:slave") &&
			strings.Contains(role, "master_port:"+strconv.Itoa(h.p.Port())) && strings.Contains(role, "master_link_status:up")
	})
	if v, err := pc.Get(ctx, "reservation").Result(); err != nil || v != "acked" {
		t.Fatalf("a write ConfirmMaster acknowledged on the old master %s is gone from p %s, which the aborted failover left as master (GET: %q, %v)",
			h.m.Addr(), h.p.Addr(), v, err)
	}
}
