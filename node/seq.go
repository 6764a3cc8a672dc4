package node

import (
	"context"
	"fmt"
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
// Options.Witnesses acknowledge at once. Concurrent first writes share one
// attempt; it is bounded by Witnesses.Hold and ctx.
func (n *Node) Acknowledge(ctx context.Context, seq int64) error {
	n.ObserveSeq(seq)
	if !n.opts.Critical || n.opts.Witnesses == nil {
		return nil
	}
	m, ok := n.Mark()
	if !ok || n.covered(m, seq) {
		return nil
	}
	n.holdMu.Lock()
	defer n.holdMu.Unlock()
	if m, _ = n.Mark(); n.covered(m, seq) {
		return nil // a concurrent first write got it held
	}
	if err := n.opts.Witnesses.Hold(ctx, n.opts.Name, m); err != nil {
		// %v, not %w: a peer's error reply must not read as "the write
		// did not run" to the caller.
		return &Error{Node: n.opts.Name, Addr: n.opts.Addr, Err: fmt.Errorf("%w: incarnation %s (generation %d) up to write %d: %v",
			ErrUnwitnessed, m.Incarnation, m.Gen, m.Seq, err)}
	}
	n.NoteHeld(m)
	n.noteAcked(m)
	return nil
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
