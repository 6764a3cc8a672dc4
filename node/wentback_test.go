package node_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
)

// A node found empty by a process that saw it is recorded so on the node
// (wentback.go): a fresh process, which reads no mark of it (no peers
// here) and would stamp an empty node afresh, is refused with ErrDataLost
// too, by its probe and by a new connection's check, until an accept;
// the accept clears the record and the node is used again. Before, the
// fresh process stamped the node with a new incarnation and used it.
func TestEmptyNodeRecordedLostRefusesAFreshProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.Start(t, redistest.Options{})
	opts := node.Options{Name: "n1", Addr: s.Addr(), Critical: true}
	seen := newNode(t, opts, nil)
	if err := seen.Probe(ctx); err != nil {
		t.Fatalf("first probe: %v", err)
	}
	if err := s.Client(t).FlushAll(ctx).Err(); err != nil { // came back empty
		t.Fatal(err)
	}
	if err := seen.Probe(ctx); !errors.Is(err, node.ErrDataLost) {
		t.Fatalf("probe of the emptied node by the process that saw it: %v, want ErrDataLost", err)
	}
	fresh := newNode(t, opts, nil)
	for i := 0; i < 2; i++ {
		if err := fresh.Probe(ctx); !errors.Is(err, node.ErrDataLost) {
			t.Fatalf("probe %d by a fresh process: %v, want ErrDataLost (recorded on the node)", i+1, err)
		}
	}
	if v := s.Client(t).HGet(ctx, node.StampKey, "name").Val(); v != "" {
		t.Fatalf("the fresh process stamped the node (name %q) although a loss is recorded on it", v)
	}
	if _, err := fresh.Accept(ctx, 1, ""); err != nil {
		t.Fatalf("Accept: %v", err)
	}
	if err := fresh.Probe(ctx); err != nil {
		t.Fatalf("probe after the accept: %v", err)
	}
	if err := seen.Probe(ctx); err != nil {
		t.Fatalf("probe after the accept by the process that saw the loss: %v", err)
	}
}

// Two accepts that chose the same generation (a retry after a lost reply,
// before the peers were told) give the node two generations, not two
// incarnations of one: a process that probed between them takes the
// second for an accept since, not for data gone back, and records no
// loss. Before, the second reused the generation, the process refused the
// node as rolled back and recorded it, and every process refused it until
// a third accept.
func TestRepeatedAcceptTakesANewGeneration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.Start(t, redistest.Options{})
	opts := node.Options{Name: "n1", Addr: s.Addr(), Critical: true}
	seen := newNode(t, opts, nil)
	if err := seen.Probe(ctx); err != nil {
		t.Fatalf("first probe: %v", err)
	}
	m1, err := seen.Accept(ctx, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := seen.Probe(ctx); err != nil {
		t.Fatalf("probe after the first accept: %v", err)
	}
	m2, err := seen.Accept(ctx, 1, "") // the same generation chosen again
	if err != nil {
		t.Fatal(err)
	}
	if m2.Gen <= m1.Gen {
		t.Fatalf("second accept at generation %d, the first at %d: want a later one", m2.Gen, m1.Gen)
	}
	if err := seen.Probe(ctx); err != nil {
		t.Fatalf("probe after the second accept by a process that saw the first: %v", err)
	}
	if v := s.Client(t).HGet(ctx, node.StampKey, "went_back").Val(); v != "" {
		t.Fatalf("a loss was recorded after two accepts: %q", v)
	}
}

// A node over its maxmemory (noeviction) can be accepted, and a full peer
// still records a witness mark: both scripts' first write is an HDEL,
// which takes no memory, so Redis lets their later writes through. Before,
// `shardis node accept` of a node that came back full was refused with
// OOM until an operator raised its limit (found by the explorer's memory
// actor, seed 91053), and a full peer recorded no mark.
func TestAcceptAndWitnessOnAFullNode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.Start(t, redistest.Options{})
	n := newNode(t, node.Options{Name: "n1", Addr: s.Addr(), Critical: true}, nil)
	if err := n.Probe(ctx); err != nil {
		t.Fatalf("first probe: %v", err)
	}
	c := s.Client(t)
	if err := c.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "k", "v", 0).Err(); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("SET on the full node: %v, want an OOM refusal", err)
	}
	m, err := n.Accept(ctx, 1, "")
	if err != nil {
		t.Fatalf("Accept of a full node: %v", err)
	}
	if v := c.HGet(ctx, node.StampKey, "incarnation").Val(); v != m.Incarnation {
		t.Fatalf("the stamp's incarnation after the accept is %q, want %q", v, m.Incarnation)
	}
	for _, seq := range []int64{7, 8} { // a new mark, then a raise
		mark := node.Mark{Gen: m.Gen, Incarnation: m.Incarnation, Seq: seq}
		if ok, err := n.Witness(ctx, "n2", mark); err != nil || !ok {
			t.Fatalf("Witness of seq %d on a full peer: %v, %v", seq, ok, err)
		}
		if got, found, err := n.WitnessOf(ctx, "n2"); err != nil || !found || got != mark {
			t.Fatalf("the mark recorded: %+v, %v, %v; want %+v", got, found, err, mark)
		}
	}
}
