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

// The first write of an incarnation waits for a peer's mark carrying its
// sequence; an unwitnessed one is refused with ErrUnwitnessed and the next
// write asks again; once held, later writes do not ask (witness.go).
func TestAcknowledgeHoldsFirstWriteOfIncarnationOnce(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Options{})
	h := &holdRecorder{fail: true}
	n := newNode(t, node.Options{Name: "n1", Addr: s.Addr(), Critical: true, Witnesses: h}, nil)
	ctx := context.Background()
	if err := n.Probe(ctx); err != nil {
		t.Fatal(err)
	}
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
