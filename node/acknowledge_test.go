package node_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
)

// holdRecorder is a node.Witnesses that records the marks it is asked to
// hold and fails while fail is set.
type holdRecorder struct {
	mu    sync.Mutex
	marks []node.Mark
	fail  bool
}

func (h *holdRecorder) Hold(_ context.Context, _ string, m node.Mark) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.marks = append(h.marks, m)
	if h.fail {
		return errors.New("no peer answered")
	}
	return nil
}

// Witnessed reports no peer's mark: the tests here hold marks, they do not
// read them.
func (h *holdRecorder) Witnessed(context.Context, string) (node.Mark, bool) {
	return node.Mark{}, false
}

func (h *holdRecorder) calls() []node.Mark {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]node.Mark(nil), h.marks...)
}

// ackNode starts a server and a probed critical node n1 on it whose
// witnesses h refuse to hold marks until told otherwise.
func ackNode(t *testing.T) (*redistest.Server, *holdRecorder, *node.Node) {
	t.Helper()
	s := redistest.Start(t, redistest.Options{})
	h := &holdRecorder{fail: true}
	n := newNode(t, node.Options{Name: "n1", Addr: s.Addr(), Critical: true, Witnesses: h}, nil)
	if err := n.Probe(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s, h, n
}

// The first write of an incarnation waits for a peer's mark carrying its
// sequence; an unwitnessed one is refused with ErrUnwitnessed and the next
// write asks again; once held, later writes do not ask (witness.go).
func TestAcknowledgeHoldsFirstWriteOfIncarnationOnce(t *testing.T) {
	t.Parallel()
	_, h, n := ackNode(t)
	ctx := context.Background()
	if err := n.Acknowledge(ctx, 1); !errors.Is(err, node.ErrUnwitnessed) {
		t.Fatalf("first write, no peer holds its mark: %v, want ErrUnwitnessed", err)
	}
	h.mu.Lock()
	h.fail = false
	h.mu.Unlock()
	for seq := int64(2); seq <= 5; seq++ {
		if err := n.Acknowledge(ctx, seq); err != nil {
			t.Fatalf("write %d: %v", seq, err)
		}
	}
	got := h.calls()
	if len(got) != 2 || got[1].Seq != 2 || got[1].Incarnation != n.Incarnation() {
		t.Fatalf("marks asked to be held: %+v; want two (the refused write, then write 2 of incarnation %s)", got, n.Incarnation())
	}
	if m, _ := n.Mark(); m.Seq != 5 {
		t.Errorf("Mark().Seq = %d after write 5", m.Seq)
	}
}

// A mark the peers hold from before the write (the witness writer's mark
// of an idle node, its sequence below the write's) does not cover the
// first write of the incarnation: Acknowledge acknowledged write 7 at once
// with the peers holding only "…:0", so a copy of the node from before
// the write passed as current. It now waits for a mark at 7 or later.
func TestAcknowledgeIdleMarkDoesNotCoverFirstWrite(t *testing.T) {
	t.Parallel()
	s, h, n := ackNode(t)
	ctx := context.Background()
	idle, ok := n.Mark()
	if !ok {
		t.Fatal("no mark after a probe")
	}
	n.NoteHeld(idle) // the writer got the idle mark onto a peer
	if err := n.Acknowledge(ctx, idle.Seq+7); !errors.Is(err, node.ErrUnwitnessed) {
		t.Fatalf("first write, the peers holding only the idle mark at %d: %v; want ErrUnwitnessed", idle.Seq, err)
	}
	h.mu.Lock()
	h.fail = false
	h.mu.Unlock()
	if err := n.Acknowledge(ctx, idle.Seq+8); err != nil {
		t.Fatal(err)
	}
	if err := n.Acknowledge(ctx, idle.Seq+9); err != nil {
		t.Fatal(err)
	}
	got := h.calls()
	if len(got) != 2 || got[1].Seq != idle.Seq+8 {
		t.Fatalf("marks asked to be held: %+v; want two, the second at write %d (later writes not asking)", got, idle.Seq+8)
	}
	// a mark the writer got onto a peer at the write's sequence covers it
	m := node.Mark{Gen: idle.Gen, Incarnation: idle.Incarnation, Seq: idle.Seq + 20}
	n2 := newNode(t, node.Options{Name: "n1", Addr: s.Addr(), Critical: true, Witnesses: h}, nil)
	if err := n2.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	n2.NoteHeld(m)
	if err := n2.Acknowledge(ctx, idle.Seq+20); err != nil || len(h.calls()) != 2 {
		t.Fatalf("write at a held mark's sequence: %v, %d holds asked; want acknowledged without asking", err, len(h.calls()))
	}
}
