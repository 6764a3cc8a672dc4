package inventory

import (
	"context"
	"slices"

	"github.com/shardis/shardis/node"
)

// A round: one script call per node, on several nodes at once, each as
// run sends it (script_run.go), the caller waiting for all of them. Every such
// fan-out is sent by sendRound: an order's one round (the stage on its
// home and its takes elsewhere: staged_reserve.go), each round of the
// general path's takes (take.go), the settles and aborts of an order's
// parts (order_ops.go), the probes of a staged record's parts
// (staged.go), and a SKU's load and read on its route's nodes (stock.go).

// start begins run(ctx, n, s, keys, args...) and returns wait, which waits
// for it and returns what run returns (call it once). A call of a grouped
// script that queues behind its node's groups under way (group.go), the
// usual case under load, takes no goroutine: its group answers it. Any
// other call (one that takes a free slot, or is not grouped, or goes
// through injected faults) runs on a goroutine of its own, a reused one
// when one is parked (workers.go). sendRound begins every call of a
// round but the last so.
func (inv *Inventory) start(ctx context.Context, n *node.Node, s *luaScript, keys []string, args ...any) (wait func() (any, error)) {
	if s.group && inv.opts.GroupCommit > 1 && inv.opts.Faults == nil {
		v := inv.topology(ctx)
		if err := v.refuse(); err != nil {
			return func() (any, error) { return nil, err }
		}
		c, q, own := inv.enterGroup(n, s, v.token, keys, args)
		if own {
			inv.workers.run(func() { inv.sendOwn(ctx, n, q, s, v.token, c, true) })
		}
		return func() (any, error) {
			reply, seq, err := awaitGroup(ctx, q, s, c)
			return inv.ran(ctx, n, s, v, keys, args, reply, seq, err)
		}
	}
	var (
		reply any
		err   error
	)
	done := make(chan struct{})
	inv.workers.run(func() {
		defer close(done)
		reply, err = inv.run(ctx, n, s, keys, args...)
	})
	return func() (any, error) {
		<-done
		return reply, err
	}
}

// scriptCall is one call of a round (sendRound): script s on node n with
// keys and args as run takes them, or err, which stopped the call before
// it could be sent (its arguments could not be made).
type scriptCall struct {
	n    *node.Node
	s    *luaScript
	keys []string
	args []any
	err  error
}

// callReply is a scriptCall's outcome: run's reply and error, or the
// call's own err.
type callReply struct {
	v   any
	err error
}

// sendRound runs a round's calls, one per node, at once: every call but
// the last begun by start, the last run on this goroutine, then the
// others waited for. It appends calls[i]'s outcome to out for each i,
// in order (out is the caller's array: a round of up to 6 calls, a stage
// and five nodes' takes, allocates nothing here).
func (inv *Inventory) sendRound(ctx context.Context, calls []scriptCall, out []callReply) []callReply {
	if len(calls) == 0 {
		return out
	}
	var waitArr [5]func() (any, error) // the begun calls' waits
	waits := waitArr[:0]
	last := len(calls) - 1
	for _, c := range calls[:last] {
		var wait func() (any, error)
		if c.err == nil {
			wait = inv.start(ctx, c.n, c.s, c.keys, c.args...)
		}
		waits = append(waits, wait)
	}
	var lastReply callReply
	if c := calls[last]; c.err != nil {
		lastReply.err = c.err
	} else {
		lastReply.v, lastReply.err = inv.run(ctx, c.n, c.s, c.keys, c.args...)
	}
	for i, wait := range waits {
		if wait == nil {
			out = append(out, callReply{err: calls[i].err})
			continue
		}
		v, err := wait()
		out = append(out, callReply{v, err})
	}
	return append(out, lastReply)
}

// nodeParts is the parts of one node among a list of parts: their
// indexes.
type nodeParts struct {
	node string
	idx  []int
}

// byNode groups parts by node, nodes in the order the parts name them
// first (a round's calls, one per node). An order has few nodes: a slice
// searched in order costs less than a map.
func byNode(parts []part) []nodeParts {
	var out []nodeParts
	for i, p := range parts {
		k := slices.IndexFunc(out, func(g nodeParts) bool { return g.node == p.Node })
		if k < 0 {
			out = append(out, nodeParts{node: p.Node})
			k = len(out) - 1
		}
		out[k].idx = append(out[k].idx, i)
	}
	return out
}
