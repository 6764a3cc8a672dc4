package node_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
)

// A READONLY reply counts as a node failure of a Sentinel node (the
// server reached was demoted: the group's master moved; sentinel.go, README
// "Failover, as shardis sees it"), also when it is the reply to a write
// in a pipeline whose first error is another, harmless one (a GET of a
// missing key, redis.Nil): the hook sees the pipeline's first error only
// (review: the READONLY went uncounted, no OnFailure, no probe).
func TestReviewSentinelReadOnlyInPipeline(t *testing.T) {
	t.Parallel() // its own group (master, replica, sentinels); it mostly waits for them
	g := redistest.StartGroup(t, redistest.GroupOptions{Name: "rgrp"})
	ctx := context.Background()
	var failures atomic.Int32
	n := newNode(t, node.Options{
		Name: "r1", Sentinel: &node.SentinelOptions{Master: "rgrp", Addrs: g.SentinelAddrs()}, ProbeTimeout: time.Second,
	}, &failures)
	probeUntil(t, n, 10*time.Second, "first probe", func(err error) bool { return err == nil })
	if _, err := n.Client().Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "k", "v1", 0)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// The master is demoted behind the sentinels' back (as an operator's
	// REPLICAOF would): its clients' connections stay open.
	other := redistest.Start(t, redistest.Options{})
	master := g.Client(t, g.Master())
	if err := master.Do(ctx, "replicaof", "127.0.0.1", strconv.Itoa(other.Port())).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := master.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demoted master did not sync: %v %v", info, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	before := failures.Load()
	var set *redis.StatusCmd
	_, _ = n.Client().Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Get(ctx, "missing")
		set = p.Set(ctx, "k", "v2", 0)
		return nil
	})
	if !redis.IsReadOnlyError(set.Err()) {
		t.Fatalf("SET on the demoted master: %v, want READONLY", set.Err())
	}
	if failures.Load() == before {
		t.Errorf("a READONLY reply in a pipeline was not counted as a node failure (OnFailure not called)")
	}
}
