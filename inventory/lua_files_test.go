package inventory

import (
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Every file of lua/ is part of some script (no file left behind when a
// script goes; of the prelude library's files, every definition: no
// helper left behind when its last user goes), and the Go constants
// whose values the Lua spells out itself are spelled the same in both.
func TestLuaFiles(t *testing.T) {
	names, err := fs.Glob(luaFS, "lua/*.lua")
	if err != nil || len(names) == 0 {
		t.Fatalf("lua/*.lua: %v, %d files", err, len(names))
	}
	inScript := func(text string) bool {
		for _, s := range scripts {
			// without the marker after the body's end (luafunc.go), which
			// splits an epilogue's first line from the rest
			if strings.Contains(strings.Replace(s.src, bodyEnd+markMain, bodyEnd, 1), text) {
				return true
			}
		}
		for _, src := range bareSources {
			if strings.Contains(src, text) {
				return true
			}
		}
		return false
	}
	for _, name := range names {
		file := strings.TrimPrefix(name, "lua/")
		if slices.Contains(luaLibFiles, file) {
			continue // its definitions, below
		}
		text := luaFile(file)
		// an epilogue is in a script whole, or without its flush line; a
		// grouped body as it reads its call in place (luaflat.go)
		flat, _ := flatBody(text)
		if !inScript(text) && !inScript(strings.Replace(text, flushLine, "\n", 1)) && !inScript(flat) {
			t.Errorf("%s is in no script", name)
		}
	}
	for _, d := range preludeLib.defs {
		if !inScript(d.text) {
			t.Errorf("%s of lua/%s is in no script", d.names[0], d.file)
		}
	}
	for file, want := range map[string][]string{
		"stage_take.lua": {"'" + string(MutationStageTakeover) + "'"},
		"redo_holds.lua": {"'" + RedoPartTrimmed + "'"},
	} {
		for _, w := range want {
			if !strings.Contains(luaFile(file), w) {
				t.Errorf("lua/%s does not spell %q as the Go constants do", file, w)
			}
		}
	}
}

// lua/part_codec.lua spells the Go constants it shares with the Go codec
// (partrec.go) as Go does: the field order (part_read's locals, in the
// order its pattern cuts them out, one capture per field; the operands
// of part_put's join), the state codes, the key prefixes, the separator.
func TestPartCodecLuaSpellsGoConstants(t *testing.T) {
	flat := strings.Join(strings.Fields(partCodecLua), " ")
	sep := `\031`
	want := []string{"local " + strings.Join(partFields[:], ", ") + " = string.match(v .. PPAD, PPAT)",
		"local PPAD = '" + strings.Repeat(sep, len(partFields)) + "'",
		"'" + stockKeyPrefix + "'", "'" + quotaKeyPrefix + "'", "'" + redoLogKeyPrefix + "'", "'" + sep + "'",
		"local SETTLED_LOG, SETTLED_CAP = '" + SettledLogKey + "', '" + strconv.Itoa(SettledLogCap) + "'"}
	for st, code := range partStateCodes {
		want = append(want, string(st)+" = '"+code+"'", code+" = '"+string(st)+"'")
	}
	for _, w := range want {
		if !strings.Contains(flat, w) {
			t.Errorf("lua/part_codec.lua does not spell %q as the Go constants do", w)
		}
	}
	if n := strings.Count(partCodecLua, "([^"+sep+"]*)"+sep); n != len(partFields) {
		t.Errorf("PPAT cuts %d fields, want %d", n, len(partFields))
	}
	// part_put's join: from "local s = " to the end of the if that adds
	// the fields after AT; its operands name the fields in order
	join, _, _ := strings.Cut(partCodecLua[strings.Index(partCodecLua, "local s = "):], "\n  end\n")
	isField := map[string]bool{}
	for _, f := range partFields {
		isField[f] = true
	}
	var order []string
	for _, line := range strings.Split(join, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "if ") {
			continue // the condition, not the join
		}
		for _, tok := range luaTokens(line) {
			if tok.kind == 'n' && isField[tok.s] {
				order = append(order, tok.s)
			}
		}
	}
	if !slices.Equal(order, partFields[:]) {
		t.Errorf("part_put joins %v, want the fields of partFields in order %v", order, partFields)
	}
	if partUS != "\x1f" {
		t.Errorf("the packed part's separator changed in Go (%q): lua/part_codec.lua writes \\031", partUS)
	}
	// PNEW_STOCK is the first piece of a pending stock part's template,
	// which reserveCall's short layout leaves out
	if w := "local PNEW_STOCK = PSC.pending .. '" + sep + string(PartStock) + sep + "'"; !strings.Contains(flat, w) {
		t.Errorf("lua/part_codec.lua does not spell %q", w)
	}
	buf, cut, err := appendPartTemplate(nil, "o", "tok", partReq{part: part{ID: "o|tok|0", Kind: PartStock, SKU: "s"}, queue: "inv:redo:1", ck: "inv:stock:r:s"})
	if err != nil || string(buf[:cut]) != partStateCodes[PartPending]+partUS+string(PartStock)+partUS {
		t.Errorf("a stock part's template starts %q (%v), not PNEW_STOCK's value", buf[:cut], err)
	}
}

// cutScript is grouped script s with each cut's first string, which must
// be in its source exactly once, replaced by the second: a variant for the
// tests that compare a script with itself without a piece, or time it
// without one. A grouped script's cuts are rewritten as its body is
// (luaflat.go), so they are written as the body's source reads. A cut
// that does not match once fails the test, so a change
// of the script that moves a piece cannot make them compare or time the
// wrong thing.
func cutScript(t testing.TB, s *luaScript, cuts ...[2]string) *luaScript {
	t.Helper()
	src := s.src
	for _, c := range cuts {
		if s.group { // its body reads its call in place: so do the cuts
			for i := range c {
				var err error
				if c[i], err = flatBody(c[i]); err != nil {
					t.Fatalf("script %s: cut %q: %v", s.name, c[i], err)
				}
			}
		}
		if n := strings.Count(src, c[0]); n != 1 {
			t.Fatalf("script %s: %q is in its source %d times, want once", s.name, c[0], n)
		}
		src = strings.Replace(src, c[0], c[1], 1)
	}
	return newLuaScript(&luaScript{name: s.name, write: s.write, mem: s.mem, group: s.group, context: s.context, src: src})
}

// The prelude's names for the pending index, the redo offsets hash and a
// part's grace are the Go ones (PendingKey, RedoOffsetsKey, partGrace).
func TestPreludeConstantsMatchGo(t *testing.T) {
	want := fmt.Sprintf("local PENDING, REDO_OFFSETS, PART_GRACE = '%s', '%s', %d\n", PendingKey, RedoOffsetsKey, ms(partGrace))
	if !strings.Contains(luaFile("prelude.lua"), want) {
		t.Fatalf("lua/prelude.lua does not define %q", want)
	}
	if want := fmt.Sprintf("local REDO_PAD, REDO_PAD_TEXT = '%s', '%s'\n", RedoOffsetsPad, redoOffsetsPadText); !strings.Contains(luaFile("prelude.lua"), want) {
		t.Fatalf("lua/prelude.lua does not define %q", want)
	}
	if len(redoOffsetsPadText) <= 64 {
		t.Fatalf("redoOffsetsPadText is %d bytes: a listpack holds values of up to 64", len(redoOffsetsPadText))
	}
}

// The one-part paths of lua/reserve.lua and lua/local.lua write take_at's
// steps out rather than call it (lua/take_whole.lua says why): each holds
// take_at's queue-offset, stock-copy and queueing steps as
// lua/prelude.lua's take_at has them, under its argument names, so a
// change to take_at that is not made in its copies fails here.
func TestTakeAtCopiesMatch(t *testing.T) {
	prelude := luaFile("prelude.lua")
	i := strings.Index(prelude, "local function take_at(")
	if i < 0 {
		t.Fatal("lua/prelude.lua defines no take_at")
	}
	body := prelude[i:]
	body = body[:strings.Index(body, "\nend\n")+1]
	// the steps after the offset's check: its copy's write, the stock
	// copy's (the two values computed in place in the copies), the queues
	steps := []string{
		"  o[1] = off\n  if not o[2] then offsets_dirty(o) end\n",
		"  if not v[7] then stock_dirty(ck, v) end\n",
	}
	q := body[strings.Index(body, "  local q = zqueued[seg]\n"):]
	steps = append(steps, q)
	for _, s := range steps {
		if !strings.Contains(body, s) {
			t.Fatalf("take_at no longer holds %q: update this test and the copies", s)
		}
	}
	for _, file := range []string{"reserve.lua", "local.lua", "stage_take.lua"} {
		src := luaFile(file)
		for _, s := range steps {
			if n := strings.Count(src, s); n != 1 {
				t.Errorf("lua/%s holds take_at's step %q %d times, want once", file, s, n)
			}
		}
	}
}
