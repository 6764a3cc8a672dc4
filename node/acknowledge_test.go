package node_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

// slowHold is a node.Witnesses whose Hold takes 600ms (or until its ctx
// ends) and then fails: no peer answered.
type slowHold struct{ calls atomic.Int32 }

func (h *slowHold) Hold(ctx context.Context, _ string, _ node.Mark) error {
	h.calls.Add(1)
	select {
	case <-time.After(600 * time.Millisecond):
	case <-ctx.Done():
	}
	return errors.New("no peer answered")
}

// Witnessed reports no peer's mark.
func (h *slowHold) Witnessed(context.Context, string) (node.Mark, bool) { return node.Mark{}, false }

// slowHoldNode starts a server and a probed critical node n1 on it whose
// witnesses are h.
func slowHoldNode(t *testing.T, h *slowHold) *node.Node {
	t.Helper()
	s := redistest.Start(t, redistest.Options{})
	n := newNode(t, node.Options{Name: "n1", Addr: s.Addr(), Critical: true, Witnesses: h}, nil)
	if err := n.Probe(context.Background()); err != nil {
		t.Fatal(err)
	}
	return n
}

// A first write that waits for another's attempt to get a peer's mark
// waits no longer than its own ctx, and then fails with ErrUnwitnessed
// wrapping its ctx's error. Found by a review: the wait was a mutex held
// across the other's whole Witnesses.Hold, past the waiter's deadline,
// after which the waiter made an attempt of its own.
func TestAcknowledgeWaitIsBoundedByCtx(t *testing.T) {
	t.Parallel()
	h := &slowHold{}
	n := slowHoldNode(t, h)
	base := n.MaxSeq()
	first := make(chan error, 1)
	go func() { first <- n.Acknowledge(context.Background(), base+1) }()
	time.Sleep(50 * time.Millisecond) // the first write's attempt under way
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := n.Acknowledge(ctx, base+2)
	took := time.Since(start)
	if !errors.Is(err, node.ErrUnwitnessed) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("second first write with a 100ms context: %v, want ErrUnwitnessed wrapping its deadline", err)
	}
	if took > 300*time.Millisecond {
		t.Errorf("Acknowledge with a 100ms context returned after %v: not bounded by its ctx", took)
	}
	if err := <-first; !errors.Is(err, node.ErrUnwitnessed) {
		t.Errorf("first write, no peer answering: %v, want ErrUnwitnessed", err)
	}
	if c := h.calls.Load(); c != 1 {
		t.Errorf("Hold called %d times, want 1 (the waiter gave up before making its own)", c)
	}
}

// Concurrent first writes that one attempt's mark covers share it: one
// Witnesses.Hold, whose failure each of them reports, in the time of one
// attempt. Found by a review: they ran one Hold after another, each a
// full Hold bound (N writes, N bounds in sequence).
func TestAcknowledgeConcurrentFirstWritesShareOneAttempt(t *testing.T) {
	t.Parallel()
	h := &slowHold{}
	n := slowHoldNode(t, h)
	base := n.MaxSeq()
	n.ObserveSeq(base + 5) // both writes' mark: every attempt's covers both
	start := time.Now()
	errs := make(chan error, 2)
	for _, seq := range []int64{base + 3, base + 4} {
		go func() { errs <- n.Acknowledge(context.Background(), seq) }()
	}
	for range 2 {
		if err := <-errs; !errors.Is(err, node.ErrUnwitnessed) || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("first write, no peer answering: %v, want the shared attempt's ErrUnwitnessed", err)
		}
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("two concurrent first writes took %v, want about one 600ms attempt", took)
	}
	if c := h.calls.Load(); c != 1 {
		t.Errorf("Hold called %d times, want 1 (shared)", c)
	}
}

// When the attempt a waiter shares ends because its starter's ctx did, the
// waiter, its own ctx still live, makes an attempt of its own rather than
// report another caller's deadline. It guards the sharing added after a
// review (TestAcknowledgeConcurrentFirstWritesShareOneAttempt): the
// serial code before it made its own attempt anyway; shared without this
// rule, the waiter reported the starter's cut-short attempt.
func TestAcknowledgeWaiterRetriesWhenStarterGaveUp(t *testing.T) {
	t.Parallel()
	h := &slowHold{}
	n := slowHoldNode(t, h)
	base := n.MaxSeq()
	n.ObserveSeq(base + 5)
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	first := make(chan error, 1)
	go func() { first <- n.Acknowledge(short, base+3) }()
	time.Sleep(30 * time.Millisecond) // the starter's attempt under way
	err := n.Acknowledge(context.Background(), base+4)
	if !errors.Is(err, node.ErrUnwitnessed) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("waiter: %v, want ErrUnwitnessed of its own attempt", err)
	}
	if err := <-first; !errors.Is(err, node.ErrUnwitnessed) {
		t.Errorf("starter: %v, want ErrUnwitnessed", err)
	}
	if c := h.calls.Load(); c != 2 {
		t.Errorf("Hold called %d times, want 2 (the starter's, cut short, then the waiter's)", c)
	}
}
