package node

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Auto-pipelining.
//
// With Options.Pipeline set, the node's client shares writes and reads
// between concurrent callers: a command that finds at least
// Options.PipelineFrom commands of the same client under way (itself
// included) is handed to go-redis's auto-pipeliner (its deferred face,
// Client.AsyncAutoPipelineWithOptions), which sends the commands queued by
// then as one pipeline on one connection. A command that finds fewer is
// sent at once on the ordinary pool, one connection per caller, so a lone
// caller pays nothing for the pipeliner's hand-off between goroutines (as
// rueidis does), and neither do a few: go-redis's pipeliner coalesces a
// batch by waiting for the wave of callers its previous batch woke (a
// silence gap of at least 200µs), which with a handful of callers per node
// costs far more than the syscalls it saves. Measured on a 2-core machine
// with three nodes, GET from 6 goroutines (2 per node): pipelining from 2
// commands under way ran at 0.30× the same build with pipelining off, from
// 6 at 1.02× (README, "Auto-pipelining").
//
// Lanes, by the number u of the client's commands under way that could
// share a pipeline, the new one included (read once, when the command
// starts), and a, the moving average of u over about the client's last 16
// commands. Commands that cannot share a connection (below) are not
// counted: among them the HELLO go-redis sends through the client's hooks
// when it opens a connection, which would otherwise make a few callers
// that each open one look like many.
//
//	u < PipelineFrom                    the ordinary pool (one round trip each)
//	PipelineFrom ≤ u, u < BusyFrom,     the prompt pipeliner (Pipeline's options)
//	  a < the busy batch target
//	PipelineFrom ≤ u, and BusyFrom ≤ u  the busy pipeliner (BusyPipeline's),
//	  or a ≥ the busy batch target      or the prompt one when there is none
//
// The busy batch target is BusyPipeline's MaxBatchSize. While on average
// that many commands are under way, the busy pipeline's batches fill
// without waiting out its flush delay, and a command that happens to find
// fewer under way would only cut the prompt pipeline's batches smaller
// (more writes and reads per command): it rides the busy one too. Measured
// on a 2-core machine with three nodes (GET, busy target 16, BusyFrom 12):
// +7 to +9 % throughput at 64 and 96 goroutines, within ±1.3 % at 30 to
// 48, where the average stays below the target (README, "Auto-pipelining").
//
// Whatever the lane, a command goes on the pool while the node is not
// usable and when it cannot share a connection (below).
//
// The node's semantics hold on both paths:
//   - the state gate and the breaker admit a pipelined batch once and count
//     a failed batch as one node failure (the batch gate, a go-redis Limiter
//     on the pipeliner's inner client, gate.go; for a Sentinel group the
//     node's hook on that client), so a DOWN node still refuses at once;
//   - a batch never mixes two nodes: every client has its own pipeliner;
//   - the caller's context bounds its call: a command waits for its batch
//     only until ctx is done or the command timeout passed (plus at most a
//     sixteenth of it: commands that start together under one context share
//     one timer, see bound), then returns ctx.Err() or a timeout error (the
//     command may still run: its outcome is unknown, exactly as for a
//     timed-out command on the ordinary path).
//     The batch writes into a shadow command of the same type, copied into
//     the caller's command only when the caller is still waiting, so an
//     abandoned wait never races with the batch. A context that can never
//     be done (context.Background) needs no shadow: the command itself
//     rides the pipeline and its caller waits for the batch, which fails
//     on the node's own read and write timeouts.
//
// Commands that cannot share a connection stay on the ordinary path:
// connection-scoped ones (WATCH, MULTI/EXEC, SELECT, CLIENT, HELLO, AUTH,
// the subscribe family, MONITOR), blocking ones (BLPOP & co., WAIT,
// WAITAOF, XREAD/XREADGROUP), and commands whose reply type the shadow
// cannot carry. Pipelines and transactions built by the caller
// (Pipelined, TxPipelined) never go through the pipeliner either.

// pipeliner redirects one client's commands; it is the client's outermost
// hook, so pipelined commands skip the node's own hook on that client and
// are admitted as batches by the inner client's gate.
type pipeliner struct {
	n        *Node
	ap       atomic.Pointer[pipelinerRef] // set once the client exists (clientRef says why a ref)
	busy     atomic.Pointer[pipelinerRef] // Options.BusyPipeline's, when set
	from     int64                        // Options.PipelineFrom
	busyFrom int64                        // Options.BusyFrom
	inflight atomic.Int64                 // commands of this client under way
	// avg is 16 × the moving average of inflight as commands start
	// (busyLane); busyBatch is the busy pipeline's batch target (0
	// without a busy pipeline).
	avg       atomic.Int64
	busyBatch int64
	slot      atomic.Pointer[waitSlot] // the current shared wait bound (see bound)
}

