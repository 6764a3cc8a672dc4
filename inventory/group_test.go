package inventory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
)

// Group commit (group.go) against a real node: calls that queue while the
// node is paused go as one script call, each call keeps its own reply or
// error, a caller that gives up while queued sends nothing, and a lone
// caller is sent at once.

// groupTestScript adds ARGV[4] to the counter KEYS[2]; ARGV[4] "bad"
// replies an error without writing, "raise" adds 1000 and then runs a hash
// command on the counter, which raises WRONGTYPE.
var groupTestScript = newGroupedScript("group-test", true, `
if ARGV[4] == 'bad' then return redis.error_reply('SHARDIS_RANGE bad call') end
if ARGV[4] == 'raise' then
  redis.call('INCRBY', KEYS[2], 1000)
  redis.call('HGET', KEYS[2], 'f')
end
return redis.call('INCRBY', KEYS[2], tonumber(ARGV[4]))
`)

type groupEnv struct {
	ctx   context.Context
	inv   *Inventory
	n     *node.Node
	admin *redis.Client
	sent  *scriptCounter
}

// scriptCounter is a go-redis hook counting script calls by script:
// FCALL by its function's name, EVAL (the fallback, luafunc.go) by its
// text.
type scriptCounter struct {
	mu    sync.Mutex
	n     map[string]int
	words map[string]int // the words of the command lines (FCALL and its name included), made on first use
}

func (h *scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.count(c)
		}
		return next(ctx, cmds)
	}
}

func (h *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *scriptCounter) count(cmd redis.Cmder) {
	if cmd.Name() != "fcall" && cmd.Name() != "eval" {
		return
	}
	id, _ := cmd.Args()[1].(string)
	h.mu.Lock()
	h.n[id]++
	if h.words == nil {
		h.words = map[string]int{}
	}
	h.words[id] += len(cmd.Args())
	h.mu.Unlock()
}

// wordsOf returns how many words the command lines of s's calls held,
// and forgets them.
func (h *scriptCounter) wordsOf(s *luaScript) int { return h.take(h.words, s) }

// of returns how many calls of s were sent, and forgets them.
func (h *scriptCounter) of(s *luaScript) int { return h.take(h.n, s) }

// peek returns how many calls of s were sent, forgetting nothing.
func (h *scriptCounter) peek(s *luaScript) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[s.fn.(string)] + h.n[s.text]
}

// take returns m's count for s (under its function's name and its
// source, as FCALL and EVAL name it), and forgets it.
func (h *scriptCounter) take(m map[string]int, s *luaScript) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	fn := s.fn.(string)
	k := m[fn] + m[s.text]
	delete(m, fn)
	delete(m, s.text)
	return k
}

