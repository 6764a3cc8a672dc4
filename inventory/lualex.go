package inventory

import (
	"fmt"
	"sort"
	"strings"
)

// A small Lua 5.1 lexer, enough to tell which names a script's source
// mentions (lualib.go): names, keywords and punctuation; strings, numbers
// and comments skipped.

// luaTok is one token of Lua source.
type luaTok struct {
	s     string
	at    int  // where it starts in the source
	kind  byte // 'n' a name or keyword, 'p' punctuation, 'v' a string or number
	field bool // a name right after '.' or ':': a field or method, not a variable
	key   bool // a name right before '=' directly inside a table constructor: a key
}

// name reports whether t is a name that may be a variable's.
func (t luaTok) name() bool { return t.kind == 'n' && !luaKeywords[t.s] }

var luaKeywords = map[string]bool{"and": true, "break": true, "do": true, "else": true, "elseif": true, "end": true,
	"false": true, "for": true, "function": true, "if": true, "in": true, "local": true, "nil": true, "not": true,
	"or": true, "repeat": true, "return": true, "then": true, "true": true, "until": true, "while": true}

// luaGlobals are the globals a script on Redis 7.0 may read (its Lua
// 5.1 libraries and Redis's own).
var luaGlobals = map[string]bool{"redis": true, "string": true, "table": true, "math": true, "tonumber": true,
	"tostring": true, "type": true, "pairs": true, "ipairs": true, "unpack": true, "pcall": true, "error": true,
	"select": true, "next": true, "assert": true, "setmetatable": true, "getmetatable": true, "rawget": true,
	"rawset": true, "rawequal": true, "cjson": true, "bit": true, "struct": true, "cmsgpack": true,
	"KEYS": true, "ARGV": true}

