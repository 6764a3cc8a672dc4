package router

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
)

// TestCloseCutsTheWitnessPassShort: Close ends a witness pass under way
// instead of waiting for it: with both peers of n1 taking no writes, a
// pass writing n1's mark on them holds for the whole budget (the command
// timeout, 2 s here), and Close then flushes the marks once more, another
// budget. Close waited for the pass first: a service's shutdown ran past
// service.shutdown_timeout by a budget per node of a pass (4.7 s with
// two nodes, 12.9 s with four, at 1 s). Now it takes about one budget.
func TestCloseCutsTheWitnessPassShort(t *testing.T) {
	r, srvs := witnessRouter(t)
	ctx := context.Background()
	n1, _ := r.Node("n1")
	if err := srvs[0].Client(t).HSet(ctx, node.StampKey, "seq", 1000).Err(); err != nil {
		t.Fatal(err)
	}
	n1.ObserveSeq(1000) // n1's mark moved on: every peer must be written
	for _, s := range srvs[1:] {
		c := s.Client(t)
		if err := c.Do(ctx, "CLIENT", "PAUSE", "20000", "WRITE").Err(); err != nil {
			t.Fatal(err)
		}
		defer c.Do(ctx, "CLIENT", "UNPAUSE")
	}
	r.wit.wake <- "n1" // a pass writing n1's mark, as a node going down starts one
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Close took %v with a pass under way; want about one budget (2 s): the pass is cut short, the flush bounded", took)
	}
}

// witnessRouter starts three nodes n1..n3 of one kept server, all UP, and
// a router over them with a 2s command timeout and a heartbeat far off (no
// witness pass but those a test starts); it is closed at the test's end.
func witnessRouter(t *testing.T) (*Router, []*redistest.Server) {
	t.Helper()
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
	r, err := New(context.Background(), cfg, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), KeepData: []string{"order"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	for _, name := range []string{"n1", "n2", "n3"} {
		if n, _ := r.Node(name); n.State() != node.StateUp {
			t.Fatalf("%s is %v after New; want up", name, n.State())
		}
	}
	return r, srvs
}