func newGroupEnv(t *testing.T, groupCommit int) *groupEnv {
	srv := redistest.StartN(t, 1, redistest.Options{})[0]
	cfg := envConfig()
	cfg.Nodes = map[string]config.Node{"n1": {Addr: srv.Addr(), Weight: 1}}
	cfg.Servers = map[string]config.Server{"inventory": {OnNodeDown: config.OnNodeDownFail,
		Routes: map[string][]string{"a": {"n1"}}}}
	cfg.Inventory.GroupCommit = groupCommit
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	timeout := 60 * time.Second
	if redistest.CallgrindRunning() { // a measure: every server call is far slower
		timeout = 15 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	sent := &scriptCounter{n: map[string]int{}}
	r, err := router.New(ctx, &cfg, router.Options{KeepData: cfg.KeepData(), Logger: slog.New(slog.DiscardHandler), Hooks: []redis.Hook{sent}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	inv, err := New(r, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(inv.Close) // before the router's: its parked senders exit
	n, err := r.Node("n1")
	if err != nil {
		t.Fatal(err)
	}
	return &groupEnv{ctx: ctx, inv: inv, n: n, admin: srv.Client(t), sent: sent}
}

// envProbeTimeout is the probe timeout of this package's test envs
// (envConfig), not the default 300ms. Tests that pause their nodes (CLIENT
// PAUSE, up to 500ms) get a heartbeat sent during a pause answered when it
// ends, so 300ms timed it out and marked the node DOWN, failing the calls
// the test queued (ci385, busy: TestStagedGroupsShareContexts, "probe: …
// i/o timeout"); and on a loaded machine a live node's probe outlasted
// 300ms as well (ci447: TestStagedRefusalFenceOutlivesStageTTL's attempt
// could not give its part back when the test looked). No env relies on a
// probe to find a frozen or killed node: a frozen node's commands still
// time out after client.command_timeout, a killed one refuses at once.
const envProbeTimeout = 2 * time.Second

// envConfig is config.Default() with the test envs' probe timeout
// (envProbeTimeout).
func envConfig() config.Config {
	cfg := config.Default()
	cfg.Health.Timeout = envProbeTimeout
	return cfg
}

// pause blocks the node's other clients for d (CLIENT PAUSE), so calls
// sent meanwhile pile up: groupInFlight on the node, the rest queued.
func (e *groupEnv) pause(t *testing.T, d time.Duration) {
	t.Helper()
	if err := e.admin.Do(e.ctx, "CLIENT", "PAUSE", d.Milliseconds(), "ALL").Err(); err != nil {
		t.Fatal(err)
	}
}

// waitInFlight waits until want groups (of s: the only script the test
// sends) are under way on the node.
func (e *groupEnv) waitInFlight(t *testing.T, s *luaScript, want int) {
	t.Helper()
	q := e.inv.groups.queue(e.n)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		q.mu.Lock()
		got := q.inflight
		q.mu.Unlock()
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d groups of %s under way, want %d", got, s.name, want)
		}
	}
}

func (e *groupEnv) warm(t *testing.T) {
	t.Helper()
	if _, err := e.inv.run(e.ctx, e.n, groupTestScript, []string{"warm", "warm-h"}, "1"); err != nil {
		t.Fatal(err)
	}
	e.sent.of(groupTestScript)
}

func TestGroupCommitSharesOneScriptCall(t *testing.T) {
	e := newGroupEnv(t, 0) // 0: the default (32)
	e.warm(t)
	// A lone call is sent at once, alone.
	if v, err := e.inv.run(e.ctx, e.n, groupTestScript, []string{"lone", "wrongtype"}, "5"); err != nil || v != int64(5) {
		t.Fatalf("lone call: %v, %v; want 5", v, err)
	}
	if got := e.sent.of(groupTestScript); got != 1 {
		t.Fatalf("a lone call ran %d script calls, want 1", got)
	}
	seq0 := e.n.MaxSeq()
	st0 := e.inv.Stats()

	const calls = 24
	e.pause(t, 300*time.Millisecond)
	type result struct {
		v   any
		err error
	}
	res := make([]result, calls)
	var wg sync.WaitGroup
	for i := range calls {
		arg := "1"
		switch i {
		case 7:
			arg = "bad"
		case 13:
			arg = "raise"
		}
		wg.Add(1)
		go func() { // while paused: groupInFlight calls are sent, the others queue
			defer wg.Done()
			v, err := e.inv.run(e.ctx, e.n, groupTestScript, []string{"sum", "wrongtype"}, arg)
			res[i] = result{v, err}
		}()
	}
	wg.Wait()
	ok := 0
	for i, r := range res {
		switch i {
		case 7:
			if !errors.Is(r.err, ErrInvalid) {
				t.Errorf("call %d (error reply): err %v, want ErrInvalid", i, r.err)
			}
		case 13:
			if !errors.Is(r.err, ErrCorrupt) || errors.Is(r.err, ErrUnavailable) {
				t.Errorf("call %d (WRONGTYPE raised inside): err %v, want ErrCorrupt only", i, r.err)
			}
		default:
			if r.err != nil {
				t.Errorf("call %d: %v", i, r.err)
			} else {
				ok++
			}
		}
	}
	// 22 calls added 1 each; the raising one added its 1000 before it
	// raised, as a lone script that raises keeps its earlier writes.
	if sum, err := e.admin.Get(e.ctx, "sum").Int(); err != nil || sum != ok+1000 {
		t.Fatalf("sum = %d (%v), want %d", sum, err, ok+1000)
	}
	got := e.sent.of(groupTestScript)
	if got > 2*groupInFlight {
		t.Fatalf("%d calls that waited on a paused node ran as %d script calls; want them grouped (at most %d)", calls, got, 2*groupInFlight)
	}
	st := e.inv.Stats()
	if sent, carried := st.GroupScriptCalls-st0.GroupScriptCalls, st.GroupedCalls-st0.GroupedCalls; carried != calls || sent != int64(got) {
		t.Fatalf("Stats: %d script calls carrying %d calls; want %d carrying %d", sent, carried, got, calls)
	}
	if e.n.MaxSeq() <= seq0 {
		t.Fatalf("write sequence %d did not advance past %d", e.n.MaxSeq(), seq0)
	}
	t.Logf("%d calls ran as %d script calls", calls, got)
}

// groupTestScript2 is a second grouped write script: it adds ARGV[4] to
// the counter KEYS[2], as groupTestScript does.
var groupTestScript2 = newGroupedScript("group-test-2", true, `
return redis.call('INCRBY', KEYS[2], tonumber(ARGV[4]))
`)

// The node's group slots are shared by its scripts: calls of two scripts
// on a paused node are sent as groupInFlight script calls in all (not as
// many per script), the rest wait, and once the node answers the waiting
// calls of each script go in one group each.
func TestGroupCommitScriptsShareTheNodesSlots(t *testing.T) {
	e := newGroupEnv(t, 32)
	e.warm(t)
	if _, err := e.inv.run(e.ctx, e.n, groupTestScript2, []string{"warm2", "x"}, "1"); err != nil {
		t.Fatal(err)
	}
	e.sent.of(groupTestScript2)
	const each = 12
	// long enough for every call to queue on a loaded machine (calls that
	// queue once the node answers again form more groups than two), and
	// under client.command_timeout (1s), which the first groups and new
	// connections' stamp reads wait out
	e.pause(t, 700*time.Millisecond)
	var wg sync.WaitGroup
	for i := range 2 * each {
		s, key := groupTestScript, "one"
		if i%2 == 1 {
			s, key = groupTestScript2, "two"
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := e.inv.run(e.ctx, e.n, s, []string{key, "x"}, "1"); err != nil {
				t.Errorf("%s: %v", s.name, err)
			}
		}()
	}
	q := e.inv.groups.queue(e.n)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		q.mu.Lock()
		inflight, waiting := q.inflight, q.waiting
		q.mu.Unlock()
		// a group is counted under way before its sender hands it to the
		// client, whose hook counts it: wait for both (ci550 read 1 of 2)
		sent := e.sent.peek(groupTestScript) + e.sent.peek(groupTestScript2)
		if inflight+waiting == 2*each && sent >= inflight {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d groups under way (%d sent) and %d calls waiting, want %d calls in all", inflight, sent, waiting, 2*each)
		}
	}
	sentPaused := e.sent.of(groupTestScript) + e.sent.of(groupTestScript2)
	wg.Wait()
	if sentPaused != groupInFlight {
		t.Errorf("while the node was paused, %d script calls were sent for two scripts, want %d (the node's slots, shared)", sentPaused, groupInFlight)
	}
	if got := e.sent.of(groupTestScript) + e.sent.of(groupTestScript2); got > 2 {
		t.Errorf("the %d waiting calls of two scripts ran as %d script calls, want at most 2 (one group per script)", 2*each-groupInFlight, got)
	}
	for _, key := range []string{"one", "two"} {
		if v, err := e.admin.Get(e.ctx, key).Int(); err != nil || v != each {
			t.Errorf("%s = %d (%v), want %d", key, v, err, each)
		}
	}
}

func TestGroupCommitCallerGivingUpWhileQueuedSendsNothing(t *testing.T) {
	e := newGroupEnv(t, 32)
	e.warm(t)
	e.pause(t, 400*time.Millisecond)
	var wg sync.WaitGroup
	for range groupInFlight { // occupy the node's group slots
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := e.inv.run(e.ctx, e.n, groupTestScript, []string{"held", "x"}, "1"); err != nil {
				t.Errorf("held call: %v", err)
			}
		}()
	}
	e.waitInFlight(t, groupTestScript, groupInFlight)
	ctx, cancel := context.WithTimeout(e.ctx, 50*time.Millisecond)
	defer cancel()
	_, err := e.inv.run(ctx, e.n, groupTestScript, []string{"gaveup", "x"}, "1")
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("queued call past its deadline: err %v, want ErrUnavailable wrapping the deadline", err)
	}
	wg.Wait()
	if n, err := e.admin.Exists(e.ctx, "gaveup").Result(); err != nil || n != 0 {
		t.Fatalf("the call given up while queued ran (exists %d, %v)", n, err)
	}
	if v, err := e.admin.Get(e.ctx, "held").Int(); err != nil || v != groupInFlight {
		t.Fatalf("held = %d (%v), want %d", v, err, groupInFlight)
	}
}

