package tests

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/health"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/internal/syncbuf"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/rollback"
	"github.com/shardis/shardis/router"
)

// hostileHealth notices refused connections and error replies within a
// few hundred milliseconds but gives a probe 1s, so a loaded machine
// (-race, parallel tests) does not mark live nodes DOWN.
var hostileHealth = config.Health{
	Heartbeat: 100 * time.Millisecond,
	Timeout:   time.Second,
	Backoff:   []time.Duration{100 * time.Millisecond, 200 * time.Millisecond},
}

// hostileEnv is a router, an inventory (route "r" over every node) and a
// running reconciler over nodes that may misbehave. Logs go to a buffer
// (JSON, debug level), printed when the test fails.
type hostileEnv struct {
	t     testing.TB
	ctx   context.Context
	r     *router.Router
	inv   *inventory.Inventory
	rec   *rollback.Reconciler
	homes *router.Ring
	logs  *syncbuf.Buffer
}

func hostileStart(t testing.TB, nodes map[string]config.Node, h config.Health) *hostileEnv {
	t.Helper()
	cfg := config.Default()
	cfg.Nodes = nodes
	var names []string
	for name := range nodes {
		names = append(names, name)
	}
	sort.Strings(names)
	// Besides "r" over every node, "only-<name>" keeps a SKU's stock on one
	// node, so an order can have its part there and its record elsewhere
	// (items go to the order's home node first when their route has it).
	routes := map[string][]string{"r": names}
	for _, name := range names {
		routes["only-"+name] = []string{name}
	}
	cfg.Servers = map[string]config.Server{invServer: {OnNodeDown: config.OnNodeDownFail, Routes: routes}}
	cfg.Health = h
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	log, logs := secLogger()
	e := &hostileEnv{t: t, ctx: invCtx(t, 30*time.Second), logs: logs, homes: hostileRing(t, names)}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("captured logs:\n%s", logs)
		}
	})
	var rec atomic.Pointer[rollback.Reconciler]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var err error
	e.r, err = router.New(ctx, &cfg, router.Options{KeepData: cfg.KeepData(), Logger: log, OnStateChange: func(ev health.Event) {
		if p := rec.Load(); ev.Up && p != nil {
			p.NodeUp(ev.Target)
		}
	}})
	if err != nil {
		t.Fatalf("router.New: %v", err)
	}
	t.Cleanup(func() { _ = e.r.Close() })
	q := rollback.NewQueue()
	if e.inv, err = inventory.New(e.r, inventory.Options{Deferrer: q, Logger: log, AttemptLease: time.Second}); err != nil {
		t.Fatalf("inventory.New: %v", err)
	}
	e.rec = rollback.New(e.inv, q, rollback.Settings{Interval: 100 * time.Millisecond, Logger: log})
	rec.Store(e.rec)
	e.rec.Start()
	t.Cleanup(e.rec.Close)
	return e
}

// hostileRedis starts a real redis-server and returns it with its
// configuration entry.
func hostileRedis(t testing.TB, opts redistest.Options) (*redistest.Server, config.Node) {
	t.Helper()
	s := redistest.Start(t, opts)
	return s, config.Node{Addr: s.Addr(), Weight: 1}
}

// hostileNodes starts one redis-server per name, all with opts, and
// returns their configuration entries and direct clients.
func hostileNodes(t testing.TB, opts redistest.Options, names ...string) (map[string]config.Node, map[string]*redis.Client) {
	t.Helper()
	nodes, direct := map[string]config.Node{}, map[string]*redis.Client{}
	for _, name := range names {
		var s *redistest.Server
		s, nodes[name] = hostileRedis(t, opts)
		direct[name] = s.Client(t)
	}
	return nodes, direct
}

func (e *hostileEnv) status(name string) router.NodeStatus { return status(e.t, e.r, name) }

// wait waits up to 3s until node name has state want and, if DOWN, a
// reason mentioning every fragment (a probe on a loaded machine may fail
// for another reason first), and returns its status.
func (e *hostileEnv) wait(name string, want node.State, fragments ...string) router.NodeStatus {
	e.t.Helper()
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		st := e.status(name)
		ok := st.State == want
		for _, f := range fragments {
			ok = ok && st.DownReason != nil && strings.Contains(st.DownReason.Error(), f)
		}
		if ok {
			e.t.Logf("node %s %v: %v", name, st.State, st.DownReason)
			return st
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("node %s: %v (reason %v), want %v mentioning %q", name, st.State, st.DownReason, want, fragments)
		}
	}
}

