package inventory

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/internal/redistest"
)

// libraryLoaded reports whether the node c talks to has s's function
// library.
func libraryLoaded(t *testing.T, e *groupEnv, s *luaScript) bool {
	t.Helper()
	libs, err := e.admin.FunctionList(e.ctx, redis.FunctionListQuery{LibraryNamePattern: s.fn.(string)}).Result()
	if err != nil {
		t.Fatal(err)
	}
	return len(libs) == 1
}

// Every script's function library loads on a node, under a name of its
// own.
func TestEveryFunctionLibraryLoads(t *testing.T) {
	c := redistest.StartN(t, 1, redistest.Options{})[0].Client(t)
	ctx := t.Context()
	seen := map[string]string{}
	for _, s := range scripts {
		fn := s.fn.(string)
		if other, dup := seen[fn]; dup {
			t.Errorf("scripts %s and %s register the same function %s", s.name, other, fn)
		}
		seen[fn] = s.name
		if got, err := c.FunctionLoadReplace(ctx, s.lib).Result(); err != nil || got != fn {
			t.Errorf("script %s: FUNCTION LOAD: %q, %v; want library %s", s.name, got, err, fn)
		}
	}
}

// A node without the functions (FUNCTION FLUSH between calls: a restart
// without data does the same) gets each one loaded by the call that meets
// "Function not found", and the call runs once: for a grouped script alone
// and in groups (the local reserve), and for a script sent without a group
// (the stock load).
func TestFunctionsLoadedAfterFlush(t *testing.T) {
	for _, groupCommit := range []int{1, 32} {
		e := newGroupEnv(t, groupCommit)
		inv, c, ctx := e.inv, e.admin, e.ctx
		items := []Item{{Route: "a", SKU: "s", Quantity: 1}}
		for i := range 3 {
			if err := c.FunctionFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			if _, err := inv.LoadStock(ctx, "a", "s", 10, 0); err != nil {
				t.Fatalf("group_commit %d, round %d: LoadStock after FUNCTION FLUSH: %v", groupCommit, i, err)
			}
			if err := c.FunctionFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			id := "flush-" + string(rune('a'+i))
			res, err := inv.Reserve(ctx, id, items, "", time.Hour)
			if err != nil {
				t.Fatalf("group_commit %d, round %d: Reserve after FUNCTION FLUSH: %v", groupCommit, i, err)
			}
			if len(res.Receipts) != 1 || res.Receipts[0].Quantity != 1 {
				t.Fatalf("group_commit %d: reservation %+v, want one part of 1", groupCommit, res)
			}
			if !libraryLoaded(t, e, localScript) {
				t.Fatalf("group_commit %d: the local reserve's library is not loaded after its call", groupCommit)
			}
		}
		lvl, err := inv.GetStock(ctx, "a", "s")
		if err != nil || lvl.Loaded != 30 || lvl.Available != 27 || lvl.Reserved != 3 {
			t.Fatalf("group_commit %d: stock %+v (%v), want 30 loaded, 27 available and 3 reserved", groupCommit, lvl, err)
		}
	}
}

// A node over its maxmemory refuses FUNCTION LOAD (it is a write that may
// take memory): a release script it lacks then goes as EVAL of its
// source, which runs under the script's own flags (allow-oom), so a
// cancel still gives its stock back on a full node.
func TestReleaseRunsAsSourceOnFullNode(t *testing.T) {
	e := newGroupEnv(t, 32)
	inv, c, ctx := e.inv, e.admin, e.ctx
	if _, err := inv.LoadStock(ctx, "a", "s", 10, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := inv.Reserve(ctx, "full-1", []Item{{Route: "a", SKU: "s", Quantity: 2}}, "", time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := c.FunctionFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	defer c.ConfigSet(ctx, "maxmemory", "0")
	if err := c.FunctionLoadReplace(ctx, localScript.lib).Err(); err == nil || !strings.HasPrefix(err.Error(), "OOM") {
		t.Fatalf("FUNCTION LOAD on the full node: %v, want an OOM refusal", err)
	}
	if _, err := inv.Cancel(ctx, "full-1"); err != nil {
		t.Fatalf("Cancel on the full node: %v", err)
	}
	if libs, err := c.FunctionList(ctx, redis.FunctionListQuery{}).Result(); err != nil || len(libs) != 0 {
		t.Fatalf("libraries on the full node: %v (%v), want none: the cancel ran as source", libs, err)
	}
	if err := c.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	lvl, err := inv.GetStock(ctx, "a", "s")
	if err != nil || lvl.Available != 10 || lvl.Reserved != 0 {
		t.Fatalf("stock %+v (%v) after the cancel, want 10 available and none reserved", lvl, err)
	}
}

// functionLibrary keeps per call what a call must not inherit (the
// clock, the tables the helpers fill, anything read from a global), keeps
// functions and constants at the library's level, and refuses a source
// without its markers or one whose code assigns a kept value.
func TestFunctionLibraryRule(t *testing.T) {
	lib := localScript.lib
	main := lib[strings.Index(lib, "\nlocal function main("):]
	for _, want := range []string{"\nnow = redis.call('TIME')\n", "\nnowS = I(now)\n", "\nzchecked = {}\n", "\nstocks = {}\n",
		"\npartPrefix = ARGV[3]\n"} {
		if !strings.Contains(main, want) {
			t.Errorf("the local reserve's main does not assign %q", strings.TrimSpace(want))
		}
	}
	top := lib[:len(lib)-len(main)]
	for _, want := range []string{"\nlocal function take_stock(", "\nlocal PENDING, REDO_OFFSETS, PART_GRACE = ", "\nlocal I, Idl, Iq\ndo\n", "\nlocal Nttl, Nqty, Nret\ndo\n",
		"\nlocal reserved_head = head_memo('reserved')\n", "\nlocal function body(kb, ab, nk, na)\n"} {
		if !strings.Contains(top, want) {
			t.Errorf("the local reserve's library does not define %q once, at its level", strings.TrimSpace(want))
		}
	}
	if strings.Contains(lib, "local KEYS, ARGV = KEYS, ARGV") {
		t.Errorf("the library reads KEYS and ARGV at its level")
	}
	src := "\nlocal meta = 1\n" + markDefs + "local LIMIT = 5\nlocal function f() LIMIT = 6 end\n" + markBody +
		"local function body(KEYS, ARGV)\nreturn 1\n" + bodyEnd + markMain + "return body(KEYS, ARGV)\n"
	if _, _, err := functionLibrary("t", memGrow, src); err == nil || !strings.Contains(err.Error(), "assigns LIMIT") {
		t.Errorf("a helper assigning a kept constant: %v, want refused naming LIMIT", err)
	}
	if _, _, err := functionLibrary("t", memGrow, strings.Replace(src, markBody, "", 1)); err == nil {
		t.Errorf("a source without its body marker: no error")
	}
	ok := strings.Replace(src, "LIMIT = 6", "return LIMIT", 1)
	if _, text, err := functionLibrary("t", memRead, ok); err != nil || !strings.Contains(text, "flags={'no-writes'}") {
		t.Errorf("a read script's library: %v, %q; want its function registered no-writes", err, text)
	}
}