// Reservations through the grouped reserve script: orders queued on a
// paused node are reserved by a few script calls, each decided on its own
// (one that its node cannot meet is refused), and the stock adds up.
func TestGroupCommitReservesEachOrderOnItsOwn(t *testing.T) {
	e := newGroupEnv(t, 32)
	if _, err := e.inv.LoadStock(e.ctx, "a", "sku", 10, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := e.inv.LoadStock(e.ctx, "a", "warm", 10, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := e.inv.Reserve(e.ctx, e.inv.mintLocal(t, "warm"), []Item{{Route: "a", SKU: "warm", Quantity: 1}}, "", 0); err != nil {
		t.Fatal(err)
	}
	e.sent.of(localScript)
	const orders = 16 // 16 orders of 1 unit for 10 units: 6 are refused
	errs := make([]error, orders)
	ids := make([]string, orders)
	res := make([]Reservation, orders)
	for i := range orders {
		ids[i] = e.inv.mintLocal(t, "sku")
	}
	e.pause(t, 300*time.Millisecond)
	var wg sync.WaitGroup
	for i := range orders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i], errs[i] = e.inv.Reserve(e.ctx, ids[i], []Item{{Route: "a", SKU: "sku", Quantity: 1}}, "", 0)
		}()
	}
	wg.Wait()
	ok, short := 0, 0
	for i, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, ErrInsufficientStock):
			short++
		default:
			t.Errorf("order %s: %v", ids[i], err)
		}
	}
	if ok != 10 || short != 6 {
		t.Fatalf("%d reserved, %d refused; want 10 and 6", ok, short)
	}
	lv, err := e.inv.GetStock(e.ctx, "a", "sku")
	if err != nil {
		t.Fatal(err)
	}
	if lv.Available != 0 || lv.Reserved != 10 {
		t.Fatalf("stock %+v, want 0 available and 10 reserved", lv)
	}
	// Each reserved part is in the pending index and in its redo queue at
	// its receipt's offset, and the offsets the group handed out follow
	// each other without a gap (the calls shared the offsets field, and
	// their ZADDs were sent together after the last call).
	offsets := map[int64]bool{}
	var redo string
	for i, err := range errs {
		if err != nil {
			continue
		}
		if len(res[i].Receipts) != 1 {
			t.Fatalf("order %s: receipts %+v", ids[i], res[i].Receipts)
		}
		r := res[i].Receipts[0]
		redo = r.RedoLog
		offsets[r.Offset] = true
		members, err := e.admin.ZRangeArgs(e.ctx, redis.ZRangeArgs{Key: redoSegmentKey(r.RedoLog, r.Offset), ByScore: true, Start: r.Offset, Stop: r.Offset}).Result()
		if err != nil || len(members) != 1 {
			t.Fatalf("order %s: redo queue %s at offset %d holds %v (%v)", ids[i], r.RedoLog, r.Offset, members, err)
		}
		if _, err := e.admin.ZScore(e.ctx, PendingKey, PendingMember(members[0], partFieldsOn(t, e.ctx, e.admin, members[0]))).Result(); err != nil {
			t.Fatalf("order %s: part %s is not in the pending index: %v", ids[i], members[0], err)
		}
	}
	var n int64
	for _, k := range e.admin.Keys(e.ctx, redo+":*").Val() {
		n += e.admin.ZCard(e.ctx, k).Val()
	}
	if n != 10 {
		t.Fatalf("redo queue %s holds %d entries in its segments, want 10", redo, n)
	}
	lo := int64(0)
	for o := range offsets {
		if lo == 0 || o < lo {
			lo = o
		}
	}
	for o := lo; o < lo+10; o++ {
		if !offsets[o] {
			t.Fatalf("offsets %v have a gap at %d", offsets, o)
		}
	}
	// The group wrote back what it changed: the stock hash (above) and the
	// queue's offset counter, so the next order's offset follows.
	if _, err := e.inv.LoadStock(e.ctx, "a", "sku", 1, 0); err != nil {
		t.Fatal(err)
	}
	next, err := e.inv.Reserve(e.ctx, e.inv.mintLocal(t, "sku"), []Item{{Route: "a", SKU: "sku", Quantity: 1}}, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := next.Receipts[0].Offset; got != lo+10 {
		t.Fatalf("the next order's redo offset is %d, want %d", got, lo+10)
	}
	for i, err := range errs {
		if err == nil {
			if _, err := e.inv.Confirm(e.ctx, ids[i]); err != nil {
				t.Fatalf("confirm %s: %v", ids[i], err)
			}
		}
	}
	if got := e.sent.of(localScript); got > 2*groupInFlight {
		t.Fatalf("%d orders queued on a paused node ran %d calls of the one-script reserve; want them grouped (at most %d)", orders, got, 2*groupInFlight)
	}
}

