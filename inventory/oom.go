package inventory

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shardis/shardis/node"
)

// Nodes out of memory.
//
// A node at its maxmemory with maxmemory-policy noeviction (the only policy
// the inventory uses, see usable) refuses commands that may take memory
// with an OOM error reply. That is an answer, not a node failure: the node
// stays UP and reads work. What the inventory's scripts may do on such a
// node is declared in each script's first line (a Redis 7.0 shebang), so
// that Redis itself enforces it, before the script runs:
//
//	memRead    "#!lua flags=no-writes": reads only (Redis refuses any write
//	           in it); runs on a full node.
//	memGrow    "#!lua": may take memory: reserve, stage, local reserve,
//	           begin of an order, a refusal's fence (soldout.go), stock
//	           loading, the redo log and topology steps. Refused whole on a full node ("OOM command not
//	           allowed…") before any of it runs, so nothing is half done.
//	memRelease "#!lua flags=allow-oom": decides or settles what the node
//	           already holds, and runs on a full node: settle (confirm, cancel
//	           and abort of parts, tombstones), the order record's decisions
//	           (commit, fail, confirm, cancel, expire), the staged probe
//	           (tombstones for promised parts, the held mark on pending
//	           ones) and the pending index's
//	           adjustments (postpone, drop, set aside, retry).
//
// Why memRelease is safe on a full node: such a script never takes stock
// and never starts an order. What it writes is bounded by what exists
// already: per part the caller names it rewrites the part's fields and
// counters it holds (a settled part also leaves the pending index), and at
// most one small new key (a tombstone, or a failed record for an order
// that has none); per order record one small string, and, when a decision
// or a move meets inline parts, the record of each (inline.go: the key the
// reserve left out, about 150 bytes a part of an order that was reserved
// before the node filled). Taking memory for
// those is what lets stock held on a full node go back: every reserve on
// it is refused meanwhile, so the node grows only by the settling of what
// was reserved before it filled, not by new orders. Refusing them instead
// strands the stock: cancels and expiries cannot land until someone frees
// memory, and a part's tombstone cannot be written, so the reconciler can
// only retry. The reconciler's node lease (package rollback) is taken the
// same way for the same reason.
//
// An OOM reply is typed: [ErrOutOfMemory] together with [ErrUnavailable],
// naming the node and its limit. It is transient for the reconciler
// ([Unsettleable] is false): a part is never set aside for it.

// memRule is what a script may do on a node over its maxmemory (see the
// comment above).
type memRule int

const (
	memRead memRule = iota
	memGrow
	memRelease
)

// shebang returns the first line that declares the rule to Redis.
func (m memRule) shebang() string {
	switch m {
	case memRead:
		return "#!lua flags=no-writes\n"
	case memRelease:
		return "#!lua flags=allow-oom\n"
	}
	return "#!lua\n"
}

// memOf is the rule of a script declared only as writing or not: a write
// script may take memory.
func memOf(write bool) memRule {
	if write {
		return memGrow
	}
	return memRead
}

// ErrOutOfMemory is wrapped (together with [ErrUnavailable]) when a node
// refused a script because it is at its maxmemory (policy noeviction):
// nothing was changed. Reserves needing that node fail; settles and
// decisions are not refused for it (memRelease, oom.go).
var ErrOutOfMemory = errors.New("node out of memory")

// oomTimeout bounds the read of a node's memory limit for an OOM error.
const oomTimeout = 200 * time.Millisecond

// oomError is an OOM reply of a node, described: "node n2 is out of
// memory (maxmemory 10mb, noeviction): OOM command not allowed …". It
// wraps [ErrUnavailable], [ErrOutOfMemory] and the reply.
type oomError struct {
	msg   string
	reply error
}

func (e *oomError) Error() string   { return e.msg }
func (e *oomError) Unwrap() []error { return []error{ErrUnavailable, ErrOutOfMemory, e.reply} }

// oomErr describes the OOM reply err of n, with n's memory limit as it
// reports it now.
func oomErr(n *node.Node, err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), oomTimeout)
	defer cancel()
	limit := "maxmemory unknown"
	if m, ok := n.MemoryLimit(ctx); ok {
		limit = m.String()
	}
	return &oomError{msg: fmt.Sprintf("node %s is out of memory (%s): %v", n.Name(), limit, err), reply: err}
}
