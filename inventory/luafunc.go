package inventory

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/node"
)

// Scripts run as Redis functions (FCALL), each script one library.
//
// Why: a script sent by EVALSHA runs its whole source on every call: the
// prelude's definitions make their closures again (dozens in the reserve
// scripts, each finding its upvalues in a list as long as the script's
// locals), and the garbage they leave is collected again. A function
// library runs its top level once, when FUNCTION LOAD loads it; FCALL
// runs only the function it registered. Under callgrind
// (TestLocalScriptInstructions) a call of the local reserve carrying one
// order fell from about 347,000 node instructions to 291,000, its frame
// alone (an empty body) from 187,000 to 109,000; in calls of 20 orders,
// from 71,800 to 70,400 per order. (With the changes that followed, the
// per-call state made once where it could be: 278,000 and 69,600.)
//
// The library is derived from the script's source (lualib.go's script,
// cut at its marker comments), so both forms hold the same Lua:
//
//	#!lua name=NAME
//	local KEYS, ARGV, <the per-call names>
//	<the definitions that are not per call, as they are>
//	<the body's function>
//	local function main(keys, args)
//	  KEYS, ARGV = keys, args
//	  <the stamp check, its locals assigned>
//	  <the per-call definitions, assigned>
//	  <the epilogue>
//	end
//	redis.register_function{function_name='NAME', callback=main, flags=…}
//
// The rule that keeps a call's work its own: nothing a call leaves at the
// library's level is read by a later call as state. A definition of the
// prelude is per call when it is not a function and
//   - it mentions a per-call name (now, nowS, …) anywhere, even inside a
//     function it makes: a value kept from call to call must not depend
//     on a call's state (part_due is a memo of a function of now: kept,
//     it would hand a later call an earlier call's clock, and a part an
//     early deadline);
//   - or, outside the functions it makes (their bodies run when called),
//     it reads a global (the node or the call: redis, KEYS, ARGV; or a
//     Lua library, which a library's top level cannot read: FUNCTION LOAD
//     runs it seeing only redis.register_function and redis.log) or makes
//     an empty table (a cache or a queue the calls fill).
// Those are declared at the library's level, so the functions defined
// once see them, and assigned afresh at the start of every call, after
// the stamp check, in their order. What stays at the library's level is
// functions and values computed once from constants (the memoized
// formatters I, Nttl …, whose kept value is a pure function of their
// argument; the codec's tables), and functionLibrary refuses a source
// whose code assigns such a value anywhere but in its own definition.
//
// Loading (call, runDurable): FCALL by name; a node that answers
// "Function not found" (restarted without its data, flushed, or written
// by an earlier release: nothing ran), or NOPERM (an ACL user without
// FCALL: refused before anything ran), gets FUNCTION LOAD REPLACE, then
// the FCALL again. When the node will not load it (FUNCTION LOAD is
// refused on a node over its maxmemory, to an ACL user without it, on a
// read-only replica) or still refuses the FCALL, the call goes as EVAL
// with the script's source, which runs the same Lua under the same flags,
// so a release script still runs on a full node (oom.go); the refusal is
// logged once a minute per node at most, as every such call sends a
// whole script. The library's name carries a hash of its text, so releases
// and test variants never replace each other's functions; a node keeps a
// release's libraries until FUNCTION DELETE or FUNCTION FLUSH.

// The marker comments lualib.go's script writes: before the definitions,
// before the body's function, and after the body's end.
const (
	markDefs = "--@defs\n"
	markBody = "--@body\n"
	markMain = "--@main\n"
)

// groupHeaderKA is the line a grouped script's body function is preceded
// by (its KEYS and ARGV as locals: lualib.go's script), which a library
// leaves out: it declares them itself.
const groupHeaderKA = "\nlocal KEYS, ARGV = KEYS, ARGV\n"

