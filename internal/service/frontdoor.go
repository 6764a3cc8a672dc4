package service

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

// The front door: what every request to /shardis.v1.* meets before the
// RPC layer, and the accounting of every answer.
//
//   - A Content-Type the service does not speak is answered 415 with a
//     text body naming the accepted ones (connect-go would answer an empty
//     415 for any "application/..." type it has no codec for: curl's
//     default form type, application/xml).
//   - With service.auth_token set, a call without the bearer token is
//     refused with unauthenticated before its body is read or decoded (a
//     stranger's malformed body is not told apart from a good one, and
//     nothing of it is buffered); authInterceptor checks it again for any
//     call that reaches the RPC layer another way.
//   - A body over service.max_body_bytes is refused before it is read
//     with resource_exhausted, as grpc-go and connect-go answer an
//     oversized message, the limit named in the message. A body of unknown
//     length (chunked, gRPC over HTTP/2) is read up to the limit first.
//     The limit is the message's: gRPC and gRPC-Web bodies may be 5 bytes
//     longer, their message's envelope (bodyLimit), so a message of
//     exactly the limit is served on every protocol and on the gRPC port
//     alike; before, gRPC and gRPC-Web refused one of the last 5 bytes.
//     The limit holds for grpc.health.v1 and reflection on the port too
//     (unauthenticated, like every probe): a body declared over it is
//     refused unread, and their handlers refuse a message over it
//     (mountProbes); before, a health Check read and decoded a body of
//     any size.
//   - Every answered request is counted in shardis_rpc_requests_total with
//     the code it was answered and logged, also when the RPC layer refused
//     it before the interceptors ran (a body that does not decode: bad
//     JSON, an unknown JSON field, "1.5" as a quantity). The interceptors
//     mark the calls they saw (seenInterceptor); for the others the code
//     and message are read back from the answer as the client gets it (the
//     grpc-status header or trailer, or the Connect error body). A path
//     that names no procedure of the API is counted as procedure "unknown".

// acceptedTypes is the body of the 415 answer.
const acceptedTypes = "send application/json or application/proto (Connect), " +
	"application/grpc, application/grpc+proto or application/grpc+json (gRPC), " +
	"application/grpc-web, application/grpc-web+proto or application/grpc-web+json (gRPC-Web)"

// rpcContentTypes are the media types the procedures are served in.
var rpcContentTypes = map[string]bool{
	"application/json": true, "application/proto": true,
	"application/grpc": true, "application/grpc+proto": true, "application/grpc+json": true,
	"application/grpc-web": true, "application/grpc-web+proto": true, "application/grpc-web+json": true,
}

// procedures holds "Service/Method" of every procedure of the API.
var procedures = func() map[string]bool {
	out := map[string]bool{}
	svcs := v1.File_shardis_v1_shardis_proto.Services()
	for i := 0; i < svcs.Len(); i++ {
		ms := svcs.Get(i).Methods()
		for j := 0; j < ms.Len(); j++ {
			out[string(svcs.Get(i).Name())+"/"+string(ms.Get(j).Name())] = true
		}
	}
	return out
}()

// callSeen is put in each RPC request's context by the front door; the
// interceptors set it when they saw the call (and so counted and logged
// it).
type callSeen struct{ seen bool }

type callSeenKey struct{}

// seenInterceptor marks the call seen (the outermost interceptor).
func seenInterceptor() connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if c, ok := ctx.Value(callSeenKey{}).(*callSeen); ok {
				c.seen = true
			}
			return next(ctx, req)
		}
	})
}

// frontDoor wraps the RPC mux (see the file comment).
func (s *Server) frontDoor(mux http.Handler) http.Handler {
	max := int64(s.cfg.Service.MaxBodyBytes)
	ew := connect.NewErrorWriter()
	token := s.cfg.Service.AuthToken
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			mux.ServeHTTP(w, r)
			return
		}
		if !strings.HasPrefix(r.URL.Path, "/shardis.v1.") {
			// grpc.health.v1 and reflection: a body declared over the
			// limit is refused unread; their handlers refuse any message
			// over it (connect.WithReadMaxBytes, mountProbes), so a body
			// of unknown length is not read ahead (reflection is a
			// bidirectional stream).
			if r.ContentLength > bodyLimit(r, max) {
				_ = ew.Write(w, r, connect.NewError(connect.CodeResourceExhausted, errors.New(overLimit(r.ContentLength, max))))
				return
			}
			mux.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		proc := strings.TrimPrefix(r.URL.Path, "/shardis.v1.")
		if !procedures[proc] {
			proc = "unknown"
		}
		ctype := r.Header.Get("Content-Type")
		if mt, _, err := mime.ParseMediaType(ctype); err != nil || !rpcContentTypes[strings.ToLower(mt)] {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusUnsupportedMediaType)
			msg := fmt.Sprintf("unsupported Content-Type %q: %s", ctype, acceptedTypes)
			fmt.Fprintln(w, msg)
			s.answered(r.Context(), proc, connect.CodeInvalidArgument.String(), msg, start)
			return
		}
		if token != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			_ = ew.Write(w, r, connect.NewError(connect.CodeUnauthenticated, errors.New(errBearer)))
			s.answered(r.Context(), proc, connect.CodeUnauthenticated.String(), errBearer, start)
			return
		}
		limit := bodyLimit(r, max)
		if r.ContentLength < 0 {
			body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
			if err != nil {
				msg := "reading the request body: " + err.Error()
				_ = ew.Write(w, r, connect.NewError(connect.CodeInvalidArgument, errors.New(msg)))
				s.answered(r.Context(), proc, connect.CodeInvalidArgument.String(), msg, start)
				return
			}
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		}
		if r.ContentLength > limit {
			msg := overLimit(r.ContentLength, max)
			if r.ContentLength == limit+1 { // read up to the limit: its length is unknown
				msg = overLimit(max+1, max)
			}
			_ = ew.Write(w, r, connect.NewError(connect.CodeResourceExhausted, errors.New(msg)))
			s.answered(r.Context(), proc, connect.CodeResourceExhausted.String(), msg, start)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, limit+1024)
		seen := &callSeen{}
		rec := &answerRecorder{ResponseWriter: w, seen: seen}
		mux.ServeHTTP(rec, r.WithContext(context.WithValue(r.Context(), callSeenKey{}, seen)))
		if !seen.seen {
			code, msg := rec.answer()
			s.answered(r.Context(), proc, code, msg, start)
		}
	})
}