// order returns the first order id "prefix-i" whose sku is taken from
// node first ("" = any, "!x" = any but x) and whose record lives on node
// home (same notation).
func (e *hostileEnv) order(prefix, sku, first, home string) string {
	e.t.Helper()
	set, err := e.r.Set(invServer, "r")
	if err != nil {
		e.t.Fatal(err)
	}
	match := func(want, got string) bool {
		if strings.HasPrefix(want, "!") {
			return got != want[1:]
		}
		return want == "" || want == got
	}
	for i := 0; i < 100000; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		h := e.homes.Name(e.homes.Home("order:" + id))
		f := set.Candidates(id + sku)[0].Name()
		for _, n := range set.Nodes() {
			if n.Name() == h {
				f = h // the home node is offered every item first
			}
		}
		if match(first, f) && match(home, h) {
			return id
		}
	}
	e.t.Fatalf("no order id %s-* with first %s and home %s", prefix, first, home)
	return ""
}

// reserve reserves qty of sku (route r) for order id.
func (e *hostileEnv) reserve(id, sku string, qty int64) error {
	return e.reserveOn("r", id, sku, qty)
}

// reserveOn reserves qty of route's sku for order id.
func (e *hostileEnv) reserveOn(route, id, sku string, qty int64) error {
	_, err := e.inv.Reserve(e.ctx, id, []inventory.Item{invItem(route, sku, qty)}, "", time.Minute)
	return err
}

// must fails the test if err is not nil.
func (e *hostileEnv) must(what string, err error) {
	e.t.Helper()
	if err != nil {
		e.t.Fatalf("%s: %v", what, err)
	}
}

func (e *hostileEnv) load(sku string, qty int64) {
	e.t.Helper()
	e.loadOn("r", sku, qty)
}

func (e *hostileEnv) loadOn(route, sku string, qty int64) {
	e.t.Helper()
	_, err := e.inv.LoadStock(e.ctx, route, sku, qty, 0)
	e.must("LoadStock "+route+"/"+sku, err)
}

func (e *hostileEnv) cancel(id string) inventory.Outcome {
	e.t.Helper()
	out, err := e.inv.Cancel(e.ctx, id)
	e.must("Cancel "+id, err)
	return out
}

