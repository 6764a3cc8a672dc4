package node_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
)

// sentinelsDo runs cmd on every sentinel of g.
func sentinelsDo(t *testing.T, g *redistest.Group, cmd ...any) {
	t.Helper()
	for _, a := range g.SentinelAddrs() {
		sc := redis.NewClient(&redis.Options{Addr: a, Protocol: 2})
		err := sc.Do(context.Background(), cmd...).Err()
		_ = sc.Close()
		if err != nil {
			t.Fatalf("%s: %v: %v", a, cmd, err)
		}
	}
}

// When no sentinel knows the group's master (SENTINEL REMOVE, sentinels
// restarted without their configuration), go-redis's failover dialer
// fails with an error that wraps redis.Nil ("all sentinels … unreachable:
// redis: nil"). A command that needed a connection then did not reach
// the node: a node failure (counted, OnFailure), never an error a caller
// could read as redis.Nil (a missing key, a script that returned nil).
// And the probe that failed to dial must be replaced (resetProbe), so the
// first probe after the sentinels know the master again reaches it.
func TestReviewSentinelMasterUnknown(t *testing.T) {
	g := redistest.StartGroup(t, redistest.GroupOptions{Name: "ugrp"})
	ctx := context.Background()
	var failures atomic.Int32
	n := newNode(t, node.Options{
		Name: "u1", Sentinel: &node.SentinelOptions{Master: "ugrp", Addrs: g.SentinelAddrs()}, ProbeTimeout: time.Second,
	}, &failures)
	probeUntil(t, n, 10*time.Second, "first probe", func(err error) bool { return err == nil })
	if err := n.Client().Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	master := g.Master()
	_, port, _ := net.SplitHostPort(master)
	sentinelsDo(t, g, "sentinel", "remove", "ugrp")
	// every connection to the master is gone: the next command dials
	if err := g.Client(t, master).Do(ctx, "client", "kill", "type", "normal").Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	before := failures.Load()
	err := n.Client().Get(ctx, "k").Err()
	if err == nil {
		t.Fatal("GET succeeded while no sentinel knows the master")
	}
	t.Logf("GET while no sentinel knows the master: %v", err)
	if errors.Is(err, redis.Nil) {
		t.Errorf("GET error %v reads as redis.Nil (a missing key)", err)
	}
	if !node.IsFailure(ctx, err) || failures.Load() == before {
		t.Errorf("GET error %v: IsFailure %v, OnFailure calls %d→%d; want a node failure", err, node.IsFailure(ctx, err), before, failures.Load())
	}
	perr := n.Probe(ctx)
	if perr == nil {
		t.Fatal("probe succeeded while no sentinel knows the master")
	}
	n.SetDown(perr)
	sentinelsDo(t, g, "sentinel", "monitor", "ugrp", "127.0.0.1", port, 2)
	start := time.Now()
	probeUntil(t, n, 5*time.Second, "UP once the sentinels know the master again", func(err error) bool { return err == nil })
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("UP %v after the sentinels knew the master again, want at the first probe", d.Round(time.Millisecond))
	}
}
