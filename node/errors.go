package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
)

var (
	// ErrDown is wrapped by the [*Error] a command gets while its node is
	// DOWN. The command never reached the network.
	ErrDown = errors.New("node is down")
	// ErrBreakerOpen is wrapped by the [*Error] a command gets while its
	// node's breaker is open (or half-open with its trial in flight). The
	// command never reached the network.
	ErrBreakerOpen = errors.New("circuit breaker is open")
	// ErrIdentity is wrapped by a probe error when the node's stamp names
	// another node (ports swapped, wrong host) or its reply is not a stamp;
	// a stamp script that fails or is refused is the probe's error as it
	// came.
	ErrIdentity = errors.New("node identity mismatch")
	// ErrRolledBack is wrapped by a probe error when the node's data went
	// back in time: its write sequence is below one witnessed before, or its
	// stamp is of an older incarnation or generation. The node stays DOWN
	// until an operator accepts its data ([Node.Accept]).
	ErrRolledBack = errors.New("node data rolled back")
	// ErrDataLost is wrapped by a probe error when the node has no stamp
	// although other nodes witnessed it: it restarted empty. It is not
	// re-stamped; it stays DOWN until an operator accepts it.
	ErrDataLost = errors.New("node lost its data")
	// ErrHeldBack is wrapped by a probe or dial check error while a node
	// that keeps inventory data is held back after it came up on a new
	// server process (a restart, a promotion): Options.Settle, long enough
	// for every running process to mark the writes it saw acknowledged
	// (identity.go, "A new server process"). It passes by itself, or ends
	// as ErrRolledBack when the marks show the node lost writes.
	ErrHeldBack = errors.New("node held back after a new server process")
	// ErrUnwitnessed is wrapped by the [*Error] of [Node.Acknowledge] when
	// the first write of the node's incarnation that this process
	// acknowledges could not be witnessed on any peer (witness.go): the
	// write ran on the node, but it must not be acknowledged as durable;
	// its outcome is unknown, like a timeout's.
	ErrUnwitnessed = errors.New("first write of the incarnation not witnessed on any peer")
	// ErrUnknownRoute is returned by [Node.SetRouteEnabled] for a route the
	// node does not serve.
	ErrUnknownRoute = errors.New("unknown route")
	// ErrUnreachable is wrapped by the error of an operator's call on the
	// node ([Node.Accept], [Node.PersistRouteEnabled]) that could not reach
	// or talk to it ([IsTransport]: refused, reset, timed out, closed
	// mid-reply): the node cannot serve now, like a DOWN one, but no probe
	// has marked it DOWN yet (or the call runs past the state gate). The
	// network error stays wrapped. A call that timed out past its
	// context's deadline, or was canceled, wraps the context's error
	// instead: the wait was the caller's.
	ErrUnreachable = errors.New("node unreachable")
)

// IsTransport reports whether err is a failure to reach or talk to a node:
// a network error (net.Error: a dial refused, a timeout), a connection
// reset or closed mid-reply (io.EOF, io.ErrUnexpectedEOF, ECONNRESET,
// EPIPE), or [ErrUnreachable]. An error reply, a reply of the wrong shape
// and a refusal by this package ([ErrDown], [ErrBreakerOpen]) are not.
func IsTransport(err error) bool {
	var ne net.Error
	return err != nil && (errors.Is(err, ErrUnreachable) || errors.As(err, &ne) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPIPE))
}

// unreachable wraps err, the error of a call run with ctx, in
// [ErrUnreachable] when it is a transport failure ([IsTransport]) and does
// not wrap it yet; other errors are returned as they are. A timeout after
// the caller gave up (callerGaveUp: go-redis sets the connection's
// deadline to ctx's) is the caller's: it wraps ctx's error
// (context.DeadlineExceeded, context.Canceled), not ErrUnreachable.
func unreachable(ctx context.Context, err error) error {
	if err == nil || errors.Is(err, ErrUnreachable) || !IsTransport(err) {
		return err
	}
	if callerGaveUp(ctx) {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return err
		}
		cause := ctx.Err()
		if cause == nil { // the deadline passed, its timer not fired yet
			cause = context.DeadlineExceeded
		}
		return fmt.Errorf("%w: %w", cause, err)
	}
	return fmt.Errorf("%w: %w", ErrUnreachable, err)
}

// errExcluded marks an outcome the breaker must not count either way.
var errExcluded = errors.New("excluded")

// errFailure marks an outcome the breaker counts as a failure.
var errFailure = errors.New("failure")

// Error is the error of a command the node refused, or of a failed probe.
// It names the node; errors.Is matches the wrapped sentinel ([ErrDown],
// [ErrBreakerOpen], [ErrIdentity]) or cause.
type Error struct {
	Node string // configured node name
	Addr string // host:port
	Err  error  // the cause: a sentinel such as ErrDown, or the underlying error; never nil
}

