package inventory

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/shardis/shardis/node"
)

// Running one script call on a node: run checks the served topology and
// sends the call alone (exec) or joined to its node's group call
// (runGrouped, group.go), through the Faults hook when one is set
// (faulty, faults.go); ran reads what came back. The scripts themselves
// and their shared prelude are lua.go's.

// run runs s on n with keys (after the stamp hash) and args (after the
// header), and returns the body's reply. Errors are mapped by nodeErr.
// The caller must not change keys, or a string an argument points to,
// after the call, even once it returned: the command line holds pointers
// into them (a *string, which go-redis writes as the string), and a call
// whose caller stopped waiting may still be written.
func (inv *Inventory) run(ctx context.Context, n *node.Node, s *luaScript, keys []string, args ...any) (any, error) {
	v := inv.topology(ctx)
	if err := v.refuse(); err != nil {
		return nil, err
	}
	reply, seq, err := inv.execFaulty(ctx, n, s, v.token, keys, args)
	return inv.ran(ctx, n, s, v, keys, args, reply, seq, err)
}

// execFaulty is exec through the injected faults (faults.go), if any.
func (inv *Inventory) execFaulty(ctx context.Context, n *node.Node, s *luaScript, token string, keys []string, args []any) (any, int64, error) {
	if inv.opts.Faults == nil {
		return inv.exec(ctx, n, s, token, keys, args)
	}
	var seq atomic.Int64 // send may run after faulty returned (Faults.Call)
	reply, err := inv.faulty(ctx, n, s, keys, args, func() (any, error) {
		r, sq, err := inv.exec(ctx, n, s, token, keys, args)
		seq.Store(sq)
		return r, err
	})
	return reply, seq.Load(), err
}

// exec runs one call of s on n under the epoch token: alone, or with the
// calls of others in one group (group.go) when s is grouped and group
// commit is on. It returns the body's reply and the node's write sequence.
func (inv *Inventory) exec(ctx context.Context, n *node.Node, s *luaScript, token string, keys []string, args []any) (any, int64, error) {
	if s.group {
		if inv.opts.GroupCommit > 1 {
			return inv.runGrouped(ctx, n, s, token, keys, args)
		}
		c := newGroupCall(s, keys, args)
		inv.sendGroup(ctx, n, s, token, []*groupCall{c})
		return c.reply, c.seq, c.err
	}
	a := s.evalArgs(1+len(keys), 3+len(args))
	a = append(a, stampKeyArg).keys(keys)
	a = append(a, n.Name(), token, partKeyPrefixArg)
	a = append(a, args...)
	return inv.callEnvelope(ctx, n, s, a)
}

// runGrouped runs one call of grouped script s on n under the epoch token
// and returns the call's body reply and the node's write sequence.
func (inv *Inventory) runGrouped(ctx context.Context, n *node.Node, s *luaScript, token string, keys []string, args []any) (any, int64, error) {
	c, q, own := inv.enterGroup(n, s, token, keys, args)
	if own {
		inv.sendOwn(ctx, n, q, s, token, c, false)
	}
	return awaitGroup(ctx, q, s, c)
}

// enterGroup makes one call of grouped script s on n and enters it in the
// node's queue (batchq.go): own reports that it took a free slot, so its
// caller sends it (sendOwn); otherwise it waits in the queue for a group
// that another sender sends.
func (inv *Inventory) enterGroup(n *node.Node, s *luaScript, token string, keys []string, args []any) (c *groupCall, q *groupQueue, own bool) {
	c = newGroupCall(s, keys, args)
	q = inv.groups.queue(n)
	return c, q, q.enter(s, c, token, groupInFlight)
}

// newGroupCall is a call of grouped script s with keys and args (after
// the stamp and the header), its context counted by s's rule. A rule
// that counts more than the call has, or more than a byte holds, is a bug
// of this package and panics.
func newGroupCall(s *luaScript, keys []string, args []any) *groupCall {
	c := &groupCall{keys: keys, args: args, done: make(chan struct{})}
	if s.context != nil {
		c.ck, c.ca = s.context(len(keys), len(args))
		if c.ck > len(keys) || c.ca > len(args) || c.ck > maxContext || c.ca > maxContext || c.ck < 0 || c.ca < 0 {
			panic(fmt.Sprintf("inventory: script %s: a context of %d keys and %d arguments in a call of %d and %d", s.name, c.ck, c.ca, len(keys), len(args)))
		}
	}
	return c
}

// evalArgs begins the command line of a call of s that has nkeys keys
// and nargs arguments: the caller appends exactly nkeys keys, then the
// arguments.
func (s *luaScript) evalArgs(nkeys, nargs int) evalArgs {
	a := make(evalArgs, 3, 3+nkeys+nargs)
	a[0], a[1], a[2] = "fcall", s.fn, nkeys
	return a
}

// faulty runs send through the injected faults, if any.
func (inv *Inventory) faulty(ctx context.Context, n *node.Node, s *luaScript, keys []string, args []any, send func() (any, error)) (any, error) {
	if inv.opts.Faults == nil {
		return send()
	}
	return inv.opts.Faults.Call(ctx, ScriptCall{Node: n.Name(), Script: s.name, Write: s.write, Keys: keys, Args: plainArgs(args)}, send)
}

// ran finishes run once its call under view v answered (reply, seq, err):
// errors mapped by nodeErr, a call refused for its topology epoch run once
// more, a write acknowledged.
func (inv *Inventory) ran(ctx context.Context, n *node.Node, s *luaScript, v *view, keys []string, args []any, reply any, seq int64, err error) (any, error) {
	if err != nil {
		err = nodeErr(n, err)
		if !errors.Is(err, ErrTopology) {
			return nil, err
		}
		// Refused before anything was read or written: reread the nodes
		// (a new or accepted node gets its record; another topology makes
		// this instance refuse or move to it) and run it once more, but
		// only at the same token: the caller placed its keys with v, and
		// another token may place them elsewhere (served.go).
		inv.staleTopology()
		v2 := inv.resync(ctx, inv.topo.cur.Load())
		if v2.refuse() != nil || v2.token != v.token {
			return nil, err
		}
		if reply, seq, err = inv.execFaulty(ctx, n, s, v2.token, keys, args); err != nil {
			return nil, nodeErr(n, err)
		}
	}
	if s.write {
		// The first write of an incarnation waits for a peer's mark
		// (node/witness.go); unwitnessed, its outcome is unknown.
		if err := n.Acknowledge(ctx, seq); err != nil {
			return nil, nodeErr(n, err)
		}
	}
	return reply, nil
}
