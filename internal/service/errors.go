package service

import (
	"context"
	"errors"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
	"github.com/shardis/shardis/router"
)

// Error answers. The code carries the class of an error; the message says
// what was wrong, naming the field, SKU, order or node, once:
//
//   - A sentinel's text that only repeats the code is dropped wherever the
//     library's wrapping put it ("invalid argument: " under
//     invalid_argument, also after "items[0]: "; "route not in the applied
//     topology: " under failed_precondition; "no node available: " under
//     unavailable; "sku never loaded: " under not_found; "precondition
//     failed: " under failed_precondition). errors.Is still sees the
//     original error.
//   - A JSON client (Connect JSON, gRPC+JSON, gRPC-Web+JSON) reads the
//     fields it sends: the message names them in the JSON mapping
//     ("orderId", "items[0].skuId"); binary clients read the proto names
//     ("order_id"). Quoted text (a value the client sent, which the
//     library quotes with %q) is never rewritten, by either: a quote
//     opens it, a backslash escapes the byte after it (\" and \\ stay
//     inside), the next unescaped quote closes it (mapUnquoted).

// rpcError maps library errors to Connect codes; the message keeps the
// library's text, which names the field, SKU, order or node. An error of
// no known class is internal, except one saying a node cannot serve now
// (node.CannotServe: unreachable, refused by its checks, busy), which is
// unavailable.
func rpcError(err error) error {
	code := connect.CodeInternal
	switch {
	case errors.Is(err, context.Canceled):
		code = connect.CodeCanceled
	case errors.Is(err, context.DeadlineExceeded):
		code = connect.CodeDeadlineExceeded
	case errors.Is(err, router.ErrNotWitnessed), errors.Is(err, inventory.ErrNotApplied),
		errors.Is(err, inventory.ErrIncarnation), errors.Is(err, inventory.ErrRewound),
		errors.Is(err, inventory.ErrPrecondition):
		// The system is not in the state the call needs (gRPC's rule for
		// failed_precondition); a valid route of the configuration that
		// `shardis topology apply` has not applied yet is served after it.
		// A redo-log acknowledgement for another incarnation, or for a
		// queue that went back under it, needs a fresh read first. An
		// operator's settle of a part not set aside, or whose order's
		// record exists (inventory.ErrPrecondition), is refused for the
		// state, the message saying what to do instead.
		code = connect.CodeFailedPrecondition
	case errors.Is(err, inventory.ErrInvalid), errors.Is(err, router.ErrUnknownRoute),
		errors.Is(err, router.ErrUnknownNode), errors.Is(err, node.ErrUnknownRoute):
		code = connect.CodeInvalidArgument
	case errors.Is(err, inventory.ErrNotFound), errors.Is(err, inventory.ErrUnknownSKU):
		code = connect.CodeNotFound
	case errors.Is(err, inventory.ErrInsufficientStock), errors.Is(err, inventory.ErrLimitExceeded),
		errors.Is(err, inventory.ErrCancelled), errors.Is(err, inventory.ErrExpired),
		errors.Is(err, inventory.ErrConfirmed), errors.Is(err, inventory.ErrOrderMismatch):
		code = connect.CodeFailedPrecondition
	case errors.Is(err, inventory.ErrInProgress):
		code = connect.CodeAborted
	case errors.Is(err, inventory.ErrPartlyApplied):
		// A LoadStock that added units on some nodes and failed on
		// others (it wraps ErrUnavailable too). gRPC's rule: unavailable
		// is for a call the client can retry as it is, aborted for one
		// to retry at a higher level (read, then write again). LoadStock
		// adds: retried as it is, it adds twice where it was applied,
		// and unavailable is what retry policies retry by themselves.
		// The message names the nodes that added their share.
		code = connect.CodeAborted
	case errors.Is(err, inventory.ErrCorrupt), errors.Is(err, inventory.ErrScriptFailed):
		// A malformed reply (inventory.ErrMalformedReply) is internal too
		// (the default), unless the library wrapped it as an unknown
		// outcome in ErrUnavailable: a retry with the same order id.
		code = connect.CodeInternal
	case errors.Is(err, inventory.ErrDataLoss), errors.Is(err, inventory.ErrStockMissing):
		code = connect.CodeDataLoss
	case errors.Is(err, router.ErrUnavailable), node.CannotServe(err):
		// a node that cannot serve now (an admin call that writes to
		// it, such as a drain, meets it unwrapped; node.CannotServe):
		// gRPC's code for a transient state a retry can outlast, and
		// the code the data path answers for the same node (its
		// commands wrap these in router.ErrUnavailable). Each of these
		// answered internal once, the code for corrupt data and failed
		// scripts: a drain of a DOWN node (seed 444); a node this
		// process could not reach before a probe marked it DOWN
		// (node.ErrUnreachable, or a network error unwrapped); a new
		// connection's stamp check that refused the node (restarted
		// empty, rolled back, another node, a replica) or a BUSY,
		// LOADING or MASTERDOWN reply. The cases above win: a
		// malformed reply, a failed script or lost data stays what it
		// is.
		code = connect.CodeUnavailable
	}
	return connect.NewError(code, trimSentinels(err, code))
}

// sentinelTexts returns the texts of the sentinels err wraps that only
// repeat code.
func sentinelTexts(err error, code connect.Code) []string {
	switch {
	case code == connect.CodeInvalidArgument:
		return []string{inventory.ErrInvalid.Error()}
	case code == connect.CodeFailedPrecondition && errors.Is(err, inventory.ErrNotApplied):
		return []string{inventory.ErrInvalid.Error(), inventory.ErrNotApplied.Error()}
	case code == connect.CodeFailedPrecondition && errors.Is(err, inventory.ErrPrecondition):
		return []string{inventory.ErrPrecondition.Error()}
	case code == connect.CodeUnavailable:
		return []string{router.ErrUnavailable.Error()}
	case code == connect.CodeNotFound && errors.Is(err, inventory.ErrUnknownSKU):
		return []string{inventory.ErrUnknownSKU.Error()}
	}
	return nil
}

