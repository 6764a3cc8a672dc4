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
	n := newNode(t, node.Options{
		Name:         "s1",
		Sentinel:     &node.SentinelOptions{Master: "frozenpromo", Addrs: h.g.SentinelAddrs()},
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
	t.Cleanup(func() { _ = h.p.Resume() })
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
	if err := mc.Do(ctx, "acl", "setuser", "default", "+ping").Err(); err != nil {
		t.Fatal(err)
	}

	acked, refused := false, error(nil)
	for end := time.Now().Add(6 * time.Second); !acked && time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
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
		t.Logf("ConfirmMaster refused the write while p, frozen, holds the aborted failover's REPLICAOF NO ONE: %v", refused)
		return
	}
	if err := mc.Do(ctx, "acl", "setuser", "default", "-ping").Err(); err != nil {
		t.Fatal(err)
	}
	if err := h.p.Resume(); err != nil {
		t.Fatal(err)
	}
	pc := h.g.Client(t, h.p.Addr())
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
		t.Fatalf("a write ConfirmMaster acknowledged on the master %s, while p %s held the aborted failover's REPLICAOF NO ONE, "+
			"is gone from p, which a later election promoted (GET: %q, %v)", h.m.Addr(), h.p.Addr(), v, err)
	}
}
