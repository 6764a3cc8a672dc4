package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// hook admits every command of the node's client through the state gate
// and the breaker, and reports the outcome.
type hook struct{ n *Node }

func (h hook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		return h.n.afterDial(conn, err)
	}
}

// handshake reports whether cmd is one of go-redis's connection-setup
// commands (HELLO, AUTH, SELECT, READONLY, CLIENT SETNAME, SETINFO or
// TRACKING). go-redis runs those through the hooks too, inside the command
// that needed a new connection: they belong to a command already admitted
// and must neither be admitted again (a half-open breaker would refuse
// them, failing its own trial) nor be counted twice. A caller's own CLIENT
// ID, CLIENT LIST and the like are not setup: they are admitted as any
// command. Matching name and subcommand costs no allocation, unlike
// marking the context of every admitted command.
func handshake(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "auth", "select", "readonly":
		return true
	case "client":
		args := cmd.Args()
		if len(args) < 2 {
			return false
		}
		sub, _ := args[1].(string)
		return strings.EqualFold(sub, "setname") || strings.EqualFold(sub, "setinfo") || strings.EqualFold(sub, "tracking")
	}
	return false
}

// handshakes reports whether cmds is go-redis's setup pipeline: not
// empty, and every command in it a handshake. A pipeline of a caller's
// that only begins with one is admitted as any pipeline.
func handshakes(cmds []redis.Cmder) bool {
	for _, cmd := range cmds {
		if !handshake(cmd) {
			return false
		}
	}
	return len(cmds) > 0
}

func (h hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if handshake(cmd) {
			return next(ctx, cmd)
		}
		g, done, err := h.n.admit()
		if err != nil {
			cmd.SetErr(err)
			return err
		}
		var start time.Time
		if h.n.opts.Observe != nil {
			start = time.Now()
		}
		err = next(ctx, cmd)
		h.n.record(ctx, g, done, err, start)
		return err
	}
}

func (h hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if handshakes(cmds) {
			return next(ctx, cmds)
		}
		g, done, err := h.n.admit()
		if err != nil {
			for _, cmd := range cmds {
				cmd.SetErr(err)
			}
			return err
		}
		var start time.Time
		if h.n.opts.Observe != nil {
			start = time.Now()
		}
		err = next(ctx, cmds)
		h.n.record(ctx, g, done, h.n.pipelineErr(ctx, err, cmds), start)
		return err
	}
}

// pipelineErr is the error a pipeline's outcome is recorded with: err,
// its first command's error, or, for a Sentinel node when err is no node
// failure, a later command's READONLY reply. A pipeline whose first
// error is a harmless one (a GET of a missing key) must not hide that the
// server reached was demoted ([Node.failed]). Reading the commands' errors
// here does not wait: the hook runs on the goroutine that executed them.
func (n *Node) pipelineErr(ctx context.Context, err error, cmds []redis.Cmder) error {
	if err == nil || n.opts.Sentinel == nil || n.failed(ctx, err) {
		return err
	}
	for _, cmd := range cmds {
		if e := cmd.Err(); e != nil && redis.IsReadOnlyError(e) {
			return e
		}
	}
	return err
}

// admit lets a command through, or refuses it at once, and returns the
// breaker generation it was admitted under (its outcome is reported there,
// never to a newer one). While the breaker is closed and no failure is
// pending (the common case), it does not touch the breaker at all (two
// mutex round trips, two clock reads and a closure per command otherwise):
// with no failure since the last success, a success would change nothing
// in it. It returns a nil done func then.
func (n *Node) admit() (*guard, func(error), error) {
	if State(n.state.Load()) != StateUp {
		return nil, nil, n.refusal(fmt.Errorf("%w: %v", ErrDown, n.downText()))
	}
	g := n.guard.Load()
	if g.fast() {
		return g, nil, nil
	}
	done, err := g.cb.Allow()
	if err != nil {
		if isBreakerRefusal(err) {
			return nil, nil, n.refusal(ErrBreakerOpen)
		}
		return nil, nil, n.refusal(err)
	}
	return g, done, nil
}

// admitRead admits a command of the replica read client: refused at once
// while the node is DOWN or its breaker is open, like any command, but it
// takes no breaker trial (its outcome is not reported there).
func (n *Node) admitRead() error {
	if State(n.state.Load()) != StateUp {
		return n.refusal(fmt.Errorf("%w: %v", ErrDown, n.downText()))
	}
	if !n.guard.Load().usable() {
		return n.refusal(ErrBreakerOpen)
	}
	return nil
}

// observeRead runs a replica read and reports its duration to Observe. A
// replica's failure is not the master's: nothing else is told. A read the
// client never sent (notSent) is not observed.
func (n *Node) observeRead(ctx context.Context, run func() error) error {
	if n.opts.Observe == nil {
		return run()
	}
	start := time.Now()
	err := run()
	if !notSent(err) {
		n.opts.Observe(time.Since(start), IsFailure(ctx, err))
	}
	return err
}

// notSent reports whether err says the client never sent the command: no
// free connection in time (redis.ErrPoolTimeout) or the client closed
// (redis.ErrClosed). Such a command did not reach the network, so it is
// neither observed nor counted by the breaker either way.
func notSent(err error) bool {
	return errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrClosed)
}

// failed reports whether err is a node failure of this node: [IsFailure],
// and for a Sentinel node also a READONLY reply (the server reached was
// demoted: the group's master moved).
func (n *Node) failed(ctx context.Context, err error) bool {
	if IsFailure(ctx, err) {
		return true
	}
	return n.opts.Sentinel != nil && err != nil && redis.IsReadOnlyError(err)
}

// record reports a command's outcome to the breaker generation it was
// admitted under and, on a node failure, to OnFailure.
func (n *Node) record(ctx context.Context, g *guard, done func(error), err error, start time.Time) {
	failure := n.failed(ctx, err)
	if n.opts.Observe != nil && !notSent(err) {
		n.opts.Observe(time.Since(start), failure)
	}
	switch {
	case failure:
		g.fail(done)
		n.opts.OnFailure()
	case done == nil: // admitted on the fast path: nothing to report
	case err != nil && (callerGaveUp(ctx) || notSent(err)):
		// the caller gave up, or the client could not send (saturated,
		// closed): says nothing about the node, neither way
		done(errExcluded)
	default:
		g.succeed(done) // the node answered, maybe with an error reply
	}
}
