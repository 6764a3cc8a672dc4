package inventory

import (
	"fmt"
	"strings"
)

// Grouped bodies read their call's keys and arguments in place.
//
// A body is written as a lone script sees its call: KEYS[1] the stamp,
// KEYS[2] on its own keys, ARGV[1..3] the header, ARGV[4] on its own
// arguments. In a group (group.go) one command line holds every call's
// keys and arguments one after the other, and copying each call's into
// tables of its own cost the node about 8 400 instructions per call
// (counted under callgrind: two tables filled by unpack, and the
// garbage collection they bring) — more than a Redis command inside it.
// So a grouped script's body is rewritten when the script is built: it
// becomes body(kb, ab, nk, na, …), where the call's keys start after KEYS[kb
// + 1] and its arguments after ARGV[ab + 3] (nk keys, na arguments), and
//   - KEYS[e] becomes KEYS[kb + e], ARGV[e] becomes ARGV[ab + e];
//   - #KEYS becomes (nk + 1), #ARGV becomes (na + 3) (what a lone call
//     would count);
//   - CKEYS[e] becomes KEYS[cb + e], CARGV[e] becomes ARGV[ca + e], #CKEYS
//     becomes cnk and #CARGV cna: the call's context (its last cnk keys
//     and cna arguments, which a group sends once for a run of calls that
//     share them: group.go, "Contexts"; body(kb, ab, nk, na, cb, ca, cnk,
//     cna), nk and na its own counts, without the context's);
//   - a bare KEYS or ARGV stays the group's whole table: a body passes
//     one to a helper only with kb or ab added to the position it names
//     (plan_parts(KEYS, ARGV, kb + 3, ab + 13, …)), and a lone body is
//     given kb = ab = 0, so the same source reads right both ways.
//
// The rewrite is exact only for an index that adding kb or ab in front of
// cannot regroup: flatBody refuses (and the script's declaration panics
// at init) an index with an operator that binds looser than + outside
// parentheses (.., a comparison, and, or), a string, or a literal index
// below the call's own (KEYS[1], ARGV[1] to ARGV[3]: the stamp and the
// header, which a body reads through the prelude).

// flatBody returns body rewritten to read its call in place (see above).
func flatBody(body string) (string, error) {
	toks := luaTokens(body)
	var b strings.Builder
	last := 0
	for i, t := range toks {
		if t.kind != 'n' || t.field {
			continue
		}
		f, ok := flatNames[t.s]
		if !ok {
			continue
		}
		switch {
		case i > 0 && toks[i-1].kind == 'p' && toks[i-1].s == "#":
			b.WriteString(body[last:toks[i-1].at])
			b.WriteString(f.count)
			last = t.at + len(t.s)
		case i+1 < len(toks) && toks[i+1].kind == 'p' && toks[i+1].s == "[":
			if err := flatIndexOK(toks[i:], f.own); err != nil {
				return "", err
			}
			b.WriteString(body[last:t.at])
			b.WriteString(f.table + "[" + f.base + " + ")
			last = toks[i+1].at + 1
		case f.table != t.s:
			return "", fmt.Errorf("%s: a context is read by position only (CKEYS[e], CARGV[e], #CKEYS, #CARGV)", t.s)
		}
	}
	b.WriteString(body[last:])
	return b.String(), nil
}

// flatName is how flatBody rewrites one of the names it offsets: name[e]
// becomes table[base + e], #name becomes count; own is the first
// position an index may name (KEYS[1] and ARGV[1..3] are the stamp and
// the header).
type flatName struct {
	table, base, count string
	own                int
}

// flatNames are the names flatBody rewrites: the call's own keys and
// arguments, and its context's (group.go, "Contexts").
var flatNames = map[string]flatName{
	"KEYS":  {"KEYS", "kb", "(nk + 1)", 2},
	"ARGV":  {"ARGV", "ab", "(na + 3)", 4},
	"CKEYS": {"KEYS", "cb", "cnk", 1},
	"CARGV": {"ARGV", "ca", "cna", 1},
}

// flatIndexOK checks the index of toks[0] (KEYS or ARGV, toks[1] its
// '['): flatBody may put "kb + " or "ab + " in front of it (see the file
// comment); own is the first position of the call's own.
func flatIndexOK(toks []luaTok, own int) error {
	in, loose := flatIndex(toks)
	if loose != "" {
		return fmt.Errorf("%s[%s]: an index flatBody cannot offset, for its %s (luaflat.go)", toks[0].s, strings.Join(in, " "), loose)
	}
	if len(in) == 1 {
		var n int
		if _, err := fmt.Sscanf(in[0], "%d", &n); err == nil && n < own {
			return fmt.Errorf("%s[%d]: not the call's own (the stamp or the header: read them through the prelude)", toks[0].s, n)
		}
	}
	return nil
}

// flatIndex returns the tokens of the index of toks[0] (toks[1] its '['),
// and the first of them that an offset in front would regroup ("" when
// none): a string, or, outside parentheses, an operator that binds looser
// than +.
func flatIndex(toks []luaTok) (in []string, loose string) {
	depth, paren := 0, 0
	for _, t := range toks[1:] {
		switch t.s {
		case "[":
			depth++
		case "]":
			depth--
		case "(":
			paren++
		case ")":
			paren--
		}
		if depth == 0 {
			break
		}
		if t.s != "[" || depth > 1 {
			in = append(in, t.s)
		}
		if loose == "" && (luaString(t) || paren == 0 && depth == 1 && luaLooserThanAdd(t)) {
			loose = t.s
		}
	}
	return in, loose
}

// luaString reports whether t is a string literal.
func luaString(t luaTok) bool {
	return t.kind == 'v' && (t.s[0] == '\'' || t.s[0] == '"' || t.s[0] == '[')
}

// luaLooserThanAdd reports whether t is a binary operator that binds
// looser than + (.., a comparison, and, or).
func luaLooserThanAdd(t luaTok) bool {
	switch t.s {
	case "..", "==", "~=", "<", ">", "<=", ">=":
		return t.kind == 'p'
	case "and", "or":
		return t.kind == 'n'
	}
	return false
}

// contextName is the first name of a call's context (CKEYS, CARGV) that
// body reads, "" when none: only a grouped body has a context.
func contextName(body string) string {
	for _, t := range luaTokens(body) {
		if t.kind == 'n' && !t.field && (t.s == "CKEYS" || t.s == "CARGV") {
			return t.s
		}
	}
	return ""
}