// trimSentinels drops sentinelTexts from err's message: at its start and
// after each ": " ("items[0]: invalid argument: route_key …" reads
// "items[0]: route_key …"), outside quoted text (mapUnquoted). Before, it
// ran over quoted values too: route_key "x: invalid argument: y" came
// back as "x: y".
func trimSentinels(err error, code connect.Code) error {
	texts := sentinelTexts(err, code)
	if texts == nil {
		return err
	}
	msg := mapUnquoted(err.Error(), func(part string, atStart bool) string {
		for _, t := range texts {
			t += ": "
			if atStart {
				part = strings.TrimPrefix(part, t)
			}
			part = strings.ReplaceAll(part, ": "+t, ": ")
		}
		return part
	})
	if msg == err.Error() {
		return err
	}
	return trimmed{msg: msg, err: err}
}

// mapUnquoted returns msg with each part outside double-quoted text
// replaced by f(part, whether it starts msg), the quoted text copied as it
// is. Quoted text is what Go's %q writes: a quote opens it, a backslash
// escapes the byte after it (so \" and \\ are inside it), the next
// unescaped quote closes it; one left open runs to the end of msg. Before,
// toJSONNames took any quote not right after a backslash for a boundary,
// so a value ending in a backslash ("u\\") left it out of step: later
// quoted values were rewritten, later field names were not. It returns msg
// itself when no part changed.
func mapUnquoted(msg string, f func(part string, atStart bool) string) string {
	var b strings.Builder
	for i := 0; i < len(msg); {
		j := strings.IndexByte(msg[i:], '"')
		if j < 0 {
			j = len(msg)
		} else {
			j += i
		}
		b.WriteString(f(msg[i:j], i == 0))
		k := quotedEnd(msg, j)
		b.WriteString(msg[j:k])
		i = k
	}
	if b.Len() == len(msg) && b.String() == msg {
		return msg
	}
	return b.String()
}

// quotedEnd returns the index just past the quoted text that opens at
// msg[i] (a quote, as %q writes it), len(msg) when it is not closed or i
// is len(msg).
func quotedEnd(msg string, i int) int {
	for j := i + 1; j < len(msg); j++ {
		switch msg[j] {
		case '\\':
			j++ // the escaped byte, a quote or a backslash included
		case '"':
			return j + 1
		}
	}
	return len(msg)
}

type trimmed struct {
	msg string
	err error
}

func (t trimmed) Error() string { return t.msg }
func (t trimmed) Unwrap() error { return t.err }

// jsonNames maps every proto field name of the API that differs from its
// JSON name to the JSON name ("order_id" → "orderId").
var jsonNames = func() map[string]string {
	out := map[string]string{}
	msgs := v1.File_shardis_v1_shardis_proto.Messages()
	for i := 0; i < msgs.Len(); i++ {
		addJSONNames(out, msgs.Get(i))
	}
	return out
}()

func addJSONNames(out map[string]string, md protoreflect.MessageDescriptor) {
	fs := md.Fields()
	for i := 0; i < fs.Len(); i++ {
		if f := fs.Get(i); string(f.Name()) != f.JSONName() {
			out[string(f.Name())] = f.JSONName()
		}
	}
	for i := 0; i < md.Messages().Len(); i++ {
		addJSONNames(out, md.Messages().Get(i))
	}
}

// toJSONNames rewrites the proto field names in msg to their JSON names,
// outside quoted text (mapUnquoted). A name is a whole run of
// [A-Za-z0-9_].
func toJSONNames(msg string) string {
	return mapUnquoted(msg, func(part string, _ bool) string {
		var b strings.Builder
		changed := false
		for i := 0; i < len(part); {
			if !isNameByte(part[i]) {
				b.WriteByte(part[i])
				i++
				continue
			}
			j := i
			for j < len(part) && isNameByte(part[j]) {
				j++
			}
			if name, ok := jsonNames[part[i:j]]; ok {
				b.WriteString(name)
				changed = true
			} else {
				b.WriteString(part[i:j])
			}
			i = j
		}
		if !changed {
			return part
		}
		return b.String()
	})
}

func isNameByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// isJSON reports whether a request's Content-Type is a JSON encoding
// (application/json, application/grpc+json, application/grpc-web+json).
func isJSON(contentType string) bool {
	ct, _, _ := strings.Cut(contentType, ";")
	ct = strings.ToLower(strings.TrimSpace(ct))
	return ct == "application/json" || strings.HasSuffix(ct, "+json")
}

// jsonNamesInterceptor rewrites an error's message to JSON field names for
// a JSON client, keeping its code, details and metadata.
func jsonNamesInterceptor() connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			res, err := next(ctx, req)
			var ce *connect.Error
			if err == nil || !isJSON(req.Header().Get("Content-Type")) || !errors.As(err, &ce) {
				return res, err
			}
			msg := toJSONNames(ce.Message())
			if msg == ce.Message() {
				return res, err
			}
			out := connect.NewError(ce.Code(), trimmed{msg: msg, err: ce.Unwrap()})
			for _, d := range ce.Details() {
				out.AddDetail(d)
			}
			for k, v := range ce.Meta() {
				out.Meta()[k] = v
			}
			return res, out
		}
	})
}
