package inventory

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/shardis/shardis/node"
)

// This file is how the inventory reads what a node answers: every script
// reply (and the few command replies read field by field) goes through a
// replyReader that states the shape it expects, position by position, and
// fails with a [*ReplyError] naming the node, the script and the position
// when the reply has another shape. Nothing else converts a reply value
// (no type assertion that drops its ok): a value of the wrong type never reads as its zero
// value.
//
// The rule for what a malformed reply means: the script (or command) ran,
// or may have, and its answer cannot be read, so it is neither a success
// nor a refusal. For a write script its outcome is unknown, exactly as
// after a timeout: the callers keep what they would keep after a timeout
// (outcomeUnknown is true for it, a Reserve releases or settles what the
// call may have taken through the usual unknown-outcome path, a settle is
// retried later, fenced by the part's state). For a read script the read
// failed: nothing read from it is used. It is not [ErrCorrupt] (whose
// contract is "the script refused, nothing changed") and not
// [ErrUnavailable] (the node may well be up: a retry meets the same
// reply). The reconciler sets a part whose settle keeps answering one
// aside, as it does a corrupt one ([Unsettleable]), so it never holds up
// the parts behind it; its stock stays reserved until it settles.

// ErrMalformedReply is matched (errors.Is) by every [*ReplyError]: a
// node's reply to a script did not have the shape the script replies
// with. See the file comment of reply.go for the contract: outcome
// unknown, as after a timeout, never a success nor a refusal.
var ErrMalformedReply = errors.New("malformed script reply")

// ReplyError is a reply of the wrong shape: Got is what stood at position
// At of Script's reply on Node where Want was expected. It matches
// [ErrMalformedReply].
type ReplyError struct {
	// Node is the node that answered ("" when not known).
	Node string
	// Script names the script (or command) whose reply it was.
	Script string
	// At is the position in the reply: "reply", "reply[2]",
	// "reply[3][0]" …
	At string
	// Want describes what was expected there.
	Want string
	// Got is the value found there.
	Got any
}

// Error names the node, the script, the position, what was found and
// what was expected.
func (e *ReplyError) Error() string {
	var b strings.Builder
	b.WriteString(ErrMalformedReply.Error())
	if e.Node != "" {
		b.WriteString(": node ")
		b.WriteString(e.Node)
	}
	fmt.Fprintf(&b, ": %s script: %s is %s, want %s", e.Script, e.At, describe(e.Got), e.Want)
	return b.String()
}

// Is reports whether target is [ErrMalformedReply].
func (e *ReplyError) Is(target error) bool { return target == ErrMalformedReply }

