package inventory

import (
	"fmt"
	"slices"
	"strings"
)

// The per-script prelude: each script carries only the prelude helpers it
// uses.
//
// Every script starts with lua/stamp.lua, whole: the node's identity and
// epoch check (lua.go), which reads nothing else and runs before anything
// else. After it come the definitions of the prelude library (luaLibFiles:
// lua/prelude.lua, the part codec, and any file added to that list) that
// the script uses, transitively, in the library's order; then the body and
// its epilogue. Defining a helper is a cost paid on every call (a closure,
// a table, a TIME call for `now`), so a script that does not use one does
// not pay it.
//
// How a library file splits into definitions: each line at column 0 that
// starts with "local " starts one (with the comment lines at column 0
// right above it); every other line belongs to the definition above it.
// A definition defines the names of its first line (local function NAME,
// or local A, B = …), and no two define the same name. It uses the names
// of earlier definitions it mentions (outside strings and comments, not
// as a field after '.' or ':'); mentioning a later one is an error, as it
// would be in Lua. A script needs every definition whose name its body or
// epilogue mentions, and what those use: a name that is only mentioned
// (a local of the body named like a helper) costs a definition, never a
// missing one.
//
// The deferred writes: an epilogue's line "flush()" sends what zadd_later,
// stock_set, next_offset and take_at deferred (lua/prelude.lua). A script that uses
// none of them has nothing deferred, so that line is left out of its
// epilogue (and flush with its tables out of its prelude).
//
// The safety net (checkLuaNames, run on every script as the package
// initialises): every name a script's source reads or writes is a Lua or
// Redis global (luaGlobals) or is declared somewhere in that source (local,
// function parameter, for variable). A helper missing from a script, or a
// misspelt one, panics at init instead of failing on a node with "Script
// attempted to access nonexistent global variable". The check does not
// follow scopes: a name declared in one function and used in another
// passes it, as it did before (Redis still refuses such a global at run
// time). It reads the source in the pieces script joins, so a definition
// many scripts carry is split into tokens once. The function library
// derived from the source (luafunc.go) is checked the same way by
// TestFunctionLibrariesDeclareEveryName, not at init: it is this
// package's rewriting of a source that passed, not a script's own code.

// luaLibFiles are the files of the prelude library, in the order their
// definitions appear in a script. A file joins the prelude by being
// listed here (after the files whose definitions it uses); its text
// follows the rule above, which newLuaLib checks as the package
// initialises.
var luaLibFiles = []string{"prelude.lua", "lib_part_due.lua", "redo_log.lua", "part_codec.lua", "pending_index.lua", "part_settle.lua", "order_head.lua", "order_codec.lua", "inline_part.lua", "take_whole.lua", "redo_holds.lua"}

// stampLua is what every script starts with: the node's identity and
// epoch check (lua/stamp.lua).
var stampLua = luaFile("stamp.lua")

// deferringHelpers are the prelude helpers that defer a write to flush.
var deferringHelpers = []string{"zadd_later", "stock_set", "next_offset", "take_at"}

// flushLine is the epilogues' call of flush.
const flushLine = "\nflush()\n"

// luaDef is one definition of the prelude library.
type luaDef struct {
	file  string
	names []string // the names its first line defines
	text  string
	uses  []int // the earlier definitions it mentions
}

// luaLib is the prelude library split into definitions.
type luaLib struct {
	defs   []luaDef
	byName map[string]int
}

// preludeLib is the library of luaLibFiles, split once at init.
var preludeLib = mustLuaLib(luaLibFiles...)

func mustLuaLib(files ...string) *luaLib {
	l, err := newLuaLib(files...)
	if err != nil {
		panic("inventory: prelude library: " + err.Error())
	}
	return l
}

// newLuaLib splits files (in lua/) into definitions. The error names the
// file and the name at fault.
func newLuaLib(files ...string) (*luaLib, error) {
	l := &luaLib{byName: map[string]int{}}
	for _, file := range files {
		for _, text := range splitLuaDefs(luaFile(file)) {
			if len(luaTokens(text)) == 0 {
				continue // comments alone: the file's own notes
			}
			names, err := luaDefNames(text)
			if err != nil {
				return nil, fmt.Errorf("lua/%s: %w", file, err)
			}
			for _, n := range names {
				if j, dup := l.byName[n]; dup {
					return nil, fmt.Errorf("lua/%s defines %s, which lua/%s defines already", file, n, l.defs[j].file)
				}
				l.byName[n] = len(l.defs)
			}
			l.defs = append(l.defs, luaDef{file: file, names: names, text: text})
		}
	}
	for i := range l.defs {
		d := &l.defs[i]
		for _, n := range luaRefs(d.text) {
			j, ok := l.byName[n]
			switch {
			case !ok || j == i || slices.Contains(d.uses, j):
			case j > i:
				return nil, fmt.Errorf("lua/%s: %s uses %s, defined after it (lua/%s)", d.file, d.names[0], n, l.defs[j].file)
			default:
				d.uses = append(d.uses, j)
			}
		}
	}
	return l, nil
}