// waitSlot is a wait bound shared by the pipelined commands that start
// within one slot of time under the same caller context: a context derived
// from the caller's, done when it is or at the slot's deadline.
type waitSlot struct {
	parent <-chan struct{} // Done channel of the caller context it derives from
	ctx    context.Context
	cancel context.CancelFunc // not called: the slot's deadline releases it (waiters may outlive the slot)
	join   int64              // unix nanos: handed out only before this
}

// slotFraction sets the slot length: a slot is handed out for
// CommandTimeout/slotFraction and is done CommandTimeout after that, so a
// pipelined command waits at least the command timeout and at most 1/16
// more.
const slotFraction = 16

// bound returns a context that is done when ctx is done or the command
// timeout (plus at most 1/slotFraction of it) has passed, for waiting on a
// batch. Deriving a context with its own timer per command cost four
// allocations, a timer and two trips through the parent's lock; callers
// that share a long-lived context (worker loops, a service context) share
// one derived context per slot instead. Contexts are matched by their Done
// channel: contexts with the same Done channel end together, and only
// Done and Err of the wait context are used.
func (p *pipeliner) bound(ctx context.Context) context.Context {
	timeout := p.n.opts.CommandTimeout
	now := time.Now()
	done := ctx.Done()
	if s := p.slot.Load(); s != nil && s.parent == done && now.UnixNano() < s.join {
		return s.ctx
	}
	width := timeout / slotFraction
	wctx, cancel := context.WithDeadline(ctx, now.Add(timeout+width))
	p.slot.Store(&waitSlot{parent: done, ctx: wctx, cancel: cancel, join: now.Add(width).UnixNano()})
	return wctx
}

func (p *pipeliner) DialHook(next redis.DialHook) redis.DialHook { return next }

func (p *pipeliner) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (p *pipeliner) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !pipelinable(cmd.Name()) {
			return next(ctx, cmd) // not counted as under way (see the lanes)
		}
		under := p.inflight.Add(1)
		defer p.inflight.Add(-1)
		shared := under >= p.from
		var ap *redis.AutoPipeliner
		busy := false
		if r := p.ap.Load(); r != nil {
			ap = r.p
		}
		if bp := p.busy.Load(); bp != nil && p.busyLane(under) {
			ap, busy = bp.p, true
		}
		if !shared || ap == nil || !p.n.Usable() {
			return next(ctx, cmd)
		}
		if ctx.Done() == nil {
			// Nothing can end the caller's wait early: the command itself
			// rides the pipeline (no shadow, no timer).
			p.rode(busy)
			return ap.Submit(ctx, cmd).Wait()
		}
		shadow := shadowOf(ctx, cmd)
		if shadow == nil {
			return next(ctx, cmd)
		}
		if err := ctx.Err(); err != nil {
			cmd.SetErr(err)
			return err
		}
		p.rode(busy)
		fut := ap.Submit(ctx, shadow)
		// Wait no longer than the caller wants, nor than the command
		// timeout a command sent on its own would wait for (see bound).
		wctx := ctx
		if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > p.n.opts.CommandTimeout {
			wctx = p.bound(ctx)
		}
		err := fut.WaitContext(wctx)
		if err != nil && wctx.Err() != nil && err == wctx.Err() {
			// Abandoned: the shadow may still run; its reply is dropped
			// and its outcome is unknown, as for a timed-out command.
			if ctx.Err() != nil {
				err = ctx.Err()
			} else {
				err = &pipelineTimeout{node: p.n.opts.Name, after: p.n.opts.CommandTimeout}
			}
			cmd.SetErr(err)
			return err
		}
		copyReply(cmd, shadow)
		return cmd.Err()
	}
}

// rode counts a command that rode a pipeline (busy: the busy one).
func (p *pipeliner) rode(busy bool) {
	p.n.pipelined.Add(1)
	if busy {
		p.n.busyPipelined.Add(1)
	}
}

// busyLane reports whether a command that finds under commands of the
// client under way rides the busy pipeline (see the lanes above), and
// folds under into the moving average. Two commands starting at once may
// each miss the other's update: the average needs none exact.
func (p *pipeliner) busyLane(under int64) bool {
	a := p.avg.Load()
	a += under - a/16
	p.avg.Store(a)
	return under >= p.busyFrom || (p.busyBatch > 0 && a >= 16*p.busyBatch)
}