// describe renders a reply value with its type, shortened.
func describe(v any) string {
	var s string
	switch x := v.(type) {
	case nil:
		return "nil"
	case string:
		s = strconv.Quote(x) + " (string)"
	case int64:
		s = strconv.FormatInt(x, 10) + " (integer)"
	case []any:
		s = fmt.Sprintf("%v (array of %d)", x, len(x))
	default:
		s = fmt.Sprintf("%v (%T)", x, x)
	}
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// replyReader reads one reply strictly. The first mismatch is kept (err,
// a *ReplyError) and every later read returns a zero value, so a decoder
// reads all its fields and checks err once. path is the position of the
// list being read (enter/leave), for the error.
type replyReader struct {
	node, script string
	path         []int
	err          error
}

// newReplyReader reads a reply of script on node nodeName.
func newReplyReader(nodeName, script string) *replyReader {
	return &replyReader{node: nodeName, script: script}
}

// at renders the current position with i appended (i < 0: none).
func (r *replyReader) at(i int) string {
	var b strings.Builder
	b.WriteString("reply")
	for _, p := range r.path {
		fmt.Fprintf(&b, "[%d]", p)
	}
	if i >= 0 {
		fmt.Fprintf(&b, "[%d]", i)
	}
	return b.String()
}

// fail records the first mismatch: at position i of the current list
// (i < 0: the current list itself), want was expected, got found.
func (r *replyReader) fail(i int, want string, got any) {
	if r.err == nil {
		r.err = &ReplyError{Node: r.node, Script: r.script, At: r.at(i), Want: want, Got: got}
	}
}

// enter moves the position into element i of the current list; leave
// moves it back out.
func (r *replyReader) enter(i int) { r.path = append(r.path, i) }
func (r *replyReader) leave()      { r.path = r.path[:len(r.path)-1] }

// list reads v (at the current position) as a list of n elements (n < 0:
// any length). An empty Lua table may come back as nil: that is a list
// of 0 elements.
func (r *replyReader) list(v any, n int) []any {
	if r.err != nil {
		return nil
	}
	t, ok := v.([]any)
	if !ok && v != nil {
		r.fail(-1, listWant(n), v)
		return nil
	}
	if n >= 0 && len(t) != n {
		r.fail(-1, listWant(n), v)
		return nil
	}
	return t
}

// listAt reads element i of t as a list of n elements (n < 0: any).
func (r *replyReader) listAt(t []any, i, n int) []any {
	if r.err != nil {
		return nil
	}
	r.enter(i)
	defer r.leave()
	return r.list(t[i], n)
}

// pairsAt reads element i of t as a flat list of pairs (even length;
// what names the pairs in the mismatch), or nil once a mismatch is found.
func (r *replyReader) pairsAt(t []any, i int, what string) []any {
	flat := r.listAt(t, i, -1)
	if r.err == nil && len(flat)%2 != 0 {
		r.enter(i)
		r.fail(-1, what, flat)
		r.leave()
	}
	if r.err != nil {
		return nil
	}
	return flat
}

// replies reads element i of t as a group's flat replies
// (epilogue_group.lua) and returns them one per call: an integer n then n
// elements is a list reply (those elements, sharing t's backing array); a
// list of one value is that value (a number or true: Redis would have
// answered an integer); anything else (a string, nil, an error) is that
// reply itself. n is how many replies the caller expects (a capacity,
// not checked here).
func (r *replyReader) replies(t []any, i, n int) []any {
	flat := r.listAt(t, i, -1)
	if r.err != nil {
		return nil
	}
	r.enter(i)
	defer r.leave()
	out := make([]any, 0, n)
	for p := 0; p < len(flat); p++ {
		switch v := flat[p].(type) {
		case int64:
			if v < 0 || v > int64(len(flat)-p-1) {
				r.fail(p, fmt.Sprintf("an element count of at most %d", len(flat)-p-1), v)
				return nil
			}
			end := p + 1 + int(v)
			out = append(out, flat[p+1:end:end])
			p = end - 1
		case []any:
			if len(v) != 1 {
				r.fail(p, "a list of 1 (a boxed integer reply)", v)
				return nil
			}
			out = append(out, v[0])
		default:
			out = append(out, v)
		}
	}
	return out
}

func listWant(n int) string {
	if n < 0 {
		return "a list"
	}
	return fmt.Sprintf("a list of %d", n)
}

// int reads element i of t as an integer.
func (r *replyReader) int(t []any, i int) int64 {
	if r.err != nil {
		return 0
	}
	x, ok := t[i].(int64)
	if !ok {
		r.fail(i, "an integer", t[i])
	}
	return x
}

// flag reads element i of t as 0 or 1.
func (r *replyReader) flag(t []any, i int) bool {
	x := r.int(t, i)
	if r.err == nil && x != 0 && x != 1 {
		r.fail(i, "0 or 1", t[i])
	}
	return x == 1
}

// flagString reads element i of t as n flags in a string, one byte each,
// '1' (true) or '0' (false).
func (r *replyReader) flagString(t []any, i, n int) []bool {
	s := r.str(t, i)
	if r.err != nil {
		return nil
	}
	if len(s) != n || strings.Trim(s, "01") != "" {
		r.fail(i, fmt.Sprintf("%d flags, each '0' or '1'", n), t[i])
		return nil
	}
	var out []bool
	for j := range len(s) {
		out = append(out, s[j] == '1')
	}
	return out
}

// str reads element i of t as a string.
func (r *replyReader) str(t []any, i int) string {
	if r.err != nil {
		return ""
	}
	x, ok := t[i].(string)
	if !ok {
		r.fail(i, "a string", t[i])
	}
	return x
}

// oneOf reads element i of t as a string that must be one of words: a
// status word no script replies is a malformed reply (protocol.go), never
// read as a verdict.
func (r *replyReader) oneOf(t []any, i int, words []string) string {
	s := r.str(t, i)
	if r.err == nil && !slices.Contains(words, s) {
		r.fail(i, "one of "+strings.Join(words, ", "), t[i])
	}
	return s
}

// optStr reads element i of t as a string, or nil (an absent hash field,
// a Lua false): "".
func (r *replyReader) optStr(t []any, i int) string {
	if r.err != nil || t[i] == nil {
		return ""
	}
	x, ok := t[i].(string)
	if !ok {
		r.fail(i, "a string or nil", t[i])
	}
	return x
}

// optIntStr reads element i of t as a decimal integer in a string (a hash
// field read by a command), or nil: 0.
func (r *replyReader) optIntStr(t []any, i int) int64 {
	s := r.optStr(t, i)
	if r.err != nil || s == "" {
		return 0
	}
	x, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		r.fail(i, "a decimal integer or nil", t[i])
	}
	return x
}