// TestHostileCorruptValues: values written by hand into a node's keys — a
// stock counter that is not a number, a stock key of the wrong type, a
// stamp that is not a hash — are refused with errors naming the node;
// nothing is written, other nodes and SKUs are untouched, the node is not
// marked for reply errors, and repairing the value makes everything work.
func TestHostileCorruptValues(t *testing.T) {
	t.Parallel()
	const bad, loaded = "n2", 30
	nodes, direct := hostileNodes(t, redistest.Options{}, "n1", bad, "n3")
	e := hostileStart(t, nodes, hostileHealth)
	ctx := e.ctx
	for _, sku := range []string{"cv", "wt", "ok"} {
		e.load(sku, loaded)
	}
	same := func(before map[string]string) {
		t.Helper()
		if after := hostileSnap(direct, "cv", "wt", "ok"); !reflect.DeepEqual(after, before) {
			t.Fatalf("failed reserves changed stock:\nbefore %v\nafter  %v", before, after)
		}
	}

	direct[bad].HSet(ctx, "inv:stock:r:cv", "available", "ten")
	before := hostileSnap(direct, "cv", "wt", "ok")
	_, err := e.inv.GetStock(ctx, "r", "cv")
	hostileWantErr(t, "GetStock of a hand-edited counter", err, inventory.ErrCorrupt, "node "+bad, "ten")
	err = e.reserve(e.order("cv-a", "cv", bad, ""), "cv", 2)
	hostileWantErr(t, "Reserve from the corrupt node first", err, inventory.ErrCorrupt, "node "+bad)
	err = e.reserve(e.order("cv-b", "cv", "!"+bad, ""), "cv", loaded)
	hostileWantErr(t, "Reserve reaching the corrupt node in a later round", err, inventory.ErrCorrupt, "node "+bad)
	same(before)

	// A stock key replaced by a string: the node's WRONGTYPE reply.
	direct[bad].Del(ctx, "inv:stock:r:wt")
	direct[bad].Set(ctx, "inv:stock:r:wt", "gone", 0)
	before = hostileSnap(direct, "cv", "wt", "ok")
	err = e.reserve(e.order("wt-a", "wt", bad, ""), "wt", 2)
	hostileWantErr(t, "Reserve from a wrong-type stock key", err, nil, "node "+bad, "WRONGTYPE")
	lvl, err := e.inv.GetStock(ctx, "r", "wt")
	if err != nil && !(errors.Is(err, inventory.ErrCorrupt) && strings.Contains(err.Error(), "node "+bad)) {
		t.Fatalf("GetStock of a wrong-type key: %v", err)
	}
	for _, ns := range lvl.Nodes {
		if ns.Reachable == (ns.Node == bad) {
			t.Fatalf("GetStock of a wrong-type key: %+v, want only node %s flagged", ns, bad)
		}
	}
	same(before)
	// The node serves other SKUs all along and is neither DOWN nor tripped.
	e.must("Reserve of a healthy SKU", e.reserve("ok-1", "ok", loaded))
	if st := e.status(bad); st.State != node.StateUp || st.Breaker != "closed" {
		t.Fatalf("node %s after reply errors: %v breaker %s, want up/closed", bad, st.State, st.Breaker)
	}

	// A stamp overwritten with a string: the probe fails, the node is DOWN.
	inc := e.status(bad).Incarnation
	direct[bad].Del(ctx, node.StampKey)
	direct[bad].Set(ctx, node.StampKey, "who knows", 0)
	e.wait(bad, node.StateDown, "node "+bad, "WRONGTYPE")

	// Repairs: the counter, the key, the stamp. A deleted stamp looks like
	// a node that restarted empty: its peers witnessed it, so it is refused
	// (not re-stamped) until an operator accepts it, which gives it a new
	// incarnation.
	direct[bad].HSet(ctx, "inv:stock:r:cv", "available", "10")
	direct[bad].Del(ctx, "inv:stock:r:wt", node.StampKey)
	e.wait(bad, node.StateDown, "node lost its data", "shardis node accept "+bad)
	if _, err := e.r.AcceptNode(ctx, bad); err != nil {
		t.Fatalf("AcceptNode(%s): %v", bad, err)
	}
	e.wait(bad, node.StateUp)
	if e.status(bad).Incarnation == inc || !strings.Contains(e.logs.String(), "node data accepted") {
		t.Fatalf("accept: incarnation %s → %s; want a new one and a log line", inc, e.status(bad).Incarnation)
	}
	e.must("Reserve after the repair", e.reserve("cv-fixed", "cv", loaded))
	e.cancel("cv-fixed")
	e.cancel("ok-1")
	hostileInvariant(t, e.inv, "cv", loaded)
	hostileInvariant(t, e.inv, "ok", loaded)
	if lvl := hostileInvariant(t, e.inv, "wt", loaded-10); lvl.Available != loaded-10 {
		t.Fatalf("wt after repair: %+v", lvl)
	}
}

// TestHostileNotRedis: ports where something that is not Redis answers
// are DOWN, with a reason naming the node, its address and the problem;
// the real nodes serve, nothing is loaded onto or taken from the
// impostors, and they are never stamped.
func TestHostileNotRedis(t *testing.T) {
	t.Parallel()
	nodes, _ := hostileNodes(t, redistest.Options{}, "n1", "n2")
	want := map[string]string{"http": "HTTP/1.1 400 Bad Request", "silent": "timeout", "liar": `"+OK"`}
	var fakes []string
	for f := range want {
		nodes[f] = config.Node{Addr: hostileFake(t, f), Weight: 1}
		fakes = append(fakes, f)
	}
	e := hostileStart(t, nodes, hostileHealth)
	requireState(t, e.r, node.StateUp, "n1", "n2")
	for _, f := range fakes {
		e.wait(f, node.StateDown, "node "+f+" ("+nodes[f].Addr+")", "probe", want[f])
	}
	const loaded = 20
	e.load("nr", loaded)
	ok := e.order("nr-ok", "nr", "", "n1")
	e.must("Reserve over the real nodes", e.reserve(ok, "nr", loaded))
	for _, f := range fakes {
		err := e.reserve(e.order("nr-"+f, "nr", "", f), "nr", 1)
		hostileWantErr(t, "Reserve of an order homed on "+f, err, inventory.ErrUnavailable, "node "+f)
	}
	_, err := e.inv.Confirm(e.ctx, ok)
	e.must("Confirm", err)
	if lvl := hostileInvariant(t, e.inv, "nr", loaded, fakes...); lvl.Confirmed != loaded {
		t.Fatalf("stock %+v, want all %d confirmed", lvl, loaded)
	}
	for _, f := range fakes {
		if st := e.status(f); st.State != node.StateDown || st.Incarnation != "" {
			t.Fatalf("impostor %s: %+v, want DOWN and never stamped", f, st)
		}
	}
}