// envelopeBytes is the prefix of each message of gRPC and gRPC-Web (a
// flags byte and a 4-byte length), not counted in the message's size.
const envelopeBytes = 5

// bodyLimit is the longest body r may have for a message of max bytes:
// max, plus one envelope for gRPC and gRPC-Web (Content-Type
// application/grpc…), whose unary request is one enveloped message.
func bodyLimit(r *http.Request, max int64) int64 {
	if strings.HasPrefix(strings.ToLower(r.Header.Get("Content-Type")), "application/grpc") {
		return max + envelopeBytes
	}
	return max
}

// errBearer is the message of a call refused for its bearer token.
const errBearer = "missing or wrong bearer token"

// overLimit says that a body of n bytes is over the limit max (n is
// max+1 for a body of unknown length read up to the limit).
func overLimit(n, max int64) string {
	if n == max+1 {
		return fmt.Sprintf("request body is over the limit of %d bytes (service.max_body_bytes)", max)
	}
	return fmt.Sprintf("request body is %d bytes, over the limit of %d bytes (service.max_body_bytes)", n, max)
}

// answered counts and logs a request the interceptors did not see, by
// its code's name ("invalid_argument").
func (s *Server) answered(ctx context.Context, proc, code, msg string, start time.Time) {
	s.Metrics.CountRPC(proc, code)
	level := slog.LevelInfo
	if code == "internal" || code == "unavailable" || code == "unknown" {
		level = slog.LevelWarn
	}
	s.log.Log(ctx, level, "rpc", "method", proc[strings.LastIndexByte(proc, '/')+1:], "code", code,
		"err", msg, "duration", time.Since(start))
}

// answerRecorder passes a response through and keeps its status and the
// start of its body while the call is not seen (an answer the RPC layer
// gave by itself is short: an error).
type answerRecorder struct {
	http.ResponseWriter
	seen   *callSeen
	status int
	body   []byte
}

// maxRecorded bounds the body answerRecorder keeps.
const maxRecorded = 4096

func (a *answerRecorder) WriteHeader(code int) {
	if a.status == 0 {
		a.status = code
	}
	a.ResponseWriter.WriteHeader(code)
}

func (a *answerRecorder) Write(b []byte) (int, error) {
	if a.status == 0 {
		a.status = http.StatusOK
	}
	if !a.seen.seen && len(a.body) < maxRecorded {
		a.body = append(a.body, b[:min(len(b), maxRecorded-len(a.body))]...)
	}
	return a.ResponseWriter.Write(b)
}

// Flush implements http.Flusher (the gRPC handler flushes).
func (a *answerRecorder) Flush() { _ = http.NewResponseController(a.ResponseWriter).Flush() }

// Unwrap gives http.ResponseController the wrapped writer.
func (a *answerRecorder) Unwrap() http.ResponseWriter { return a.ResponseWriter }

// answer reads the code and message the RPC layer answered: gRPC's status
// (a trailer, or a header in a trailers-only gRPC-Web answer), or the
// Connect protocol's JSON error body; unknown when it is neither.
func (a *answerRecorder) answer() (string, string) {
	h := a.Header()
	for _, prefix := range []string{"", http.TrailerPrefix} {
		st := h[prefix+"Grpc-Status"] // connect sets the canonical key; a trailer's stays as set
		if len(st) == 0 {
			continue
		}
		var msg string
		if m := h[prefix+"Grpc-Message"]; len(m) > 0 {
			msg = m[0]
			if u, err := url.PathUnescape(msg); err == nil {
				msg = u
			}
		}
		n, err := strconv.Atoi(st[0])
		switch {
		case err != nil:
			return connect.CodeUnknown.String(), "grpc-status " + st[0]
		case n == 0:
			return "ok", ""
		}
		return connect.Code(n).String(), msg
	}
	var e struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if a.status != http.StatusOK && json.Unmarshal(a.body, &e) == nil && e.Code != "" {
		var code connect.Code
		if code.UnmarshalText([]byte(e.Code)) == nil {
			return code.String(), e.Message
		}
	}
	if a.status == http.StatusNotFound {
		return connect.CodeUnimplemented.String(), "no such procedure"
	}
	return connect.CodeUnknown.String(), fmt.Sprintf("HTTP %d %s", a.status, bytes.TrimSpace(a.body))
}