// pipelineTimeout is the error of a pipelined command whose batch did not
// answer within the command timeout. Like a network timeout it says the
// command may or may not have run; the batch itself is counted against the
// node (once) when it fails.
type pipelineTimeout struct {
	node  string
	after time.Duration
}

func (e *pipelineTimeout) Error() string {
	return "node " + e.node + ": pipelined command: no reply within " + e.after.String() + " (i/o timeout)"
}

// Timeout reports true: the error is a timeout (net.Error).
func (e *pipelineTimeout) Timeout() bool { return true }

// Temporary reports true (net.Error).
func (e *pipelineTimeout) Temporary() bool { return true }

// pipelinable reports whether a command may share a connection with others.
func pipelinable(name string) bool {
	switch name {
	case "watch", "unwatch", "multi", "exec", "discard",
		"hello", "auth", "select", "client", "reset", "quit", "readonly", "readwrite",
		"subscribe", "psubscribe", "ssubscribe", "unsubscribe", "punsubscribe", "sunsubscribe", "monitor",
		"blpop", "brpop", "brpoplpush", "blmove", "blmpop", "bzpopmin", "bzpopmax", "bzmpop",
		"wait", "waitaof", "xread", "xreadgroup", "migrate", "sync", "psync", "shutdown", "debug":
		return false
	}
	return true
}

// shadowOf returns a fresh command of cmd's type with its arguments, or nil
// when the type is not one the shadow can carry.
func shadowOf(ctx context.Context, cmd redis.Cmder) redis.Cmder {
	args := cmd.Args()
	switch cmd.(type) {
	case *redis.Cmd:
		return redis.NewCmd(ctx, args...)
	case *redis.StringCmd:
		return redis.NewStringCmd(ctx, args...)
	case *redis.StatusCmd:
		return redis.NewStatusCmd(ctx, args...)
	case *redis.IntCmd:
		return redis.NewIntCmd(ctx, args...)
	case *redis.BoolCmd:
		return redis.NewBoolCmd(ctx, args...)
	case *redis.FloatCmd:
		return redis.NewFloatCmd(ctx, args...)
	case *redis.SliceCmd:
		return redis.NewSliceCmd(ctx, args...)
	case *redis.StringSliceCmd:
		return redis.NewStringSliceCmd(ctx, args...)
	case *redis.IntSliceCmd:
		return redis.NewIntSliceCmd(ctx, args...)
	case *redis.BoolSliceCmd:
		return redis.NewBoolSliceCmd(ctx, args...)
	case *redis.MapStringStringCmd:
		return redis.NewMapStringStringCmd(ctx, args...)
	}
	return nil
}

// copyReply moves the shadow's reply into cmd (same concrete type, see
// shadowOf).
func copyReply(cmd, shadow redis.Cmder) {
	switch c := cmd.(type) {
	case *redis.Cmd:
		c.SetVal(shadow.(*redis.Cmd).Val())
	case *redis.StringCmd:
		c.SetVal(shadow.(*redis.StringCmd).Val())
	case *redis.StatusCmd:
		c.SetVal(shadow.(*redis.StatusCmd).Val())
	case *redis.IntCmd:
		c.SetVal(shadow.(*redis.IntCmd).Val())
	case *redis.BoolCmd:
		c.SetVal(shadow.(*redis.BoolCmd).Val())
	case *redis.FloatCmd:
		c.SetVal(shadow.(*redis.FloatCmd).Val())
	case *redis.SliceCmd:
		c.SetVal(shadow.(*redis.SliceCmd).Val())
	case *redis.StringSliceCmd:
		c.SetVal(shadow.(*redis.StringSliceCmd).Val())
	case *redis.IntSliceCmd:
		c.SetVal(shadow.(*redis.IntSliceCmd).Val())
	case *redis.BoolSliceCmd:
		c.SetVal(shadow.(*redis.BoolSliceCmd).Val())
	case *redis.MapStringStringCmd:
		c.SetVal(shadow.(*redis.MapStringStringCmd).Val())
	}
	cmd.SetErr(shadow.Err())
}

// Pipelined returns how many commands of the node's clients rode a shared
// pipeline (as opposed to being sent on their own) since the node was made.
func (n *Node) Pipelined() int64 { return n.pipelined.Load() }

// BusyPipelined returns how many of the commands Pipelined counts rode the
// busy pipeline (Options.BusyPipeline).
func (n *Node) BusyPipelined() int64 { return n.busyPipelined.Load() }
