package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
)

// The gRPC code of each inventory error class, as gRPC's rules have it:
// a bad argument is invalid_argument whatever the system's state; a
// route of the configuration not yet applied on the nodes is a state the
// call needs (failed_precondition), though it also wraps ErrInvalid.
func TestRPCErrorCodes(t *testing.T) {
	for _, c := range []struct {
		err  error
		want connect.Code
	}{
		{fmt.Errorf("%w: route_key %q is not a route of server %q", inventory.ErrInvalid, "nope", "inventory"), connect.CodeInvalidArgument},
		{fmt.Errorf("%w: %w: route %q is not in the applied topology (epoch 3)", inventory.ErrInvalid, inventory.ErrNotApplied, "x"), connect.CodeFailedPrecondition},
		{fmt.Errorf("%w: sku s", inventory.ErrInsufficientStock), connect.CodeFailedPrecondition},
		// an operator's settle of a part not set aside, or whose order's record exists
		{fmt.Errorf("%w: node n2: part %q is not set aside", inventory.ErrPrecondition, "p"), connect.CodeFailedPrecondition},
		{fmt.Errorf("%w: order o", inventory.ErrInProgress), connect.CodeAborted},
		{fmt.Errorf("%w: part p", inventory.ErrDataLoss), connect.CodeDataLoss},
		// a drain of a DOWN node (node.PersistRouteEnabled's wrapping)
		{fmt.Errorf("node n1: recording the drain of \"inventory/a\" on the node: %w",
			&node.Error{Node: "n1", Addr: "127.0.0.1:1", Err: fmt.Errorf("%w: probe: connecting: i/o timeout", node.ErrDown)}), connect.CodeUnavailable},
		{&node.Error{Node: "n1", Addr: "127.0.0.1:1", Err: node.ErrBreakerOpen}, connect.CodeUnavailable},
		{errors.New("node vanished"), connect.CodeInternal},
		// a new connection's stamp check refused the node before a probe
		// marked it DOWN (a drain meets it unwrapped): the data path
		// answers unavailable for it, so does the drain
		{fmt.Errorf("node n1: recording the drain of %q on the node: %w", "inventory/a",
			&node.Error{Node: "n1", Addr: "127.0.0.1:1", Err: fmt.Errorf("%w: no stamp", node.ErrDataLost)}), connect.CodeUnavailable},
		{&node.Error{Node: "n1", Addr: "127.0.0.1:1", Err: fmt.Errorf("%w: seq 3 < 9", node.ErrRolledBack)}, connect.CodeUnavailable},
		{&node.Error{Node: "n1", Addr: "127.0.0.1:1", Err: fmt.Errorf("%w: the server reached has role %q", node.ErrNotMaster, "slave")}, connect.CodeUnavailable},
		{fmt.Errorf("node n1: %w (mymaster): redis: nil", node.ErrNoMaster), connect.CodeUnavailable},
		// a node that cannot be reached or talked to: unavailable, as a
		// DOWN one (these answered internal)
		{fmt.Errorf("node n1: accept: %w: %w", node.ErrUnreachable, dialRefused), connect.CodeUnavailable},
		{fmt.Errorf("node n1: recording the drain of %q on the node: %w", "inventory/a", dialRefused), connect.CodeUnavailable},
		{fmt.Errorf("node n1: accept: %w", io.EOF), connect.CodeUnavailable},
		{fmt.Errorf("node n1: %w", syscall.ECONNRESET), connect.CodeUnavailable},
		// what a node answered keeps its code, a network error wrapped
		// in it or not
		{fmt.Errorf("%w: node n1: %w", inventory.ErrCorrupt, dialRefused), connect.CodeInternal},
		{fmt.Errorf("%w: node n1: %w", inventory.ErrScriptFailed, io.EOF), connect.CodeInternal},
		{fmt.Errorf("%w: part p: %w", inventory.ErrDataLoss, dialRefused), connect.CodeDataLoss},
		{fmt.Errorf("node n1: accept: %w", errors.New("unexpected reply [1]")), connect.CodeInternal},
		// a Reserve whose outcome is unknown: retry it as it is
		{fmt.Errorf("%w: order %q: outcome unknown, retry Reserve with the same order id: %w", inventory.ErrUnavailable, "o", dialRefused), connect.CodeUnavailable},
		// a LoadStock applied on some nodes: retried as it is, it adds twice
		{fmt.Errorf("%w: load of sku %q", inventory.ErrPartlyApplied, "s"), connect.CodeAborted},
	} {
		var ce *connect.Error
		if got := rpcError(c.err); !errors.As(got, &ce) || ce.Code() != c.want {
			t.Errorf("rpcError(%v) = %v, want code %v", c.err, got, c.want)
		}
	}
}

// dialRefused is the error of a dial to a node that is not listening.
var dialRefused error = &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}

// A message says its class once: a sentinel that only repeats the code
// is dropped wherever the library's wrapping put it.
func TestRPCErrorSaysClassOnce(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("items[0]: %w", fmt.Errorf("%w: route_key %q is not a route of server %q", inventory.ErrInvalid, "nope", "inventory")),
			`items[0]: route_key "nope" is not a route of server "inventory"`},
		{fmt.Errorf("%w: %w: route %q is not in the applied topology (epoch 3): run `shardis topology apply`", inventory.ErrInvalid, inventory.ErrNotApplied, "x"),
			"route \"x\" is not in the applied topology (epoch 3): run `shardis topology apply`"},
		{fmt.Errorf("%w: items[0] sku %q was never loaded on route %q", inventory.ErrUnknownSKU, "s", "r"),
			`items[0] sku "s" was never loaded on route "r"`},
		{fmt.Errorf("%w: sku s", inventory.ErrInsufficientStock), "insufficient stock: sku s"},
		{fmt.Errorf("%w: node n2: part %q is not set aside", inventory.ErrPrecondition, "p"), `node n2: part "p" is not set aside`},
	} {
		var ce *connect.Error
		got := rpcError(c.err)
		if !errors.As(got, &ce) || ce.Message() != c.want {
			t.Errorf("rpcError(%v) message %q, want %q", c.err, ce.Message(), c.want)
		}
		if !errors.Is(ce.Unwrap(), c.err) {
			t.Errorf("rpcError(%v) does not wrap the library's error", c.err)
		}
	}
}