// mintLocal mints an order id whose record lives on the node of sku's
// route a (the only node here).
func (inv *Inventory) mintLocal(t *testing.T, sku string) string {
	t.Helper()
	id, err := inv.NewOrderID(context.Background(), Item{Route: "a", SKU: sku, Quantity: 1})
	if err != nil {
		t.Fatal(fmt.Errorf("NewOrderID: %w", err))
	}
	return id
}

func TestGroupCommitOptionOutOfRange(t *testing.T) {
	e := newGroupEnv(t, 32)
	for _, v := range []int{-1, 1001} {
		_, err := New(e.inv.r, Options{GroupCommit: v, Logger: slog.New(slog.DiscardHandler)})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "Options.GroupCommit is "+strconv.Itoa(v)) {
			t.Errorf("GroupCommit %d: err %v, want ErrInvalid naming Options.GroupCommit", v, err)
		}
	}
}

// groupShapeScript replies what its call received: its key and argument
// counts and its last key and argument.
var groupShapeScript = newGroupedScript("group-shape", false, `
return {#KEYS, #ARGV, KEYS[#KEYS], ARGV[#ARGV]}
`)

// TestGroupCommitCallsGetTheirOwnKeysAndArgs: in a group each call's body
// reads exactly its keys and arguments in place (luaflat.go: KEYS[e],
// #KEYS and their ARGV peers offset to the call), whatever their number:
// calls of none, of a few and of thousands in one group.
func TestGroupCommitCallsGetTheirOwnKeysAndArgs(t *testing.T) {
	e := newGroupEnv(t, 0)
	sizes := []int{0, 1, 3, 4001, 2, 6000, 0, 5}
	e.pause(t, 300*time.Millisecond)
	errs := make([]error, len(sizes))
	var wg sync.WaitGroup
	for i, sz := range sizes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			keys := []string{fmt.Sprintf("c%d", i)}
			var args []any
			for j := range sz {
				keys = append(keys, fmt.Sprintf("c%d-k%d", i, j))
				args = append(args, fmt.Sprintf("c%d-a%d", i, j))
			}
			v, err := e.inv.run(e.ctx, e.n, groupShapeScript, keys, args...)
			if err != nil {
				errs[i] = err
				return
			}
			lastArg := "" // with no argument of its own, ARGV[#ARGV] is the header's last
			if sz > 0 {
				lastArg = fmt.Sprintf("c%d-a%d", i, sz-1)
			}
			got, ok := v.([]any)
			if !ok || len(got) < 3 || got[0] != int64(sz+2) || got[1] != int64(sz+3) || got[2] != keys[len(keys)-1] ||
				(sz > 0 && (len(got) != 4 || got[3] != lastArg)) {
				errs[i] = fmt.Errorf("call %d (%d keys and arguments of its own) saw %v", i, sz, v)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if got := e.sent.of(groupShapeScript); got >= len(sizes) {
		t.Errorf("%d calls on a paused node ran as %d script calls: not grouped", len(sizes), got)
	}
}

// groupContextScript replies what its call sees: its own key and argument
// counts as a lone call counts them, its context's, then its own keys and
// arguments and its context's. A call of 2 keys or more has a context:
// its last 2 keys and its last argument.
var groupContextScript = newGroupedScript("group-context", false, `
local r = {#KEYS, #ARGV, #CKEYS, #CARGV}
for i = 2, #KEYS do r[#r + 1] = KEYS[i] end
for i = 4, #ARGV do r[#r + 1] = ARGV[i] end
for i = 1, #CKEYS do r[#r + 1] = CKEYS[i] end
for i = 1, #CARGV do r[#r + 1] = CARGV[i] end
return r
`).withContext(func(nk, na int) (int, int) {
	if nk >= 2 {
		return 2, 1
	}
	return 0, 0
})

// TestGroupCommitContexts: a run of calls of one shape and equal
// contexts (value by value, however boxed) sends its context once, and
// each call still reads its own keys and arguments, and its context, as
// it sent them; a call whose context or shape differs starts a new run,
// which sends its context again.
func TestGroupCommitContexts(t *testing.T) {
	e := newGroupEnv(t, 0)
	b1, b2, i1, i2 := "B", "B", int64(5), int64(5)
	type call struct {
		keys []string
		args []any
	}
	calls := []call{
		{[]string{"k0", "P", "Q"}, []any{"a0", "A"}},
		{[]string{"k1", "P", "Q"}, []any{"a1", "A"}},        // joins
		{[]string{"k2", "P", "Q"}, []any{"a2", &b1}},        // another context
		{[]string{"k3", "P", "Q"}, []any{"a3", "a3b", "B"}}, // another shape
		{[]string{"k4", "P", "Q"}, []any{"a4", "a4b", &b2}}, // joins: "B" however boxed
		{[]string{"k5"}, []any{"a5"}},                       // no context
		{[]string{"k6"}, nil},                               // another shape
		{[]string{"k7", "P", "R"}, []any{"a7", &i1}},        // another context
		{[]string{"k8", "P", "R"}, []any{"a8", int64(5)}},   // joins
		{[]string{"k9", "P", "R"}, []any{"a9", &i2}},        // joins
		{[]string{"k10", "P", "Q"}, []any{"a10", "A"}},      // the first context again: a run of its own
	}
	gcs := make([]*groupCall, len(calls))
	for i, c := range calls {
		gcs[i] = newGroupCall(groupContextScript, c.keys, c.args)
	}
	token := e.inv.topology(e.ctx).token
	warm := newGroupCall(groupContextScript, []string{"w"}, nil) // loads its function
	e.inv.sendGroup(e.ctx, e.n, groupContextScript, token, []*groupCall{warm})
	if warm.err != nil {
		t.Fatal(warm.err)
	}
	e.sent.wordsOf(groupContextScript)
	e.inv.sendGroup(e.ctx, e.n, groupContextScript, token, gcs)
	for i, c := range calls {
		gc := gcs[i]
		if gc.err != nil {
			t.Fatalf("call %d: %v", i, gc.err)
		}
		ck, ca := 0, 0
		if len(c.keys) >= 2 {
			ck, ca = 2, 1
		}
		want := []any{int64(1 + len(c.keys) - ck), int64(3 + len(c.args) - ca), int64(ck), int64(ca)}
		for _, k := range c.keys[:len(c.keys)-ck] {
			want = append(want, k)
		}
		for _, a := range c.args[:len(c.args)-ca] {
			want = append(want, fmt.Sprint(a))
		}
		for _, k := range c.keys[len(c.keys)-ck:] {
			want = append(want, k)
		}
		for _, a := range c.args[len(c.args)-ca:] {
			s, ok := argAs[string](a)
			if n, isInt := argAs[int64](a); isInt {
				s, ok = strconv.FormatInt(n, 10), true
			}
			if !ok {
				t.Fatalf("call %d: argument %v", i, a)
			}
			want = append(want, s)
		}
		if got, _ := gc.reply.([]any); !slices.Equal(got, want) {
			t.Errorf("call %d saw %v, want %v", i, gc.reply, want)
		}
	}
	// runs: k0 k1 | k2 | k3 k4 | k5 | k6 | k7 k8 k9 | k10, each context
	// once: FCALL, its name, the key count; the stamp and 21 keys; the
	// header's 4 arguments and 17
	if got, want := e.sent.wordsOf(groupContextScript), 3+1+21+4+17; got != want {
		t.Errorf("the group's command line held %d words, want %d (each run's context once)", got, want)
	}
}

// TestAppendGroupCounts: the calls' counts go in runs of calls of one
// shape and one context, eleven bytes each (own key count, own argument
// count, calls: three bytes each, high byte first; the context's key and
// argument counts: a byte each; epilogue_group.lua reads them so), up to
// maxGroupCount calls a run; a call joins the last run only when its
// context is the same (same), else its run sends the context again; a
// count over the bounds is a bug of the caller and panics rather than
// wrap.
func TestAppendGroupCounts(t *testing.T) {
	var joins []bool
	add := func(b []byte, nk, na, ck, ca int, same bool) []byte {
		b, j := appendGroupCounts(b, nk, na, ck, ca, same)
		joins = append(joins, j)
		return b
	}
	b := add(nil, 0, 1, 0, 0, false)
	b = add(b, 0x123456, maxGroupCount, 0, 0, true)
	b = add(b, 0x123456, maxGroupCount, 0, 0, true)
	b = add(b, 0x123456, maxGroupCount, 0, 0, true)
	b = add(b, 0, 1, 0, 0, true)
	b = add(b, 1, 2, 2, 3, true)  // a context: a new run (its counts differ)
	b = add(b, 1, 2, 2, 3, true)  // the same context: joins
	b = add(b, 1, 2, 2, 3, false) // another context of the same counts: a new run
	want := []byte{0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0,
		0x12, 0x34, 0x56, 0xff, 0xff, 0xff, 0, 0, 3, 0, 0,
		0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0,
		0, 0, 1, 0, 0, 2, 0, 0, 2, 2, 3,
		0, 0, 1, 0, 0, 2, 0, 0, 1, 2, 3}
	if string(b) != string(want) || len(b) != 5*groupRunSize {
		t.Fatalf("appendGroupCounts = % x, want % x", b, want)
	}
	if wantJ := []bool{false, false, true, true, false, false, true, false}; !slices.Equal(joins, wantJ) {
		t.Fatalf("appendGroupCounts joined %v, want %v", joins, wantJ)
	}
	// a run full at maxGroupCount calls starts another
	full := []byte{0, 0, 3, 0, 0, 6, 0xff, 0xff, 0xff, 1, 1}
	if got, j := appendGroupCounts(slices.Clone(full), 3, 6, 1, 1, true); j || string(got) != string(append(slices.Clone(full), 0, 0, 3, 0, 0, 6, 0, 0, 1, 1, 1)) {
		t.Fatalf("appendGroupCounts on a full run = % x (joined %v)", got, j)
	}
	for _, c := range [][4]int{{maxGroupCount + 1, 0, 0, 0}, {0, maxGroupCount + 1, 0, 0}, {-1, 0, 0, 0}, {0, 0, maxContext + 1, 0}, {0, 0, 0, maxContext + 1}, {0, 0, -1, 0}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("appendGroupCounts(%v) did not panic", c)
				}
			}()
			appendGroupCounts(nil, c[0], c[1], c[2], c[3], false)
		}()
	}
}

