package node

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// ObserveSeq records that the node acknowledged a write whose write
// sequence (the `seq` field of the node's stamp hash, advanced by every
// inventory write script) is seq. The node keeps the highest value seen by
// this process: a node found later with a lower sequence has gone back in
// time (restored from an older snapshot, or lost writes not yet on disk).
// Safe for concurrent use; lock-free.
func (n *Node) ObserveSeq(seq int64) {
	for {
		cur := n.maxSeq.Load()
		if seq <= cur || n.maxSeq.CompareAndSwap(cur, seq) {
			return
		}
	}
}

// MaxSeq returns the highest write sequence [Node.ObserveSeq] recorded, or
// 0 when none was.
func (n *Node) MaxSeq() int64 { return n.maxSeq.Load() }

// Acknowledge records, like [Node.ObserveSeq], that the node applied a
// write whose write sequence is seq, and returns nil when the write may be
// acknowledged to its caller. The first write of the node's current
// generation and incarnation that this process acknowledges waits until a
// peer holds a mark of that incarnation with at least seq
// ([Witnesses.Hold], the rule in witness.go); every later write of the
// incarnation returns at once (one atomic load). When no peer holds it in
// time the error wraps [ErrUnwitnessed]: the write ran on the node, but
// its outcome must be reported as unknown (a node restarting empty now
// might not be noticed), and the next write tries again. Nodes whose data
// need not be kept (Options.Critical false) and nodes without
// Options.Witnesses acknowledge at once.
//
// Concurrent first writes share one attempt (one Witnesses.Hold, run on
// the caller that started it and bounded by Hold and that caller's ctx):
// a write the attempt's mark covers (same generation and incarnation, a
// sequence at least seq) takes its result, except when the attempt ended
// because its starter's ctx did (then the write makes an attempt of its
// own); any other write waits for it to end and then is acknowledged (it
// succeeded: a later write of the incarnation) or makes the next attempt.
// Each caller waits at most until its own ctx ends: then it returns an
// error wrapping [ErrUnwitnessed] and ctx's error.
//
// After [Node.StopAcknowledging] it acknowledges nothing: it fails with an
// error wrapping ErrUnwitnessed and redis.ErrClosed (the write ran; its
// outcome is unknown).
func (n *Node) Acknowledge(ctx context.Context, seq int64) error {
	n.ObserveSeq(seq)
	if !n.opts.Critical || n.opts.Witnesses == nil {
		return nil
	}
	// after ObserveSeq: a write that passes this check is in MaxSeq before
	// StopAcknowledging returns (both atomics: one order of all of them)
	if n.ackStopped.Load() {
		return n.closingAck(seq)
	}
	m, ok := n.Mark()
	if !ok || n.covered(m, seq) {
		return nil
	}
	return n.awaitHold(ctx, seq)
}

// StopAcknowledging makes every later [Node.Acknowledge] of a node whose
// data must be kept fail (outcome unknown), for a process that is about
// to write its last marks and close (router.Router.Close): once it
// returns, [Node.Mark] covers every write Acknowledge acknowledged, so
// marks read after it leave none of them unwitnessed. A write whose
// Acknowledge runs later is reported unknown rather than acknowledged
// without a mark that any peer will ever get. It cannot be undone;
// idempotent.
func (n *Node) StopAcknowledging() { n.ackStopped.Store(true) }

// closingAck is Acknowledge's refusal after StopAcknowledging.
func (n *Node) closingAck(seq int64) error {
	m, _ := n.Mark()
	return &Error{Node: n.opts.Name, Addr: n.opts.Addr, Err: fmt.Errorf("%w: write %d (incarnation %s): this process is closing and writes no more marks: %w",
		ErrUnwitnessed, seq, m.Incarnation, redis.ErrClosed)}
}

// holdAttempt is one Witnesses.Hold of mark m that concurrent first writes
// share (Acknowledge). err and starterGone are set before done is closed.
type holdAttempt struct {
	m           Mark
	done        chan struct{}
	err         error // nil: a peer holds m
	starterGone bool  // the attempt failed after its starter's ctx ended
}

