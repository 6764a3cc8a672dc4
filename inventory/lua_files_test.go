package inventory

import (
	"io/fs"
	"slices"
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
			if strings.Contains(s.src, text) {
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
		// an epilogue is in a script whole, or without its flush line
		if !inScript(text) && !inScript(strings.Replace(text, flushLine, "\n", 1)) {
			t.Errorf("%s is in no script", name)
		}
	}
	for _, d := range preludeLib.defs {
		if !inScript(d.text) {
			t.Errorf("%s of lua/%s is in no script", d.names[0], d.file)
		}
	}
	for file, want := range map[string][]string{
		"prelude.lua":    {"'" + partsLayout2 + "' .. token", "#'" + redoLogKeyPrefix + "'", "'\\031'"},
		"stage_take.lua": {"'" + string(MutationStageTakeover) + "'"},
	} {
		for _, w := range want {
			if !strings.Contains(luaFile(file), w) {
				t.Errorf("lua/%s does not spell %q as the Go constants do", file, w)
			}
		}
	}
	if partsUS != "\x1f" || partsRS != "\x1e" {
		t.Errorf("the part list's separators changed in Go (%q, %q): pack_parts in lua/prelude.lua writes \\031 and \\030", partsUS, partsRS)
	}
}

// lua/part_codec.lua spells the Go constants it shares with the Go codec
// (partrec.go) as Go does: the field order, the state codes, the key
// prefixes, the separator.
func TestPartCodecLuaSpellsGoConstants(t *testing.T) {
	want := []string{"local PF = {'" + strings.Join(partFields[:], "', '") + "'}",
		"'" + stockKeyPrefix + "'", "'" + quotaKeyPrefix + "'", "'" + redoLogKeyPrefix + "'", "'\\031'"}
	for st, code := range partStateCodes {
		want = append(want, st+" = '"+code+"'", code+" = '"+st+"'")
	}
	for _, w := range want {
		if !strings.Contains(partCodecLua, w) {
			t.Errorf("lua/part_codec.lua does not spell %q as the Go constants do", w)
		}
	}
	if partUS != "\x1f" {
		t.Errorf("the packed part's separator changed in Go (%q): lua/part_codec.lua writes \\031", partUS)
	}
}