// functionLibrary is the function library of the script named name whose
// source (lualib.go's script) is src, under memory rule mem: the name it
// registers its one function under, and the library's text for FUNCTION
// LOAD. It fails when src lacks a marker, or breaks the rule above.
func functionLibrary(name string, mem memRule, src string) (string, string, error) {
	stamp, rest, ok1 := strings.Cut(src, markDefs)
	defs, rest, ok2 := strings.Cut(rest, markBody)
	body, main, ok3 := strings.Cut(rest, markMain)
	if !ok1 || !ok2 || !ok3 || strings.Contains(main, markMain) {
		return "", "", fmt.Errorf("its source lacks the markers %q, %q and %q, in that order, once each", markDefs, markBody, markMain)
	}
	stampText, stampNames := assignLocals(stamp)
	d, err := splitDefs(defs, stampNames)
	if err != nil {
		return "", "", err
	}
	decl := append(stampNames, d.perCall...)
	body = strings.Replace(body, groupHeaderKA, "\n", 1)
	for _, code := range append(splitLuaDefs(defs), body, main, stampText) {
		if n := assignedState(code, d.state); n != "" {
			return "", "", fmt.Errorf("its code assigns %s, a value its library keeps from call to call (luafunc.go)", n)
		}
	}
	var b strings.Builder
	b.WriteString("local KEYS, ARGV")
	for _, n := range decl {
		b.WriteString(", " + n)
	}
	b.WriteString("\n")
	b.WriteString(d.top)
	b.WriteString(body)
	b.WriteString("\nlocal function main(keys, args)\nKEYS, ARGV = keys, args\n")
	b.WriteString(stampText)
	b.WriteString(d.init)
	b.WriteString(main)
	b.WriteString("\nend\nredis.register_function{function_name='@NAME', callback=main, flags={" + mem.functionFlags() + "}}\n")
	text := b.String()
	h := sha1.Sum([]byte(text))
	fname := "shardis_" + strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, name) + "_" + hex.EncodeToString(h[:funcHashHex/2])
	text = "#!lua name=" + fname + "\n" + strings.Replace(text, "@NAME", fname, 1)
	return fname, text, nil
}

// libDefs is a script's prelude definitions sorted by the rule above.
type libDefs struct {
	top     string          // the definitions kept at the library's level, as they are
	init    string          // the per-call ones, as assignments, in their order
	perCall []string        // the names the per-call ones define
	state   map[string]bool // the names of the kept ones that are not functions
}

// splitDefs sorts defs (the definitions a script's source holds) by the
// rule above; stamp is the names the stamp check assigns per call.
func splitDefs(defs string, stamp []string) (libDefs, error) {
	d := libDefs{state: map[string]bool{}}
	perCall := slices.Clone(stamp) // the names assigned per call so far
	var top, init strings.Builder
	for _, text := range splitLuaDefs(defs) {
		toks := luaTokens(text)
		if len(toks) == 0 {
			continue // comments only
		}
		names, err := luaDefNames(text)
		if err != nil {
			return d, err
		}
		switch {
		case toks[1].s == "function":
			top.WriteString(text)
		case perCallDef(toks, perCall):
			d.perCall = append(d.perCall, names...)
			perCall = append(perCall, names...)
			a, _ := assignLocals(text)
			init.WriteString(a)
		default:
			for _, n := range names {
				d.state[n] = true
			}
			top.WriteString(text)
		}
	}
	d.top, d.init = top.String(), init.String()
	return d, nil
}

// functionFlags is m as the flags of a registered function (the shebang's
// flags: shebang).
func (m memRule) functionFlags() string {
	switch m {
	case memRead:
		return "'no-writes'"
	case memRelease:
		return "'allow-oom'"
	}
	return ""
}

// assignLocals is code with every line that starts (at column 0) with
// "local " made an assignment, and the names those lines declared.
func assignLocals(code string) (string, []string) {
	var b strings.Builder
	var names []string
	for _, line := range strings.SplitAfter(code, "\n") {
		if rest, ok := strings.CutPrefix(line, "local "); ok {
			ns, err := luaDefNames(line)
			if err == nil && !strings.HasPrefix(rest, "function") {
				names = append(names, ns...)
				line = rest
				if len(luaTokens(line)) == 2*len(ns)-1 {
					line = "\n" // names only, no value: declared, nothing to assign
				}
			}
		}
		b.WriteString(line)
	}
	return b.String(), names
}