// one reads v as a single integer reply.
func (r *replyReader) one(v any) int64 {
	if r.err != nil {
		return 0
	}
	x, ok := v.(int64)
	if !ok {
		r.fail(-1, "an integer", v)
	}
	return x
}

// word reads v as a single status or string reply equal to want.
func (r *replyReader) word(v any, want string) {
	if r.err != nil {
		return
	}
	if x, ok := v.(string); !ok || x != want {
		r.fail(-1, strconv.Quote(want), v)
	}
}

// Readers of a whole reply of an inventory script on n.

// asStrings reads v as a list of strings.
func asStrings(n *node.Node, s *luaScript, v any) ([]string, error) {
	r := newReplyReader(n.Name(), s.name)
	raw := r.list(v, -1)
	out := make([]string, len(raw))
	for i := range raw {
		out[i] = r.str(raw, i)
	}
	return out, r.err
}

// asInt64s reads v as a list of integers.
func asInt64s(n *node.Node, s *luaScript, v any) ([]int64, error) {
	r := newReplyReader(n.Name(), s.name)
	raw := r.list(v, -1)
	out := make([]int64, len(raw))
	for i := range raw {
		out[i] = r.int(raw, i)
	}
	return out, r.err
}

// asInt64 reads v as one integer.
func asInt64(n *node.Node, s *luaScript, v any) (int64, error) {
	r := newReplyReader(n.Name(), s.name)
	return r.one(v), r.err
}

// malformed is the error for a reply v of s on n that is not want as a
// whole (the caller checked its shape).
func malformed(n *node.Node, s *luaScript, v any, want string) error {
	return &ReplyError{Node: n.Name(), Script: s.name, At: "reply", Want: want, Got: v}
}

// headInts reads s, a script's one-string reply "<word>:<n1>:<n2>…" of n
// non-negative integers, each as Lua's '%d' writes it (canonicalInt); it
// is how the reserve scripts answer success (a string costs the node less
// than a table in a group: lua/prelude.lua's reserved_head). It appends
// the integers to dst and returns it (a caller's array, so that the hot
// path allocates nothing here). Another shape fails r (the outcome
// unknown, as for any malformed reply) and returns nil.
func (r *replyReader) headInts(dst []int64, s, word string, n int) []int64 {
	rest, ok := strings.CutPrefix(s, word)
	if ok {
		rest, ok = strings.CutPrefix(rest, ":")
	}
	for i := 0; ok && i < n; i++ { // a ':' after each but the last
		field, more, found := strings.Cut(rest, ":")
		if ok = found == (i < n-1) && canonicalInt(field); ok {
			v, _ := strconv.ParseInt(field, 10, 64) // canonicalInt: it parses
			dst, rest = append(dst, v), more
		}
	}
	if !ok {
		r.fail(-1, fmt.Sprintf("%q and %d integers after ':'", word, n), s)
		return nil
	}
	return dst
}
