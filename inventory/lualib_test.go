package inventory

import (
	"slices"
	"strings"
	"testing"
)

// A script whose body calls a helper no snippet defines (missing, or
// misspelt) fails as the package initialises (newScript and its siblings
// panic naming it), not on a node with "nonexistent global variable".
func TestScriptMissingHelperFailsAtInit(t *testing.T) {
	for _, c := range []struct {
		name  string
		build func()
	}{
		{"no_such_helper", func() { newScript("missing-helper", false, "return no_such_helper(1)\n") }},
		{"part_gett", func() { newGroupedScript("misspelt-helper", true, "local r = part_gett(KEYS[2])\nreturn 1\n") }},
		{"nowz", func() { newReleaseScript("misspelt-local", "return nowz\n") }},
		{"pack_part", func() { newBareScript("bare-missing", identityLua+"return pack_part('o', 't', {})\n") }},
	} {
		before := len(scripts)
		msg := func() (msg string) {
			defer func() {
				if r := recover(); r != nil {
					msg, _ = r.(string)
				}
			}()
			c.build()
			return ""
		}()
		if !strings.Contains(msg, " "+c.name) {
			t.Errorf("a script calling %s: panic %q, want one naming it", c.name, msg)
		}
		scripts = scripts[:before] // a script that did get built leaves no trace in the other tests
	}
}

// Each registered script's prelude carries the definitions it uses and
// no other: leaving out any one of them fails checkLuaNames (so the check
// sees every helper a script needs), and a script gets none it does not
// mention (settle neither order_write nor the deferred writes; a script
// that reads nothing of the library, not even TIME). Every script starts
// with the stamp check, whole.
func TestPreludePerScript(t *testing.T) {
	t.Parallel()
	if len(scripts) < 20 {
		t.Fatalf("%d scripts registered", len(scripts))
	}
	for _, s := range scripts {
		if !strings.HasPrefix(s.src, stampLua) {
			t.Errorf("script %s does not start with lua/stamp.lua", s.name)
		}
		pieces, defAt := splitAtDefs(t, s.name, s.src)
		for k, j := range defAt {
			without := slices.Concat(pieces[:j], pieces[j+1:])
			if err := checkLuaTokens(without...); err == nil {
				d := preludeLib.defs[k]
				t.Errorf("script %s without %s (lua/%s): checkLuaNames passes it", s.name, d.names[0], d.file)
			}
		}
	}
	has := func(src, def string) bool { return strings.Contains(src, preludeLib.defs[preludeLib.byName[def]].text) }
	for _, c := range []struct {
		s        *luaScript
		with     []string
		without  []string
		flushing bool
	}{
		{settleScript, []string{"part_get", "part_put", "int", "nowS"}, []string{"order_write", "zadd_later", "stock_int", "flush", "zchecked"}, false},
		{reserveScript, []string{"part_read", "part_new", "zadd_later", "stock_set", "next_offset", "flush"}, []string{"order_write", "part_put", "part_get", "order_unpack"}, true},
		{localScript, []string{"part_new", "order_head", "flush"}, []string{"part_get", "part_put", "part_lit", "order_write"}, true},
		{orderScript, []string{"now", "nowS"}, []string{"part_get", "flush", "zchecked"}, false},
		{limitTodoScript, nil, []string{"now", "I", "int", "part_get"}, false},
	} {
		for _, w := range c.with {
			if !has(c.s.src, w) {
				t.Errorf("script %s lacks %s", c.s.name, w)
			}
		}
		for _, w := range c.without {
			if has(c.s.src, w) {
				t.Errorf("script %s carries %s, which it does not use", c.s.name, w)
			}
		}
		if got := strings.Contains(c.s.src, flushLine); got != c.flushing {
			t.Errorf("script %s calls flush: %v, want %v", c.s.name, got, c.flushing)
		}
	}
	if strings.Contains(limitTodoScript.src, "'TIME'") {
		t.Errorf("limit-todo reads the clock, which it does not use")
	}
}

// splitAtDefs cuts src, a script's source, around each definition of
// the prelude's library it carries (its first occurrence) and splits
// every piece into tokens once: checking the script without one
// definition (checkLuaTokens of the other pieces) is then checkLuaNames of
// the source with that definition's text removed, without lexing the
// whole script again for each definition (that took this test 31 s under
// -race). defAt maps a definition's index in preludeLib.defs to its
// piece. Definitions are whole statements, so the pieces are too; two
// that overlap fail the test, as removing one would cut into the other.
func splitAtDefs(t *testing.T, name, src string) (pieces [][]luaTok, defAt map[int]int) {
	t.Helper()
	type span struct{ def, from, to int }
	var spans []span
	for k, d := range preludeLib.defs {
		if i := strings.Index(src, d.text); i >= 0 {
			spans = append(spans, span{k, i, i + len(d.text)})
		}
	}
	slices.SortFunc(spans, func(a, b span) int { return a.from - b.from })
	defAt = map[int]int{}
	at := 0
	for _, sp := range spans {
		if sp.from < at {
			t.Fatalf("script %s: prelude definition %s overlaps the one before it", name, preludeLib.defs[sp.def].names[0])
		}
		pieces = append(pieces, lexLua(src[at:sp.from]))
		defAt[sp.def] = len(pieces)
		pieces = append(pieces, lexLua(src[sp.from:sp.to]))
		at = sp.to
	}
	return append(pieces, lexLua(src[at:])), defAt
}

// The lexer tells a variable from a field, a table key, a string, a
// comment and a keyword; declarations cover locals, parameters, for
// variables and methods' self.
func TestLuaRefs(t *testing.T) {
	src := `#!lua flags=no-writes
local a, b = x.y, 'part_get(' .. z -- c(d)
--[==[ e
f ]==] local g = [[h]] .. {k = 1, ['m'] = n, o.p, q == r}
for i, v in ipairs(t) do s:u(i) end
local function w(p1, ...) return p1 .. 0x1f .. 1.5e3 end
`
	got := luaRefs(src)
	want := []string{"a", "b", "x", "z", "g", "n", "o", "q", "r", "i", "v", "ipairs", "t", "s", "w", "p1"}
	if !slices.Equal(got, want) {
		t.Errorf("luaRefs = %v, want %v", got, want)
	}
	err := checkLuaNames(src)
	if err == nil || !strings.Contains(err.Error(), "n, o, q, r, s, t, x, z,") {
		t.Errorf("checkLuaNames = %v, want it to name n, o, q, r, s, t, x, z", err)
	}
	if err := checkLuaNames("local t = {}\nfunction t:m(a) return self, a end\nfor k = 1, 2 do end\n"); err != nil {
		t.Errorf("checkLuaNames of declared names: %v", err)
	}
}

// preludeFor returns the definitions of lua/prelude.lua that code uses
// (I, set_value …), for a test script that runs a codec alone.
func preludeFor(code string) string {
	lib := mustLuaLib("prelude.lua")
	need := map[int]bool{}
	lib.need(code, need)
	var b strings.Builder
	for i, d := range lib.defs {
		if need[i] {
			b.WriteString(d.text)
		}
	}
	return b.String()
}