// awaitHold is Acknowledge's slow path: it joins the attempt in flight or
// starts one, until write seq is covered, an attempt covering it failed,
// or ctx ends.
func (n *Node) awaitHold(ctx context.Context, seq int64) error {
	for {
		n.holdMu.Lock()
		m, ok := n.Mark()
		if !ok || n.covered(m, seq) {
			n.holdMu.Unlock()
			return nil // a concurrent first write got it held
		}
		a := n.hold
		if a == nil {
			a = &holdAttempt{m: m, done: make(chan struct{})}
			n.hold = a
			n.holdMu.Unlock()
			n.runHold(ctx, a)
			return a.err
		}
		n.holdMu.Unlock()
		select {
		case <-a.done:
		case <-ctx.Done():
			return n.unwitnessed(m, nil, ctx.Err())
		}
		if a.err == nil || a.starterGone || a.m.Gen != m.Gen || a.m.Incarnation != m.Incarnation || a.m.Seq < seq {
			continue // acknowledged at the next check, or the next attempt
		}
		return a.err
	}
}

// runHold runs attempt a under ctx, records its outcome and ends it.
func (n *Node) runHold(ctx context.Context, a *holdAttempt) {
	err := n.opts.Witnesses.Hold(ctx, n.opts.Name, a.m)
	if err == nil {
		n.NoteHeld(a.m)
		n.noteAcked(a.m)
	} else {
		a.err = n.unwitnessed(a.m, err, nil)
		a.starterGone = ctx.Err() != nil
	}
	n.holdMu.Lock()
	n.hold = nil
	n.holdMu.Unlock()
	close(a.done)
}

// unwitnessed is the error of a first write of mark m that no peer was
// seen to hold: it wraps ErrUnwitnessed and, when the write's caller gave
// up waiting (ctxErr, its ctx's error), that error. Hold's error is
// formatted with %v, not %w: a peer's error reply must not read as "the
// write did not run" to the caller.
func (n *Node) unwitnessed(m Mark, holdErr, ctxErr error) error {
	var err error
	if ctxErr != nil {
		err = fmt.Errorf("%w: incarnation %s (generation %d) up to write %d: waiting for a peer's mark: %w",
			ErrUnwitnessed, m.Incarnation, m.Gen, m.Seq, ctxErr)
	} else {
		err = fmt.Errorf("%w: incarnation %s (generation %d) up to write %d: %v",
			ErrUnwitnessed, m.Incarnation, m.Gen, m.Seq, holdErr)
	}
	return &Error{Node: n.opts.Name, Addr: n.opts.Addr, Err: err}
}

// NoteHeld records that a peer holds mark m of this node (its writer got
// it there, or [Node.Acknowledge] did): a first write of m's generation
// and incarnation up to m.Seq is acknowledged without waiting for a peer.
// A mark of another incarnation replaces the one recorded (at worst, one
// more write waits for a peer).
func (n *Node) NoteHeld(m Mark) {
	for {
		cur := n.held.Load()
		if cur != nil && cur.Gen == m.Gen && cur.Incarnation == m.Incarnation && cur.Seq >= m.Seq {
			return
		}
		if n.held.CompareAndSwap(cur, &m) {
			return
		}
	}
}

// covered reports whether write seq of m's generation and incarnation may
// be acknowledged without waiting for a peer: an earlier write of them
// was (so a peer holds a mark at its sequence or later), or a peer is
// known to hold a mark of them at seq or later. A mark written before the
// write (the writer's marks of an idle node) does not cover it: a copy of
// the node from before the write would pass as current.
func (n *Node) covered(m Mark, seq int64) bool {
	if a := n.acked.Load(); a != nil && a.Gen == m.Gen && a.Incarnation == m.Incarnation {
		return true
	}
	h := n.held.Load()
	if h == nil || h.Gen != m.Gen || h.Incarnation != m.Incarnation || h.Seq < seq {
		return false
	}
	n.noteAcked(m)
	return true
}

// noteAcked records that a write of m's generation and incarnation was
// acknowledged (covered). A copy is stored, so that covered's and
// Acknowledge's m stay on the stack on the path every write takes.
func (n *Node) noteAcked(m Mark) {
	c := m
	n.acked.Store(&c)
}