// perCallDef reports whether a definition that is not a function (its
// tokens toks) is per call (the rule above): it mentions a name of
// perCall anywhere, even inside a function it makes; or, outside the
// functions it makes (whose bodies run when called, not when the
// definition runs), it reads a global or makes an empty table.
func perCallDef(toks []luaTok, perCall []string) bool {
	end := -1 // the end of the function body toks[i] is in, if any
	for i, t := range toks {
		if i > end && t.s == "function" && t.kind == 'n' {
			end = luaBlockEnd(toks, i)
		}
		switch {
		case t.name() && !t.field && !t.key && slices.Contains(perCall, t.s):
			return true
		case i <= end: // in a function's body
		case t.s == "{" && i+1 < len(toks) && toks[i+1].s == "}":
			return true
		case t.name() && !t.field && !t.key && luaGlobals[t.s]:
			return true
		}
	}
	return false
}

// luaBlockEnd is the index of the "end" that closes the block opened at
// toks[i] (function, if, do, repeat … until), counting the blocks inside.
func luaBlockEnd(toks []luaTok, i int) int {
	depth := 0
	for ; i < len(toks); i++ {
		if toks[i].kind != 'n' {
			continue
		}
		switch toks[i].s {
		case "function", "if", "do", "repeat": // while and for open with their do
			depth++
		case "end", "until":
			if depth--; depth == 0 {
				return i
			}
		}
	}
	return i
}

// assignedState is a name of state that code assigns (a = …, or a name
// of a list a, b = …), unless code is that name's own definition; "" when
// none.
func assignedState(code string, state map[string]bool) string {
	toks := luaTokens(code)
	own := map[string]bool{}
	if len(toks) > 1 && toks[0].s == "local" {
		if names, err := luaDefNames(code); err == nil {
			for _, n := range names {
				own[n] = true
			}
		}
	}
	for i, t := range toks {
		if t.s != "=" || t.kind != 'p' {
			continue
		}
		for j := i - 1; j >= 0 && toks[j].name() && !toks[j].field && !toks[j].key; j -= 2 {
			if j > 0 && toks[j-1].s == "local" {
				break
			}
			if state[toks[j].s] && !own[toks[j].s] {
				return toks[j].s
			}
			if j == 0 || toks[j-1].s != "," {
				break
			}
		}
	}
	return ""
}

// functionMissing reports whether err is a node's refusal of FCALL before
// anything ran: it does not have the function, or the ACL user may not
// run FCALL (NOPERM; one that may not touch a key is refused the same by
// EVAL, which then answers with its own NOPERM).
// (A nil err is the usual case, answered without HasErrorPrefix, which
// allocates on every call.)
func functionMissing(err error) bool {
	return err != nil && (redis.HasErrorPrefix(err, "Function not found") || redis.HasErrorPrefix(err, "NOPERM"))
}

// sourceWarnEvery is how often, at most, an instance logs that a node
// will not load the scripts' functions.
const sourceWarnEvery = time.Minute

// afterRefusal finishes a call of s on node n whose FCALL the node
// refused before running it (functionMissing): it loads s's library and
// sends the call again, by run(false); when the node would not load it,
// or refused that FCALL too, it logs so (sourceSent) and sends the call as
// s's source, by run(true). run sends the call and returns its error.
func (inv *Inventory) afterRefusal(ctx context.Context, n *node.Node, s *luaScript, run func(source bool) error) {
	err := n.Client().Do(ctx, "function", "load", "replace", s.lib).Err()
	if err == nil {
		if err = run(false); !functionMissing(err) {
			return
		}
	}
	inv.sourceSent(n, s, err)
	_ = run(true) // its error is the call's
}

// sourceSent logs that a call of s on node n goes as its source because
// of err (the node would not load the function: over its maxmemory, an
// ACL user without FUNCTION LOAD; or refused the FCALL: an ACL user
// without it), once a minute per node at most: every such call sends its
// script's whole source (README: the ACL user needs FUNCTION LOAD and
// FCALL).
func (inv *Inventory) sourceSent(n *node.Node, s *luaScript, err error) {
	v, _ := inv.sourceWarned.LoadOrStore(n.Name(), new(atomic.Int64))
	last, now := v.(*atomic.Int64), time.Now().UnixNano()
	if prev := last.Load(); (prev == 0 || now-prev >= int64(sourceWarnEvery)) && last.CompareAndSwap(prev, now) {
		inv.log.Warn("inventory: the node would not load or run a script's function; sending the script's source instead (slower)",
			"node", n.Name(), "script", s.name, "err", err)
	}
}