// TestArgEqual: arguments are equal when they are sure to be written as
// the same bytes; any pair argEqual does not know is unequal.
func TestArgEqual(t *testing.T) {
	s1, s2, i1, i2 := "a", "a", int64(7), int64(7)
	for _, c := range []struct {
		a, b any
		want bool
	}{
		{"a", "a", true}, {&s1, "a", true}, {"a", &s2, true}, {&s1, &s2, true}, {"a", "b", false},
		{int64(7), int64(7), true}, {&i1, &i2, true}, {&i1, int64(7), true}, {int64(7), int64(8), false},
		{"7", int64(7), false}, {int64(7), "7", false}, {7, 7, false}, {[]byte("a"), "a", false}, {nil, nil, false},
	} {
		if got := argEqual(c.a, c.b); got != c.want {
			t.Errorf("argEqual(%#v, %#v) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

// groupRepliesBody replies a value of the kind its last argument names.
const groupRepliesBody = `
local k = ARGV[#ARGV]
if k == 'list' then return {1, 'two', false, {3, 'four', {5}}, redis.error_reply('INNER refused')} end
if k == 'hole' then return {1, nil, 3} end
if k == 'empty' then return {} end
if k == 'int' then return 7 end
if k == 'zero' then return 0 end
if k == 'true' then return true end
if k == 'string' then return 'str' end
if k == 'false' then return false end
if k == 'err' then return redis.error_reply('SHARDIS_TEST refused') end
if k == 'status' then return redis.status_reply('FINE') end
if k == 'raise' then return redis.call('INCR', 'x', 'y') end
return {k, 1}
`

var groupRepliesScript = newGroupedScript("group-replies", false, groupRepliesBody)

// TestGroupCommitRepliesAsALoneCall: the group's replies travel flat
// (epilogue_group.lua, replyReader.replies) and each call still gets what
// Redis answers the same body run as a lone script: lists (with nil,
// nested lists and errors inside, cut at a hole, empty), integers
// (0 among them, and true), strings, nil, error and status replies, in one
// group with calls of every kind between them.
func TestGroupCommitRepliesAsALoneCall(t *testing.T) {
	e := newGroupEnv(t, 0)
	kinds := []string{"list", "int", "hole", "empty", "zero", "true", "string", "false", "err", "status", "raise", "other", "list", "int"}
	lone := redis.NewScript(groupRepliesBody)
	e.pause(t, 300*time.Millisecond)
	type result struct {
		v   any
		err error
	}
	got := make([]result, len(kinds))
	var wg sync.WaitGroup
	for i, k := range kinds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := e.inv.run(e.ctx, e.n, groupRepliesScript, []string{"x"}, k)
			got[i] = result{v, err}
		}()
	}
	wg.Wait()
	if n := e.sent.of(groupRepliesScript); n >= len(kinds) {
		t.Errorf("%d calls on a paused node ran as %d script calls: not grouped", len(kinds), n)
	}
	for i, k := range kinds {
		want, werr := lone.Run(e.ctx, e.admin, []string{"x"}, k).Result()
		if errors.Is(werr, redis.Nil) {
			want, werr = nil, nil // a lone call's nil reply; the group hands it as a nil value
		}
		g := got[i]
		if fmt.Sprint(werr) != fmt.Sprint(g.err) {
			// a raised error names the lone script's SHA and line; the group's
			// (the body's pcall) carries the same message before that
			w, _, _ := strings.Cut(fmt.Sprint(werr), " script: ")
			if werr == nil || g.err == nil || !strings.Contains(g.err.Error(), w) {
				t.Errorf("%s: error %v, a lone call's %v", k, g.err, werr)
			}
			continue
		}
		if fmt.Sprintf("%#v", g.v) != fmt.Sprintf("%#v", want) {
			t.Errorf("%s: reply %#v, a lone call's %#v", k, g.v, want)
		}
	}
}
