package inventory

import (
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/internal/syncbuf"
	"github.com/shardis/shardis/router"
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
		"\nlocal reserved_head = head_memo('reserved')\n", "\nlocal function body(kb, ab, nk, na, cb, ca, cnk, cna)\n"} {
		if !strings.Contains(top, want) {
			t.Errorf("the local reserve's library does not define %q once, at its level", strings.TrimSpace(want))
		}
	}
	if rl := reserveScript.lib; !strings.Contains(rl[strings.Index(rl, "\nlocal function main("):], "\npart_due = memo(") {
		t.Errorf("the reserve script's part_due (a memo of a function of now) is kept from call to call")
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

// Every script's source and function library declare every name they
// use (checkLuaNames): the source is checked as the package initialises,
// in the pieces lualib.go's script joins, and here whole, so the two
// readings agree; the library, this package's rewriting of the source,
// only here. A name nothing declares fails the check.
func TestFunctionLibrariesDeclareEveryName(t *testing.T) {
	t.Parallel()
	for _, s := range scripts {
		if err := checkLuaNames(s.src); err != nil {
			t.Errorf("script %s, its source: %v", s.name, err)
		}
		if err := checkLuaNames(s.lib); err != nil {
			t.Errorf("script %s, its function library: %v", s.name, err)
		}
		if err := checkLuaNames(s.lib, "\nreturn part_gett\n"); err == nil || !strings.Contains(err.Error(), "part_gett") {
			t.Errorf("script %s, its library with part_gett: %v, want an error naming it", s.name, err)
		}
	}
}

// Every script's library is named as isShardisLibrary recognises, and
// FunctionLibraries lists each once; other names are not shardis's.
func TestFunctionLibraryNames(t *testing.T) {
	libs := FunctionLibraries()
	for _, s := range scripts {
		fn := s.fn.(string)
		if !isShardisLibrary(fn) || !slices.Contains(libs, fn) {
			t.Errorf("script %s: library %s not recognised (%v) or not listed", s.name, fn, isShardisLibrary(fn))
		}
	}
	for _, name := range []string{"shardis_", "shardis_mine", "shardis__0123456789abcdef", "shardis_x_0123456789ABCDEF",
		"shardis_x_0123456789abcde", "mine_reserve_0123456789abcdef", "shardis_x_0123456789abcdefa"} {
		if isShardisLibrary(name) {
			t.Errorf("%q taken for a shardis library", name)
		}
	}
}

// PruneFunctions lists this release's libraries and deletes only those of
// other releases: a user's library named like shardis's but not in its
// form stays, and a dry run deletes nothing.
func TestPruneFunctions(t *testing.T) {
	e := newGroupEnv(t, 32)
	ctx, c := e.ctx, e.admin
	if _, err := e.inv.GetStock(ctx, "a", "s"); err != nil { // loads the stock script's library
		t.Fatal(err)
	}
	load := func(name string) {
		t.Helper()
		lib := "#!lua name=" + name + "\nredis.register_function('" + name + "', function() return 1 end)\n"
		if err := c.FunctionLoad(ctx, lib).Err(); err != nil {
			t.Fatal(err)
		}
	}
	old, mine := "shardis_reserve_local_0123456789abcdef", "shardis_mine"
	load(old)
	load(mine)
	cfg := config.Default()
	cfg.Nodes = map[string]config.Node{"n1": {Addr: c.Options().Addr, Weight: 1}}
	cfg.Servers = map[string]config.Server{"inventory": {OnNodeDown: config.OnNodeDownFail, Routes: map[string][]string{"a": {"n1"}}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, dry := range []bool{true, false} {
		got, err := PruneFunctions(ctx, &cfg, dry)
		if err != nil || len(got) != 1 || got[0].Err != nil {
			t.Fatalf("dry %v: %+v, %v", dry, got, err)
		}
		if !slices.Equal(got[0].Other, []string{old}) || !slices.Contains(got[0].Current, stockScript.fn.(string)) {
			t.Fatalf("dry %v: current %v, other %v; want the stock script's among the current, %s the only other", dry, got[0].Current, got[0].Other, old)
		}
		libs, err := c.FunctionList(ctx, redis.FunctionListQuery{}).Result()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, l := range libs {
			names = append(names, l.Name)
		}
		if slices.Contains(names, old) == !dry || !slices.Contains(names, mine) || !slices.Contains(names, stockScript.fn.(string)) {
			t.Fatalf("dry %v: libraries left %v; want %s kept, %s deleted only by the real run", dry, names, mine, old)
		}
	}
}

// A part's deadline is the clock of the call that takes it plus its hold:
// two takes with the same hold argument, 150ms apart, in two calls of the
// reserve script's function, are due 150ms apart. (When part_due, a memo
// of a function of the clock, was kept from call to call, the second got
// the first call's clock: a part due early, expired before its hold.)
func TestPartDeadlineIsPerCall(t *testing.T) {
	e := newGroupEnv(t, 32)
	inv, ctx := e.inv, e.ctx
	if _, err := inv.LoadStock(ctx, "a", "s", 10, 0); err != nil {
		t.Fatal(err)
	}
	token := inv.topology(ctx).token
	take := func(id string) {
		t.Helper()
		tok := newToken()
		reqs, ok := inv.localReqs(ctx, nil, e.n, id, tok, []Item{{Route: "a", SKU: "s", Quantity: 1}}, "")
		if !ok {
			t.Fatal("the order's item is not on the node")
		}
		keys, args, err := reserveCall(id, tok, partDue{hold: time.Minute}, reqs)
		if err != nil {
			t.Fatal(err)
		}
		c := newGroupCall(reserveScript, keys, args)
		inv.sendGroup(ctx, e.n, reserveScript, token, []*groupCall{c})
		if c.err != nil {
			t.Fatal(c.err)
		}
	}
	take("due-1")
	time.Sleep(150 * time.Millisecond)
	take("due-2")
	due, err := e.admin.ZRangeWithScores(ctx, PendingKey, 0, -1).Result()
	if err != nil || len(due) != 2 {
		t.Fatalf("pending index %v (%v), want the two parts", due, err)
	}
	if gap := due[1].Score - due[0].Score; gap < 140 {
		t.Fatalf("the parts are due %v ms apart, taken 150ms apart with the same hold: the second took an earlier call's clock", gap)
	}
}

// An ACL user that may not run FCALL, or may not load functions, still
// reserves, reads and cancels: the calls go as EVAL of the source, and the
// refusal is logged once, not once per call.
func TestScriptsRunAsSourceWithoutFunctionACL(t *testing.T) {
	for _, deny := range []string{"-fcall", "-function"} {
		srv := redistest.StartN(t, 1, redistest.Options{})[0]
		admin := srv.Client(t)
		ctx := t.Context()
		if err := admin.Do(ctx, "acl", "setuser", "lim", "on", ">pw", "~*", "&*", "+@all", deny).Err(); err != nil {
			t.Fatal(err)
		}
		cfg := config.Default()
		cfg.Nodes = map[string]config.Node{"n1": {Addr: srv.Addr(), Weight: 1, Username: "lim", Password: "pw"}}
		cfg.Servers = map[string]config.Server{"inventory": {OnNodeDown: config.OnNodeDownFail, Routes: map[string][]string{"a": {"n1"}}}}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		var logs syncbuf.Buffer
		log := slog.New(slog.NewTextHandler(&logs, nil))
		r, err := router.New(ctx, &cfg, router.Options{KeepData: cfg.KeepData(), Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		inv, err := New(r, Options{Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := inv.LoadStock(ctx, "a", "s", 10, 0); err != nil {
			t.Fatalf("%s: LoadStock: %v", deny, err)
		}
		for _, id := range []string{"acl-1", "acl-2"} {
			if _, err := inv.Reserve(ctx, id, []Item{{Route: "a", SKU: "s", Quantity: 1}}, "", time.Hour); err != nil {
				t.Fatalf("%s: Reserve %s: %v", deny, id, err)
			}
		}
		if _, err := inv.Cancel(ctx, "acl-1"); err != nil {
			t.Fatalf("%s: Cancel: %v", deny, err)
		}
		lvl, err := inv.GetStock(ctx, "a", "s")
		if err != nil || lvl.Available != 9 || lvl.Reserved != 1 {
			t.Fatalf("%s: stock %+v (%v), want 9 available and 1 reserved", deny, lvl, err)
		}
		inv.Close()
		r.Close()
		if n := strings.Count(logs.String(), "would not load or run a script's function"); n != 1 {
			t.Fatalf("%s: the refusal was logged %d times, want once:\n%s", deny, n, logs.String())
		}
	}
}