func isLuaNameStart(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

func isLuaNameByte(c byte) bool { return isLuaNameStart(c) || c >= '0' && c <= '9' }

// luaLongBracket returns the length of the long bracket opening at src[i:]
// ("[[", "[=[", …; 0 if none) and its level.
func luaLongBracket(src string, i int) (n, level int) {
	if i >= len(src) || src[i] != '[' {
		return 0, 0
	}
	j := i + 1
	for j < len(src) && src[j] == '=' {
		j++
	}
	if j < len(src) && src[j] == '[' {
		return j - i + 1, j - i - 1
	}
	return 0, 0
}

// luaSkipLong returns the index after the long bracket of level closing
// after src[i:].
func luaSkipLong(src string, i, level int) int {
	end := "]" + strings.Repeat("=", level) + "]"
	if k := strings.Index(src[i:], end); k >= 0 {
		return i + k + len(end)
	}
	return len(src)
}

// luaPuncts are the punctuation tokens longer than one byte, longest
// first.
var luaPuncts = []string{"...", "..", "==", "~=", "<=", ">="}

// luaLexer is luaTokens' state: the source, the position, the tokens so
// far and the brackets open at this point.
type luaLexer struct {
	src  string
	i    int
	out  []luaTok
	open []byte
}

// initTokens holds the tokens of every source luaTokens split while the
// package initialises, by source (nil after: the init func below drops
// it). Building the scripts splits the same prelude definitions again and
// again (lualib.go's script and need, luafunc.go's splitDefs); with it
// each is split once, which halved the package's initialisation (about
// 105 to 55 ms, and 61 to 13 MB allocated, on this 2-core machine: what
// every shardis command pays before it starts). The token slices are shared: no caller changes one.
// Only the package's var initialisers run while it is set, one after
// another, so it needs no lock.
var initTokens = map[string][]luaTok{}

func init() { initTokens = nil }

// luaTokens splits src into tokens. The slice is read-only (it may be
// initTokens' copy).
func luaTokens(src string) []luaTok {
	if t, ok := initTokens[src]; ok {
		return t
	}
	t := lexLua(src)
	if initTokens != nil {
		initTokens[src] = t
	}
	return t
}

// lexLua is luaTokens without initTokens.
func lexLua(src string) []luaTok {
	l := &luaLexer{src: src, out: make([]luaTok, 0, len(src)/6+4)}
	if strings.HasPrefix(src, "#!") { // a Redis 7 shebang line (oom.go)
		l.i = len(src)
		if k := strings.IndexByte(src, '\n'); k >= 0 {
			l.i = k + 1
		}
	}
	for l.i < len(src) {
		c := src[l.i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			l.i++
		case strings.HasPrefix(src[l.i:], "--"):
			l.comment()
		case c == '\'' || c == '"':
			l.quoted(c)
		case c >= '0' && c <= '9' || c == '.' && l.i+1 < len(src) && src[l.i+1] >= '0' && src[l.i+1] <= '9':
			l.number()
		case isLuaNameStart(c):
			l.name()
		default:
			l.punct()
		}
	}
	return l.out
}

// comment skips the comment at l.i, short or long.
func (l *luaLexer) comment() {
	src, i := l.src, l.i
	if n, level := luaLongBracket(src, i+2); n > 0 {
		l.i = luaSkipLong(src, i+2+n, level)
	} else if k := strings.IndexByte(src[i:], '\n'); k >= 0 {
		l.i = i + k + 1
	} else {
		l.i = len(src)
	}
}

// quoted reads the string quoted by q at l.i.
func (l *luaLexer) quoted(q byte) {
	src, j := l.src, l.i+1
	for j < len(src) && src[j] != q && src[j] != '\n' {
		if src[j] == '\\' {
			j++
		}
		j++
	}
	l.out = append(l.out, luaTok{s: src[l.i:min(j+1, len(src))], at: l.i, kind: 'v'})
	l.i = j + 1
}

// number reads the number at l.i.
func (l *luaLexer) number() {
	src, j := l.src, l.i+1
	for j < len(src) && (isLuaNameByte(src[j]) || src[j] == '.') {
		j++
	}
	l.out = append(l.out, luaTok{s: src[l.i:j], at: l.i, kind: 'v'})
	l.i = j
}

// name reads the name or keyword at l.i; after '.' or ':' it is a field.
func (l *luaLexer) name() {
	src, j := l.src, l.i+1
	for j < len(src) && isLuaNameByte(src[j]) {
		j++
	}
	t := luaTok{s: src[l.i:j], at: l.i, kind: 'n'}
	if n := len(l.out); n > 0 && (l.out[n-1].s == "." || l.out[n-1].s == ":") {
		t.field = true
	}
	l.out = append(l.out, t)
	l.i = j
}

// punct reads the long string or the punctuation at l.i, keeping track of
// the brackets open (a name before '=' directly inside '{' is a key).
func (l *luaLexer) punct() {
	src, i := l.src, l.i
	if n, level := luaLongBracket(src, i); n > 0 {
		j := luaSkipLong(src, i+n, level)
		l.out = append(l.out, luaTok{s: src[i:j], at: i, kind: 'v'})
		l.i = j
		return
	}
	p := src[i : i+1]
	for _, m := range luaPuncts {
		if strings.HasPrefix(src[i:], m) {
			p = m
			break
		}
	}
	switch p {
	case "(", "[", "{":
		l.open = append(l.open, p[0])
	case ")", "]", "}":
		if len(l.open) > 0 {
			l.open = l.open[:len(l.open)-1]
		}
	case "=":
		if n := len(l.out); n > 0 && len(l.open) > 0 && l.open[len(l.open)-1] == '{' && l.out[n-1].kind == 'n' {
			l.out[n-1].key = true
		}
	}
	l.out = append(l.out, luaTok{s: p, at: i, kind: 'p'})
	l.i += len(p)
}

// luaRefs is the names src mentions as variables (not fields, not table
// keys, not keywords), each once, in order.
func luaRefs(src string) []string {
	var out []string
	seen := map[string]bool{}
	for _, t := range luaTokens(src) {
		if t.name() && !t.field && !t.key && !seen[t.s] {
			seen[t.s] = true
			out = append(out, t.s)
		}
	}
	return out
}

// luaDeclaredInto adds to decl every name toks declare somewhere: locals,
// function names and parameters (self for a method), for variables.
func luaDeclaredInto(decl map[string]bool, toks []luaTok) {
	names := func(i int) { // a name list from toks[i]
		for ; i < len(toks) && toks[i].name(); i += 2 {
			decl[toks[i].s] = true
			if i+1 >= len(toks) || toks[i+1].s != "," {
				return
			}
		}
	}
	for i, t := range toks {
		switch t.s {
		case "local":
			if i+1 < len(toks) && toks[i+1].s == "function" {
				continue // the function case declares it
			}
			names(i + 1)
		case "for":
			names(i + 1)
		case "function":
			j := i + 1
			if j < len(toks) && toks[j].name() {
				if i > 0 && toks[i-1].s == "local" {
					decl[toks[j].s] = true
				}
				for j < len(toks) && toks[j].s != "(" {
					if toks[j].s == ":" {
						decl["self"] = true
					}
					j++
				}
			}
			if j < len(toks) && toks[j].s == "(" {
				names(j + 1)
			}
		}
	}
}

// checkLuaNames fails, naming them, when src mentions a name that it does
// not declare and that is no global of Redis's Lua (luaGlobals): a helper
// missing from its prelude, or a misspelt one. src may come in pieces,
// each whole statements (a definition, a body, the lines between): the
// pieces are checked as their concatenation is, and a piece used by many
// sources is split into tokens once (luaTokens).
func checkLuaNames(src ...string) error {
	toks := make([][]luaTok, len(src))
	for i, piece := range src {
		toks[i] = luaTokens(piece)
	}
	return checkLuaTokens(toks...)
}

// checkLuaTokens is checkLuaNames of pieces already split into tokens
// (luaTokens), each whole statements.
func checkLuaTokens(pieces ...[]luaTok) error {
	decl := map[string]bool{}
	for _, toks := range pieces {
		luaDeclaredInto(decl, toks)
	}
	var missing []string
	seen := map[string]bool{}
	for _, toks := range pieces {
		for _, t := range toks {
			if t.name() && !t.field && !t.key && !decl[t.s] && !luaGlobals[t.s] && !seen[t.s] {
				seen[t.s] = true
				missing = append(missing, t.s)
			}
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return fmt.Errorf("uses %s, which neither the script nor its prelude defines (nor is it a global of Redis's Lua)", strings.Join(missing, ", "))
	}
	return nil
}