// TestHostileOutOfMemory: a node at maxmemory (noeviction) answers writes
// with an OOM error reply. Shardis does not mark it: the node answers, its
// probe (a read once stamped) passes, its breaker stays closed. Reserves
// that need it fail cleanly naming the node and OOM, with nothing
// half-applied or held (also for an order homed on it: its record cannot
// be begun); a cancel settles its part there while it is full.
func TestHostileOutOfMemory(t *testing.T) {
	t.Parallel()
	const full, loaded = "n3", 30
	nodes, direct := hostileNodes(t, redistest.Options{Args: []string{"--maxmemory-policy", "noeviction"}}, "n1", "n2", full)
	e := hostileStart(t, nodes, hostileHealth)
	ctx, fc := e.ctx, direct[full]
	e.load("om", loaded)
	// om3's stock is on the full node only: its orders below have their
	// part there and their record on a healthy home.
	pinned := "only-" + full
	e.loadOn(pinned, "om3", loaded)
	held := e.order("om-held", "om", "", "!"+full)
	e.must("Reserve", e.reserveOn(pinned, held, "om3", 2))

	// Fill the node: maxmemory 1 MiB above what it uses, then 64 KiB values
	// until it refuses one. Then lower maxmemory to 90 % of what it uses,
	// so it stays over its limit whatever a few client buffers do.
	used := func() (n int64) {
		fmt.Sscan(fc.InfoMap(ctx, "memory").Val()["Memory"]["used_memory"], &n)
		return n
	}
	e.must("CONFIG SET", fc.ConfigSet(ctx, "maxmemory", fmt.Sprint(used()+1<<20)).Err())
	for i := 0; ; i++ {
		err := fc.Set(ctx, fmt.Sprintf("hostile:fill:%d", i), strings.Repeat("x", 64<<10), 0).Err()
		if err != nil && strings.HasPrefix(err.Error(), "OOM") {
			t.Logf("node %s full after %d values: %v", full, i, err)
			break
		}
		if err != nil || i > 1000 {
			t.Fatalf("filling %s: %v after %d values", full, err, i)
		}
	}
	e.must("CONFIG SET", fc.ConfigSet(ctx, "maxmemory", fmt.Sprint(used()*9/10)).Err())

	before := hostileSnap(direct, "om", pinned+":om3")
	err := e.reserveOn(pinned, e.order("om-b", "om", "", "!"+full), "om3", 2)
	hostileWantErr(t, "Reserve taking from the full node", err, inventory.ErrUnavailable, "node "+full, "OOM")
	err = e.reserve(e.order("om-c", "om", "", full), "om", 2)
	hostileWantErr(t, "Reserve of an order homed on the full node", err, inventory.ErrUnavailable, "node "+full, "OOM")
	if after := hostileSnap(direct, "om", pinned+":om3"); !reflect.DeepEqual(after, before) {
		t.Fatalf("failed reserves changed stock:\nbefore %v\nafter  %v", before, after)
	}
	time.Sleep(3 * hostileHealth.Heartbeat) // a few probes of the full node
	if st := e.status(full); st.State != node.StateUp || st.Breaker != "closed" {
		t.Fatalf("full node: %v breaker %s (%v), want up/closed: OOM is a reply, not a node failure", st.State, st.Breaker, st.DownReason)
	}

	// Cancel of the held order is decided on its (healthy) home; its part
	// on the full node is settled there at once: a settle only releases
	// what the node holds, so it runs on a full node (inventory/oom.go).
	if out := e.cancel(held); out.Status != inventory.StatusCancelled || out.PendingParts != 0 {
		t.Fatalf("Cancel %s while %s is full: %+v, want cancelled with its part there settled", held, full, out)
	}
	if lvl := hostileInvariantOn(t, e.inv, pinned, "om3", loaded); lvl.Reserved != 0 {
		t.Fatalf("stock %+v, want the 2 units returned while the node is full", lvl)
	}
	if err := fc.Set(ctx, "hostile:probe", "x", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "OOM") {
		t.Fatalf("node %s accepts writes (%v): the test did not keep it full", full, err)
	}
	e.must("CONFIG SET", fc.ConfigSet(ctx, "maxmemory", "0").Err())
	retry := e.order("om-b", "om", "", "!"+full)
	e.must("Reserve retried after memory was freed", e.reserveOn(pinned, retry, "om3", 2))
	e.cancel(retry)
	checkNoPending(t, direct, nil)
	if lvl := hostileInvariant(t, e.inv, "om", loaded); lvl.Available != loaded {
		t.Fatalf("final stock %+v, want all %d available", lvl, loaded)
	}
	if lvl := hostileInvariantOn(t, e.inv, pinned, "om3", loaded); lvl.Available != loaded {
		t.Fatalf("final stock of om3 %+v, want all %d available", lvl, loaded)
	}
}

