package router_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
)

// Router.Close "writes on the peers every witness mark that moved on since
// its last write" (SECURITY.md: a service shutting down "writes its last
// marks as it closes"). Writes the router still acknowledges while Close
// runs (the flush waits up to a budget for a slow peer; node clients are
// closed only after it) are never marked: here n2, a healthy peer, is left
// holding a mark far behind the last write n1 acknowledged.
// TestCloseMarksEveryWriteItAcknowledged: writes acknowledged while Close
// runs are covered by the marks its flush writes. Close read each node's
// mark once and flushed it, its clients still open: the writes
// acknowledged meanwhile (one peer slow to take marks stretched the flush
// to its budget) were marked on no peer, and a node that lost them later
// was not refused (found by a review: 364 of them in one run). Now a
// write that finishes once Close began is reported with its outcome
// unknown (node.Node.StopAcknowledging).
func TestCloseMarksEveryWriteItAcknowledged(t *testing.T) {
	srvs := redistest.StartN(t, 3, redistest.Options{})
	var b strings.Builder
	b.WriteString("nodes:\n")
	for i, s := range srvs {
		fmt.Fprintf(&b, "  n%d: {addr: %q}\n", i+1, s.Addr())
	}
	b.WriteString("client: {command_timeout: 2s}\nhealth: {heartbeat: 1m, timeout: 1s, backoff: [100ms], hold_back: 100ms}\n" +
		"servers:\n  order:\n    on_node_down: fail\n    routes:\n      a: [n1, n2, n3]\n")
	cfg, err := config.Parse([]byte(b.String()), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r, err := router.New(ctx, cfg, router.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), KeepData: []string{"order"}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, name := range []string{"n1", "n2", "n3"} {
		if n, _ := r.Node(name); n.State() != node.StateUp {
			t.Fatalf("%s is %v after New; want up", name, n.State())
		}
	}
	n1, _ := r.Node("n1")
	// write acknowledges one write of n1 the way the inventory does: the
	// command on the router's client, then Node.Acknowledge of its seq.
	write := func(seq int64) error {
		if err := n1.Client().HSet(ctx, node.StampKey, "seq", seq).Err(); err != nil {
			return err
		}
		return n1.Acknowledge(ctx, seq)
	}
	if err := write(1000); err != nil { // the incarnation's first write: held on a peer
		t.Fatal(err)
	}
	c3 := srvs[2].Client(t)
	if err := c3.Do(ctx, "CLIENT", "PAUSE", "20000", "WRITE").Err(); err != nil { // n3 slow to take marks
		t.Fatal(err)
	}
	defer c3.Do(ctx, "CLIENT", "UNPAUSE")

	acked := make(chan int64)
	go func() {
		last := int64(1000)
		for seq := int64(1001); ; seq++ {
			if write(seq) != nil {
				acked <- last
				return
			}
			last = seq
			time.Sleep(5 * time.Millisecond)
		}
	}()
	time.Sleep(100 * time.Millisecond)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	last := <-acked
	v, err := srvs[1].Client(t).HGet(ctx, node.WitnessKey, "n1").Result()
	if err != nil {
		t.Fatal(err)
	}
	m, err := node.ParseMark(v)
	if err != nil {
		t.Fatal(err)
	}
	if m.Seq < last {
		t.Errorf("after Close, n2 holds n1's mark at seq %d, but n1 acknowledged writes up to seq %d through this router: %d acknowledged writes are witnessed nowhere",
			m.Seq, last, last-m.Seq)
	}
}
