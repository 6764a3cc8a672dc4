package node_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
)

// A node whose server process keeps running (the same run_id) but whose
// dataset a full resync replaced with an older copy of itself (made
// REPLICAOF a lagging, detached replica by an operator or a misconfigured
// Sentinel, then REPLICAOF NO ONE) went back as surely as one restarted
// from an older snapshot, and must be held back the same way: a process
// that saw none of the lost writes would otherwise use it at once, its
// writes would take the node's sequence past what the process that saw
// them acknowledged, and that process's probe would find nothing behind
// ("A new server process", identity.go). Here the fresh process is held
// back, the process that saw writes 6..10 finds the node at 5 during the
// hold and records the loss on it, and from then on the fresh process is
// refused too. Before, the stamp's run (replicated from the node itself)
// matched, so no hold began: the fresh process used the node at once.
func TestFullResyncFromALaggingCopyIsHeldBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	x := redistest.Start(t, redistest.Options{})
	y := redistest.Start(t, redistest.Options{})
	xc, yc := x.Client(t), y.Client(t)
	opts := node.Options{Name: "n1", Addr: x.Addr(), Critical: true, Settle: 5 * time.Second}
	// y replicates n1 from before its first probe: a master's first
	// replica gives it a new replication id, which holds it back (a cost
	// this test is not about).
	replicate(t, yc, x.Addr(), 0)
	seen := newNode(t, opts, nil)
	if err := seen.Probe(ctx); err != nil {
		t.Fatalf("first probe: %v", err)
	}
	ack := func(by int64) { // a write acknowledged to seen
		seq, err := xc.HIncrBy(ctx, node.StampKey, "seq", by).Result()
		if err != nil {
			t.Fatal(err)
		}
		seen.ObserveSeq(seq)
	}
	ack(5)
	// y: a copy of n1 at write 5, detached (promoted by hand).
	replicate(t, yc, x.Addr(), 5)
	if err := yc.ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	ack(5) // writes 6..10, on n1 only
	if err := seen.Probe(ctx); err != nil {
		t.Fatalf("probe at write 10: %v", err)
	}
	run := xc.InfoMap(ctx, "server").Item("Server", "run_id")
	// n1 full-resyncs from the lagging copy, then is promoted back.
	replicate(t, xc, y.Addr(), 5)
	if err := xc.ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	if now := xc.InfoMap(ctx, "server").Item("Server", "run_id"); now != run || run == "" {
		t.Fatalf("run_id %q became %q: the server process was to stay", run, now)
	}
	fresh := newNode(t, opts, nil) // a process that saw none of n1's writes
	var held *node.HeldBackError
	if err := fresh.Probe(ctx); !errors.As(err, &held) {
		t.Fatalf("probe of n1 back at write 5 in the same server process by a fresh process: %v, want held back "+
			"(else its writes hide the loss of writes 6..10 from the process that saw them)", err)
	}
	if err := seen.Probe(ctx); !errors.Is(err, node.ErrRolledBack) {
		t.Fatalf("probe by the process that saw write 10: %v, want ErrRolledBack", err)
	}
	if err := fresh.Probe(ctx); !errors.Is(err, node.ErrRolledBack) {
		t.Fatalf("probe by the fresh process after the loss was found: %v, want ErrRolledBack (recorded on the node)", err)
	}
}

// replicate makes the server of c a replica of addr and waits until its
// link is up and it holds the stamp at write seq.
func replicate(t *testing.T, c *redis.Client, addr string, seq int64) {
	t.Helper()
	ctx := context.Background()
	host, port, _ := strings.Cut(addr, ":")
	if err := c.ReplicaOf(ctx, host, port).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		info, _ := c.Info(ctx, "replication").Result()
		got, _ := c.HGet(ctx, node.StampKey, "seq").Int64()
		if strings.Contains(info, "master_link_status:up") && got == seq {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica of %s: link %q, stamp at write %d, want %d", addr, info, got, seq)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