// JSON clients read JSON field names; quoted values are left alone.
func TestToJSONNames(t *testing.T) {
	for in, want := range map[string]string{
		"order_id is empty":                       "orderId is empty",
		"items[2].sku_id is empty":                "items[2].skuId is empty",
		`route_key "order_id" is not a route`:     `routeKey "order_id" is not a route`,
		"ttl_seconds is negative; user_id x":      "ttlSeconds is negative; userId x",
		"per_user_limit is 5, service.max_body_x": "perUserLimit is 5, service.max_body_x",
		"no field here":                           "no field here",
	} {
		if got := toJSONNames(in); got != want {
			t.Errorf("toJSONNames(%q) = %q, want %q", in, got, want)
		}
	}
}

// callerCode gives a call its context ended the code of how it ended: a
// context cancelled at or past its deadline is deadline_exceeded whether
// its own timer fired first or grpc-go's (which closes the stream at the
// deadline, cancelling the context: ci521 answered one such call
// canceled), a context cancelled before its deadline is canceled, and an
// answer of the system's (insufficient stock) keeps its code.
func TestCallerCode(t *testing.T) {
	cutAt := func(d time.Duration, wait bool) context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		cancel() // Canceled, as grpc-go's timer leaves it
		if wait {
			time.Sleep(d + 5*time.Millisecond)
		}
		return ctx
	}
	short := fmt.Errorf("%w: sku s", inventory.ErrInsufficientStock)
	for _, c := range []struct {
		what string
		ctx  context.Context
		err  error
		want connect.Code
	}{
		{"canceled past the deadline", cutAt(10*time.Millisecond, true), rpcError(context.Canceled), connect.CodeDeadlineExceeded},
		{"unavailable past the deadline", cutAt(10*time.Millisecond, true), rpcError(node.ErrDown), connect.CodeDeadlineExceeded},
		{"canceled before the deadline", cutAt(time.Hour, false), rpcError(context.Canceled), connect.CodeCanceled},
		{"unavailable, context live", context.Background(), rpcError(node.ErrDown), connect.CodeUnavailable},
		{"insufficient stock past the deadline", cutAt(10*time.Millisecond, true), rpcError(short), connect.CodeFailedPrecondition},
	} {
		if got := connect.CodeOf(callerCode(c.ctx, c.err)); got != c.want {
			t.Errorf("%s: %v, want %v", c.what, got, c.want)
		}
	}
}

// Quoted text, as the library writes a client's value with %q, is never
// rewritten: not by the trimming of sentinel texts, not by the JSON
// names, whatever the value holds (a sentinel's text, a field name, an
// escaped quote, a trailing backslash), and the text after it is
// rewritten as usual. Before, trimSentinels ran over quoted values
// (route_key "x: invalid argument: y" came back "x: y"), and toJSONNames
// took the quote after `\\` for an escaped one, so past a value ending in
// a backslash ("u\\") it rewrote quoted values ("order_id" → "orderId")
// and left field names (user_id) alone.
func TestErrorRewritesLeaveQuotedValues(t *testing.T) {
	trim := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("%w: route_key %q is not a route of server %q", inventory.ErrInvalid, "x: invalid argument: y", "inventory"),
			`route_key "x: invalid argument: y" is not a route of server "inventory"`},
		{fmt.Errorf("items[0]: %w", fmt.Errorf("%w: route_key %q: %w: x", inventory.ErrInvalid, `a\`, inventory.ErrInvalid)),
			`items[0]: route_key "a\\": x`},
		{fmt.Errorf("items[1]: %w: sku_id %q is %q", inventory.ErrInvalid, `": invalid argument: "`, "x\": invalid argument: \\"),
			`items[1]: sku_id "\": invalid argument: \"" is "x\": invalid argument: \\"`},
	}
	for _, c := range trim {
		var ce *connect.Error
		if got := rpcError(c.err); !errors.As(got, &ce) || ce.Message() != c.want {
			t.Errorf("rpcError(%v) message %q, want %q", c.err, ce.Message(), c.want)
		}
	}
	names := []struct{ in, want string }{
		{fmt.Sprintf("user %q holds 0 of sku %q, user_id", `u\`, "order_id"),
			`user "u\\" holds 0 of sku "order_id", userId`},
		{fmt.Sprintf("items[0] sku %q (route %q) has a per-user limit of 5: an order of it needs user_id", `x\`, "all"),
			`items[0] sku "x\\" (route "all") has a per-user limit of 5: an order of it needs userId`},
		{fmt.Sprintf("sku_id %q, order_id %q and ttl_seconds", `a"order_id\"`, `\\`),
			`skuId "a\"order_id\\\"", orderId "\\\\" and ttlSeconds`},
		{`unclosed "order_id`, `unclosed "order_id`},
		{fmt.Sprintf("%q is order_id", "user_id"), `"user_id" is orderId`},
	}
	for _, c := range names {
		if got := toJSONNames(c.in); got != c.want {
			t.Errorf("toJSONNames(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