// Error returns "node NAME (ADDR): cause".
func (e *Error) Error() string { return "node " + e.Node + " (" + e.Addr + "): " + e.Err.Error() }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// IsFailure reports whether err, returned by a command run with ctx, says
// the node itself failed: a network error, a timeout the caller did not
// ask for, or a reply meaning the node cannot serve (LOADING, BUSY,
// MASTERDOWN). These are not failures: nil, redis.Nil, errors the node
// replied with on purpose (script errors, WRONGTYPE, NOSCRIPT, OOM …),
// the caller's own cancellation or deadline, a refusal by this package
// ([ErrDown], [ErrBreakerOpen]), and the client's own state: every pooled
// connection busy (redis.ErrPoolTimeout) or the client closed
// (redis.ErrClosed: after [Node.Close], or a client a renewal retired and
// a caller still held).
func IsFailure(ctx context.Context, err error) bool {
	switch {
	case err == nil, errors.Is(err, redis.Nil):
		return false
	case errors.Is(err, ErrDown), errors.Is(err, ErrBreakerOpen):
		return false
	case callerGaveUp(ctx), errors.Is(err, context.Canceled):
		return false
	case errors.Is(err, redis.ErrPoolTimeout):
		return false // every connection busy: the client is saturated, not the node
	case errors.Is(err, redis.ErrClosed):
		return false // a client this process closed (Close, or one retired by a renewal)
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return busyReply(rerr)
	}
	return true
}

// busyReply reports whether reply is one by which the server says it
// cannot serve now: LOADING (reading its data at startup), BUSY (a script
// or function running past the busy threshold), MASTERDOWN (a replica
// whose link to its master is down).
func busyReply(reply redis.Error) bool {
	msg := reply.Error()
	return strings.HasPrefix(msg, "LOADING") || strings.HasPrefix(msg, "BUSY") ||
		strings.HasPrefix(msg, "MASTERDOWN")
}

// CannotServe reports whether err says the node cannot serve now, as
// opposed to an answer it gave on purpose (an error reply of a script, a
// reply of the wrong shape): a transport failure ([IsTransport]); a
// refusal by this package or a failed check of the node, which come as
// an [*Error] and are matched by it or by their sentinel ([ErrDown],
// [ErrBreakerOpen], [ErrHeldBack], [ErrUnwitnessed], and a probe's or a
// new connection's failed stamp check: [ErrRolledBack], [ErrDataLost],
// [ErrIdentity], [ErrNotMaster]); [ErrNoMaster]; or a reply by which the
// server says it cannot serve (LOADING, BUSY, MASTERDOWN). It is what a
// command of the data path meets when its node is unusable. Most pass by
// themselves; a node refused as rolled back or empty serves again only
// once an operator accepts its data ([Node.Accept]).
func CannotServe(err error) bool {
	if err == nil {
		return false
	}
	var named *Error
	var rerr redis.Error
	switch {
	case IsTransport(err), errors.As(err, &named):
		return true
	case errors.As(err, &rerr):
		return busyReply(rerr)
	}
	for _, s := range cannotServe {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// cannotServe are the sentinels [CannotServe] matches however they are
// wrapped.
var cannotServe = []error{ErrDown, ErrBreakerOpen, ErrHeldBack, ErrUnwitnessed,
	ErrRolledBack, ErrDataLost, ErrIdentity, ErrNotMaster, ErrNoMaster}

// callerGaveUp reports whether ctx is canceled or past its deadline. The
// deadline is checked against the clock, not only through ctx.Err(): with
// ContextTimeoutEnabled go-redis sets the connection deadline to the
// context's, so a read can time out a moment before the context's own timer
// has fired and ctx.Err() is still nil.
func callerGaveUp(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// refusal wraps cause (the state gate's or the breaker's refusal, or a
// failed identity check) in the node's *Error, naming the node and its
// address.
func (n *Node) refusal(cause error) *Error {
	return &Error{Node: n.opts.Name, Addr: n.opts.Addr, Err: cause}
}

func isBreakerRefusal(err error) bool {
	return errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests)
}

// HeldBackError is the cause of a refusal of a node held back after it
// came up on a new server process ([ErrHeldBack]): Left is how much longer
// the hold lasts, by the node's clock when it was read. The health
// scheduler probes the node again when it ends (RetryAfter).
type HeldBackError struct {
	Left time.Duration // how much longer the hold lasts, by the node's clock when read
}

// Error says the node is held back and for how long.
func (e *HeldBackError) Error() string {
	return fmt.Sprintf("%v (restart or failover): %v more, until every process has marked the writes it saw acknowledged",
		ErrHeldBack, e.Left)
}

// Unwrap returns ErrHeldBack.
func (e *HeldBackError) Unwrap() error { return ErrHeldBack }

// RetryAfter returns Left: when the node may pass.
func (e *HeldBackError) RetryAfter() time.Duration { return e.Left }