// splitLuaDefs cuts a library file into its definitions (see the file
// comment); text before the first definition is an error of the caller's
// file only if it holds code, which luaDefNames reports.
func splitLuaDefs(src string) []string {
	var out []string
	var cur, comments strings.Builder
	flush := func() {
		if cur.Len() > 0 {
			out = append(out, cur.String())
			cur.Reset()
		}
	}
	for _, line := range strings.SplitAfter(src, "\n") {
		switch {
		case strings.HasPrefix(line, "--"):
			comments.WriteString(line)
			continue
		case strings.HasPrefix(line, "local "):
			flush()
		}
		cur.WriteString(comments.String())
		comments.Reset()
		cur.WriteString(line)
	}
	cur.WriteString(comments.String())
	flush()
	return out
}

// luaDefNames is the names a definition's first code line defines.
func luaDefNames(text string) ([]string, error) {
	toks := luaTokens(text)
	if len(toks) < 2 || toks[0].s != "local" {
		return nil, fmt.Errorf("code outside a definition: %.60q", strings.TrimSpace(text))
	}
	if toks[1].s == "function" && len(toks) > 2 {
		return []string{toks[2].s}, nil
	}
	var names []string
	for i := 1; i < len(toks) && toks[i].name(); i += 2 {
		names = append(names, toks[i].s)
		if i+1 >= len(toks) || toks[i+1].s != "," {
			break
		}
	}
	return names, nil
}

// need returns the definitions code mentions, and what they use.
func (l *luaLib) need(code string, into map[int]bool) {
	var add func(i int)
	add = func(i int) {
		if into[i] {
			return
		}
		into[i] = true
		for _, j := range l.defs[i].uses {
			add(j)
		}
	}
	for _, n := range luaRefs(code) {
		if i, ok := l.byName[n]; ok {
			add(i)
		}
	}
}

// script assembles a script's source: the stamp check, the definitions
// body and epilogue need, body (inside the function the epilogue closes
// and calls) and epilogue, flush's line left out when nothing is deferred;
// the marker comments before the definitions, the body and what follows
// the body's end are where functionLibrary (luafunc.go) cuts it.
// A grouped script's body reads its call in place (luaflat.go): it is
// body(kb, ab, nk, na), rewritten by flatBody; any other is body(KEYS,
// ARGV) with kb = ab = 0. It fails, naming the name, when the source
// mentions a name nothing declares (checkLuaNames) or flatBody refuses an
// index.
func (l *luaLib) script(body, epilogue string, grouped bool) (string, error) {
	if grouped {
		var err error
		if body, err = flatBody(body); err != nil {
			return "", err
		}
	} else if n := contextName(body); n != "" {
		return "", fmt.Errorf("%s: only a grouped script's calls have a context (group.go, \"Contexts\")", n)
	}
	need := map[int]bool{}
	l.need(body, need)
	deferring := false
	for _, h := range deferringHelpers {
		deferring = deferring || need[l.byName[h]]
	}
	if !deferring {
		epilogue = strings.Replace(epilogue, flushLine, "\n", 1)
	}
	l.need(epilogue, need)
	rest, ok := strings.CutPrefix(epilogue, bodyEnd)
	if !ok {
		return "", fmt.Errorf("its epilogue does not start by closing the body (%q)", bodyEnd)
	}
	pieces := []string{stampLua, markDefs}
	for i, d := range l.defs {
		if need[i] {
			pieces = append(pieces, d.text)
		}
	}
	pieces = append(pieces, markBody)
	if grouped {
		pieces = append(pieces, groupHeaderKA+"local function body(kb, ab, nk, na, cb, ca, cnk, cna)\n")
	} else {
		pieces = append(pieces, "\nlocal function body(KEYS, ARGV)\nlocal kb, ab = 0, 0\n")
	}
	pieces = append(pieces, body, bodyEnd, markMain, rest)
	return strings.Join(pieces, ""), checkLuaNames(pieces...)
}

// mustScript is preludeLib.script for a script declared at init: an error
// is a bug of this package, so it panics naming the script.
func mustScript(name, body, epilogue string, grouped bool) string {
	src, err := preludeLib.script(body, epilogue, grouped)
	if err != nil {
		panic("inventory: script " + name + ": " + err.Error())
	}
	return src
}