// TestHostileSlowNode: a node that stops answering for 4s (DEBUG SLEEP
// from another client blocks the server) makes commands on it time out;
// the health check marks it DOWN naming the node, other nodes keep
// serving, and once it answers again it is UP and whatever the sleeping
// node ran late is rolled back: nothing is lost or oversold.
func TestHostileSlowNode(t *testing.T) {
	t.Parallel()
	const slow, loaded = "n3", 30
	nodes, direct := hostileNodes(t, redistest.Options{Args: []string{"--enable-debug-command", "local"}}, "n1", "n2", slow)
	// A slower heartbeat, so the node is still UP when the reserve reaches
	// it, and a probe timeout (500ms) well inside the 4s sleep.
	h := hostileHealth
	h.Heartbeat, h.Timeout = 300*time.Millisecond, 500*time.Millisecond
	e := hostileStart(t, nodes, h)
	ctx := e.ctx
	e.load("sl", loaded)
	e.must("Reserve", e.reserve("sl-conf", "sl", 3))
	_, err := e.inv.Confirm(ctx, "sl-conf")
	e.must("Confirm", err)
	// sl3's stock is on the slow node only: oa has its part there and its
	// record on a healthy home; ob avoids the slow node.
	pinned := "only-" + slow
	e.loadOn(pinned, "sl3", loaded)
	oa := e.order("sl-a", "sl", "", "!"+slow)
	ob := e.order("sl-b", "sl", "!"+slow, "!"+slow)

	sleeper := redis.NewClient(&redis.Options{Addr: nodes[slow].Addr, ReadTimeout: 8 * time.Second})
	defer sleeper.Close()
	slept := make(chan error, 1)
	go func() { slept <- sleeper.Do(context.Background(), "DEBUG", "SLEEP", "4").Err() }()
	pinger := redis.NewClient(&redis.Options{Addr: nodes[slow].Addr, ReadTimeout: 50 * time.Millisecond, MaxRetries: -1})
	defer pinger.Close()
	for pinger.Ping(ctx).Err() == nil { // until the server is blocked
		time.Sleep(5 * time.Millisecond)
	}

	start := time.Now()
	err = e.reserveOn(pinned, oa, "sl3", 2)
	hostileWantErr(t, "Reserve on the sleeping node", err, inventory.ErrUnavailable, "node "+slow, "timeout")
	// Waiting out the sleep would take up to 4s; the timeout is 1s, and a
	// loaded machine's -race run adds its overhead to that.
	if took := time.Since(start); took > 2500*time.Millisecond {
		t.Fatalf("Reserve on the sleeping node took %v, want the 1s command timeout", took)
	}
	e.wait(slow, node.StateDown, "node "+slow, "timeout")
	e.must("Reserve avoiding the sleeping node", e.reserve(ob, "sl", 2))
	lvl, err := e.inv.GetStock(ctx, "r", "sl")
	for _, ns := range lvl.Nodes {
		if err != nil || ns.Reachable == (ns.Node == slow) {
			t.Fatalf("GetStock while %s sleeps: %v / %+v, want only it flagged", slow, err, ns)
		}
	}

	e.must("DEBUG SLEEP", <-slept)
	e.wait(slow, node.StateUp)
	invWaitNoPending(t, direct, []string{oa}, 5*time.Second)
	if _, err := e.inv.Confirm(ctx, oa); !errors.Is(err, inventory.ErrNotFound) {
		t.Fatalf("Confirm of the timed-out order: %v, want ErrNotFound (its reservation failed)", err)
	}
	e.cancel(ob)
	checkNoPending(t, direct, nil)
	if lvl := hostileInvariant(t, e.inv, "sl", loaded); lvl.Confirmed != 3 || lvl.Available != loaded-3 {
		t.Fatalf("final stock %+v, want 3 confirmed and the rest available", lvl)
	}
	if lvl := hostileInvariantOn(t, e.inv, pinned, "sl3", loaded); lvl.Available != loaded {
		t.Fatalf("final stock of sl3 %+v, want all %d available", lvl, loaded)
	}
}
