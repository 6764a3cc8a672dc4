package inventory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
)

// Refusals without a write (soldout.go) against real nodes: a sold-out
// SKU refuses distinct orders leaving every node's keys and redo queues
// as they were, whichever path the order's home node puts it on.

type soldOutEnv struct {
	t       *testing.T
	ctx     context.Context
	r       *router.Router
	inv     *Inventory
	clients map[string]*redis.Client
}

// Routes a, b, c live on one node each; "all" spans the three nodes.
func newSoldOutEnv(t *testing.T) *soldOutEnv {
	srvs := redistest.StartN(t, 3, redistest.Options{})
	cfg := envConfig()
	// the tests count the keys a refusal leaves: a command that times out
	// (1 s by default, reached on a busy machine) leaves a fence for the
	// take whose outcome it lost, one key more than the refusal itself
	cfg.Client.CommandTimeout = 10 * time.Second
	cfg.Nodes = map[string]config.Node{}
	e := &soldOutEnv{t: t, clients: map[string]*redis.Client{}}
	for i, s := range srvs {
		name := fmt.Sprintf("n%d", i+1)
		cfg.Nodes[name] = config.Node{Addr: s.Addr(), Weight: 1}
		e.clients[name] = s.Client(t)
	}
	cfg.Servers = map[string]config.Server{"inventory": {OnNodeDown: config.OnNodeDownFail,
		Routes: map[string][]string{"a": {"n1"}, "b": {"n2"}, "c": {"n3"}, "all": {"n1", "n2", "n3"}}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	e.ctx = ctx
	r, err := router.New(ctx, &cfg, router.Options{KeepData: cfg.KeepData(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	e.r = r
	t.Cleanup(func() { _ = r.Close() })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		up := 0
		for _, n := range r.Nodes() {
			if n.Usable() {
				up++
			}
		}
		if up == len(srvs) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d nodes up after 10s", up, len(srvs))
		}
	}
	e.inv = e.newInv()
	return e
}

// newInv is another instance over the same nodes (its own hint).
func (e *soldOutEnv) newInv() *Inventory {
	inv, err := New(e.r, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(inv.Close)
	return inv
}

// loadHeld loads 3 units of all/held (1 on each node) and reserves 2 of
// them, unconfirmed, with two 1-unit orders: an order of 2 is then short
// only by holds.
func (e *soldOutEnv) loadHeld() {
	e.t.Helper()
	e.load("all", "held", 3)
	for i := range 2 {
		if _, err := e.inv.Reserve(e.ctx, fmt.Sprintf("holder-%d", i), []Item{{Route: "all", SKU: "held", Quantity: 1}}, "", time.Minute); err != nil {
			e.t.Fatal(err)
		}
	}
}

// keysNoRedo compares the nodes with before: it fails the test for every
// node whose redo entries changed (what names the orders, as in "orders …
// left redo entries") and returns the keys added over all nodes.
func (e *soldOutEnv) keysNoRedo(before map[string]nodeState, what string) int64 {
	e.t.Helper()
	after := e.state()
	keys := int64(0)
	for name, st := range after {
		if st.redo != before[name].redo {
			e.t.Errorf("%s left redo entries on %s: before %v, after %v", what, name, before, after)
		}
		keys += st.keys - before[name].keys
	}
	return keys
}

// nodeState is what a refusal must leave unchanged on one node: its key
// count (but the witness marks' hash, which the router writes on its
// heartbeat after any node's writes, whenever that falls: node/witness.go)
// and the entries of its redo queues.
type nodeState struct{ keys, redo int64 }

func (e *soldOutEnv) state() map[string]nodeState {
	e.t.Helper()
	out := map[string]nodeState{}
	for name, c := range e.clients {
		n, err := c.DBSize(e.ctx).Result()
		if err != nil {
			e.t.Fatal(err)
		}
		w, err := c.Exists(e.ctx, node.WitnessKey).Result()
		if err != nil {
			e.t.Fatal(err)
		}
		st := nodeState{keys: n - w}
		for q := range e.inv.cfg.RedoQueues {
			st.redo += int64(len(redoEntriesOn(e.t, e.ctx, c, q)))
		}
		out[name] = st
	}
	return out
}

func (e *soldOutEnv) load(route, sku string, qty int64) {
	e.t.Helper()
	if _, err := e.inv.LoadStock(e.ctx, route, sku, qty, 0); err != nil {
		e.t.Fatal(err)
	}
}

// sellOut reserves and confirms qty units of route/sku one order at a
// time.
func (e *soldOutEnv) sellOut(route, sku string, qty int) {
	e.t.Helper()
	for i := range qty {
		id := fmt.Sprintf("sell-%s-%s-%d", route, sku, i)
		if _, err := e.inv.Reserve(e.ctx, id, []Item{{Route: route, SKU: sku, Quantity: 1}}, "", time.Minute); err != nil {
			e.t.Fatal(err)
		}
		if _, err := e.inv.Confirm(e.ctx, id); err != nil {
			e.t.Fatal(err)
		}
	}
}

// refuseAll reserves each order with a fresh instance (no hint: the first
// refusal of a process) and then again, under another id, with e.inv (the
// hint of earlier refusals), and wants every one refused with want and the
// nodes' keys and redo queues unchanged.
func (e *soldOutEnv) refuseAll(prefix string, n int, items []Item, want error) {
	e.t.Helper()
	before := e.state()
	for i := range n {
		for j, inv := range []*Inventory{e.newInv(), e.inv} {
			id := fmt.Sprintf("%s-%d-%d", prefix, i, j)
			_, err := inv.Reserve(e.ctx, id, items, "", time.Minute)
			if !errors.Is(err, want) {
				e.t.Fatalf("order %s: got %v, want %v", id, err, want)
			}
		}
	}
	if after := e.state(); fmt.Sprint(after) != fmt.Sprint(before) {
		e.t.Fatalf("%d refused orders changed the nodes: keys and redo entries before %v, after %v", 2*n, before, after)
	}
}

// TestSoldOutRefusalWritesNothing: distinct 1-item orders of a sold-out
// SKU, on a one-node route (home node or not: the one-script and the
// one-round paths) and on a route over three nodes, leave DBSIZE and the
// redo queues unchanged on every node.
func TestSoldOutRefusalWritesNothing(t *testing.T) {
	t.Parallel() // its own nodes
	e := newSoldOutEnv(t)
	e.load("a", "hot", 3)
	e.sellOut("a", "hot", 3)
	e.load("all", "hot", 3)
	e.sellOut("all", "hot", 3)
	e.refuseAll("one-node", 12, []Item{{Route: "a", SKU: "hot", Quantity: 1}}, ErrInsufficientStock)
	e.refuseAll("three-nodes", 12, []Item{{Route: "all", SKU: "hot", Quantity: 1}}, ErrInsufficientStock)
}

// TestSoldOutMultiItemNoRedo: orders that could not be met — more units
// than the three nodes hold together (10+9+7 < 30), or one sold-out item
// among items in stock — take nothing: no redo entry, so nothing reaches
// PostgreSQL, and no key.
func TestSoldOutMultiItemNoRedo(t *testing.T) {
	e := newSoldOutEnv(t)
	e.load("all", "split", 26)
	e.load("all", "plenty", 100)
	e.load("a", "plenty", 100)
	e.load("b", "gone", 1)
	e.sellOut("b", "gone", 1)
	e.load("c", "plenty", 100)
	e.refuseAll("too-many", 6, []Item{{Route: "all", SKU: "plenty", Quantity: 1}, {Route: "all", SKU: "split", Quantity: 30}}, ErrInsufficientStock)
	// Items on three one-node routes: refused by the hint of the SKU's
	// earlier refusal (e.inv's), and by a fresh instance whose home node
	// holds the sold-out item (the one-script path's reply).
	// The hint must outlive the loop however slow the machine: an order
	// past it takes the general path and leaves its fence (soldout.go,
	// "What is left").
	e.inv.soldOut.ttl = time.Hour
	if _, err := e.inv.Reserve(e.ctx, "first-gone", []Item{{Route: "b", SKU: "gone", Quantity: 1}}, "", time.Minute); !errors.Is(err, ErrInsufficientStock) {
		t.Fatalf("got %v, want insufficient stock", err)
	}
	before := e.state()
	items := []Item{{Route: "a", SKU: "plenty", Quantity: 1}, {Route: "b", SKU: "gone", Quantity: 1}, {Route: "c", SKU: "plenty", Quantity: 1}}
	for i := range 10 {
		if _, err := e.inv.Reserve(e.ctx, fmt.Sprintf("mixed-%d", i), items, "", time.Minute); !errors.Is(err, ErrInsufficientStock) {
			t.Fatalf("got %v, want insufficient stock", err)
		}
	}
	if after := e.state(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("refused 3-item orders changed the nodes: before %v, after %v", before, after)
	}
	for _, sku := range []string{"split", "plenty"} {
		lvl, err := e.inv.GetStock(e.ctx, "all", sku)
		if err != nil {
			t.Fatal(err)
		}
		if lvl.Reserved != 0 {
			t.Fatalf("all/%s: %d units reserved after refusals only", sku, lvl.Reserved)
		}
	}
}

// TestSoldOutRefusalKeepsAnswers: a refusal by reads never answers for an
// order that has an attempt: a retry of an order reserved before the SKU
// sold out gets its receipts, an order id a Cancel tombstoned first is
// refused as cancelled, on an instance that saw the SKU short.
func TestSoldOutRefusalKeepsAnswers(t *testing.T) {
	e := newSoldOutEnv(t)
	e.load("all", "hot", 2)
	items := []Item{{Route: "all", SKU: "hot", Quantity: 2}}
	first, err := e.inv.Reserve(e.ctx, "winner", items, "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.inv.Reserve(e.ctx, "loser", items, "", time.Minute); !errors.Is(err, ErrInsufficientStock) {
		t.Fatalf("got %v, want insufficient stock", err)
	}
	again, err := e.inv.Reserve(e.ctx, "winner", items, "", time.Minute)
	if err != nil || fmt.Sprint(again.Receipts) != fmt.Sprint(first.Receipts) {
		t.Fatalf("retry of the reserved order: %v %v, want %v", again.Receipts, err, first.Receipts)
	}
	if _, err := e.inv.Cancel(e.ctx, "tombstoned"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.inv.Reserve(e.ctx, "tombstoned", items, "", time.Minute); !errors.Is(err, ErrCancelled) {
		t.Fatalf("order cancelled first: got %v, want cancelled", err)
	}
}

// TestLimitBeforeShortStock: an order of a user that wants more of a SKU
// than its per-user limit, and more than its stock, is refused with
// ErrLimitExceeded whichever path its home node puts it on: the general
// and one-round paths refuse its quota part whatever the stock, and the
// read-only refusal (refuseShort) answers the same (it answered
// ErrInsufficientStock for some ids, found by FuzzScriptArgs). The
// refusals leave the nodes as they were: where the quota part and the
// stock share a node (the one-node route; on the one-round path the take
// and the quota part are one call), the call takes nothing once its quota
// part is over the limit, and the stage is withdrawn.
func TestLimitBeforeShortStock(t *testing.T) {
	t.Parallel() // its own nodes
	e := newSoldOutEnv(t)
	for _, route := range []string{"a", "all"} {
		if _, err := e.inv.LoadStock(e.ctx, route, "lim", 50, 5); err != nil {
			t.Fatal(err)
		}
	}
	before := e.state()
	for _, route := range []string{"a", "all"} {
		for i := range 24 {
			for j, inv := range []*Inventory{e.newInv(), e.inv} {
				id := fmt.Sprintf("lim-%s-%d-%d", route, i, j)
				_, err := inv.Reserve(e.ctx, id, []Item{{Route: route, SKU: "lim", Quantity: 96}}, "u", time.Minute)
				if !errors.Is(err, ErrLimitExceeded) {
					t.Fatalf("order %s (route %s, 96 of a SKU with 50 units, limit 5): %v, want ErrLimitExceeded", id, route, err)
				}
			}
		}
	}
	if after := e.state(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("refused orders changed the nodes: keys and redo entries before %v, after %v", before, after)
	}

	// within the limit alone, over it with what the user holds: the
	// quota part refuses on its node, and the stock part in the same call
	// takes nothing
	if _, err := e.inv.Reserve(e.ctx, "held", []Item{{Route: "a", SKU: "lim", Quantity: 4}}, "v", time.Minute); err != nil {
		t.Fatal(err)
	}
	before = e.state()
	for i := range 24 {
		id := fmt.Sprintf("held-%d", i)
		_, err := e.newInv().Reserve(e.ctx, id, []Item{{Route: "a", SKU: "lim", Quantity: 2}}, "v", time.Minute)
		if !errors.Is(err, ErrLimitExceeded) {
			t.Fatalf("order %s (2 more for a user holding 4, limit 5): %v, want ErrLimitExceeded", id, err)
		}
	}
	after := e.state()
	if after["n1"].redo != before["n1"].redo {
		t.Errorf("refused orders left redo entries on the stock's node: %v, then %v", before, after)
	}
}

// TestLimitRefusalAcrossNodes: on a route of several nodes an order of a
// user over its limit is refused by the quota part on the user's quota
// node; the order's stock is first asked of that same node (in the same
// call, which takes nothing when its quota part refuses), so no node takes
// anything to roll back: no redo entry (no cancelled row in PostgreSQL),
// whatever node is the order's home. Before, the stock went first to the
// home node, in the same round as the quota part, and was rolled back
// there. When the user holds fewer units than the order wants, no attempt
// of the order can hold them and the refusal writes nothing at all (the
// one-round path withdraws its stage, the one-script path refuses at
// once); when the user holds at least as
// many, they may be an earlier attempt's of the same order, and the
// refusal keeps its fence: a failed record (limitMayBeOwn).
func TestLimitRefusalAcrossNodes(t *testing.T) {
	t.Parallel() // its own nodes
	e := newSoldOutEnv(t)
	if _, err := e.inv.LoadStock(e.ctx, "all", "lim", 300, 5); err != nil {
		t.Fatal(err)
	}
	e.load("all", "free", 300)
	for user, qty := range map[string]int64{"w": 4, "x": 3} {
		if _, err := e.inv.Reserve(e.ctx, "held-"+user, []Item{{Route: "all", SKU: "lim", Quantity: qty}}, user, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	set, err := e.inv.set(e.ctx, "all")
	if err != nil {
		t.Fatal(err)
	}
	refuse := func(id, user string, want int64, i int) {
		t.Helper()
		items := []Item{{Route: "all", SKU: "lim", Quantity: want}}
		if i%2 == 1 { // an unlimited item in the same order takes nothing either
			items = []Item{{Route: "all", SKU: "free", Quantity: 1}, {Route: "all", SKU: "lim", Quantity: want}}
		}
		if _, err := e.newInv().Reserve(e.ctx, id, items, user, time.Minute); !errors.Is(err, ErrLimitExceeded) {
			t.Fatalf("order %s (%d more for user %s, limit 5): %v, want ErrLimitExceeded", id, want, user, err)
		}
	}
	before := e.state()
	for i := range 30 {
		refuse(fmt.Sprintf("over-w-%d", i), "w", 2, i)
	}
	after := e.state()
	keys := e.keysNoRedo(before, "orders refused by the user's limit")
	// the fence is the failed record alone: the refused parts' takes
	// answered without taking, so no tombstone is needed for them
	if keys > 30 {
		t.Errorf("30 orders refused by the user's limit left %d keys, want at most one each (the fence): before %v, after %v", keys, before, after)
	}

	// the user holds less than the order wants: nothing written, on any
	// node, whether the order's home is the quota node (the one-script
	// path refuses: localLimit) or another (the one-round path withdraws)
	before = e.state()
	atQuota := 0
	for i := range 30 {
		id := fmt.Sprintf("over-x-%d", i)
		home, err := e.inv.homeFor(e.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if home == quotaNode(set, "x") {
			atQuota++
		}
		refuse(id, "x", 4, i)
	}
	if atQuota == 0 || atQuota == 30 {
		t.Fatalf("%d of 30 orders have their home on user x's quota node: the test needs both kinds", atQuota)
	}
	// the units the user holds may be an earlier attempt's of the same
	// order id wanting less (quotaMayBeOwn): the fence alone
	if keys := e.keysNoRedo(before, "orders refused by the user's limit, wanting more than the user holds"); keys > 30 {
		t.Errorf("30 orders refused by the user's limit, wanting more than the user holds, left %d keys, want at most one each (the fence)", keys)
	}
	// a user who holds none: nothing written
	before = e.state()
	for i := range 10 {
		refuse(fmt.Sprintf("over-v-%d", i), "v", 6, i)
	}
	if after := e.state(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("orders refused by the user's limit, the user holding none, changed the nodes: keys and redo entries before %v, after %v", before, after)
	}
	// within the limit the order is still met
	if _, err := e.inv.Reserve(e.ctx, "within", []Item{{Route: "all", SKU: "lim", Quantity: 1}}, "w", time.Minute); err != nil {
		t.Fatal(err)
	}
}

// TestLimitRefusalAcrossRoutes: an order over two routes whose per-user
// quotas live on two nodes (routes a and b, one node each), refused because
// the user is at its limit of the SKU on one of them, takes nothing on the
// other either: no redo entry reaches PostgreSQL. When the user holds less
// than the order wants there, nothing is written at all; when it holds at
// least that much (the units may be the order's own), only the fence, one
// failed record. Before such orders were read first, the take on the quota
// node with room landed and was rolled back: a redo entry per refusal,
// which pgsync lands as a cancelled row. The instance knows lim has a
// limit (the limit hint: its LoadStock set it); one that has not seen it
// yet takes first (see soldout.go, "Per-user limits").
func TestLimitRefusalAcrossRoutes(t *testing.T) {
	t.Parallel() // its own nodes
	e := newSoldOutEnv(t)
	for _, route := range []string{"a", "b"} {
		if _, err := e.inv.LoadStock(e.ctx, route, "lim", 300, 5); err != nil {
			t.Fatal(err)
		}
	}
	// user y holds 4 of b/lim, user z 2: with a limit of 5, 2 more are over
	// it for y (who holds at least that many), 4 more for z (who holds fewer)
	for user, qty := range map[string]int64{"y": 4, "z": 2} {
		if _, err := e.inv.Reserve(e.ctx, "held-"+user, []Item{{Route: "b", SKU: "lim", Quantity: qty}}, user, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	refuse := func(user string, want int64) {
		t.Helper()
		for i := range 20 {
			id := fmt.Sprintf("over-%s-%d", user, i)
			items := []Item{{Route: "a", SKU: "lim", Quantity: 1}, {Route: "b", SKU: "lim", Quantity: want}}
			if i%2 == 1 {
				items[0], items[1] = items[1], items[0]
			}
			if _, err := e.inv.Reserve(e.ctx, id, items, user, time.Minute); !errors.Is(err, ErrLimitExceeded) {
				t.Fatalf("order %s (%d more of b/lim for user %s, limit 5): %v, want ErrLimitExceeded", id, want, user, err)
			}
		}
	}
	before := e.state()
	refuse("y", 2)
	after := e.state()
	keys := e.keysNoRedo(before, "orders over two routes refused by the user's limit on one")
	if keys > 20 {
		t.Errorf("20 orders over two routes refused by the user's limit left %d keys, want at most one each (the fence): before %v, after %v", keys, before, after)
	}
	before = e.state()
	refuse("z", 4)
	// z's units may be an earlier attempt's of the same order id wanting
	// less (quotaMayBeOwn): the fence alone
	if keys := e.keysNoRedo(before, "orders over two routes refused by the user's limit, wanting more than the user holds"); keys > 20 {
		t.Errorf("20 such orders left %d keys, want at most one each (the fence)", keys)
	}
	// a user who holds none of b/lim: nothing written
	before = e.state()
	refuse("v", 6)
	if after := e.state(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("orders over two routes refused by the user's limit, the user holding none, changed the nodes (keys, redo entries): before %v, after %v", before, after)
	}
	// within the limit on both routes the order is still met
	if _, err := e.inv.Reserve(e.ctx, "within-y", []Item{{Route: "a", SKU: "lim", Quantity: 2}, {Route: "b", SKU: "lim", Quantity: 1}}, "y", time.Minute); err != nil {
		t.Fatal(err)
	}
	// an instance that has not loaded the SKU learns its limit from the
	// replies of its first order of it, then reads first too
	fresh := e.newInv()
	if _, err := fresh.Reserve(e.ctx, "first-w", []Item{{Route: "a", SKU: "lim", Quantity: 1}, {Route: "b", SKU: "lim", Quantity: 1}}, "w", time.Minute); err != nil {
		t.Fatal(err)
	}
	before = e.state()
	for i := range 5 {
		items := []Item{{Route: "a", SKU: "lim", Quantity: 1}, {Route: "b", SKU: "lim", Quantity: 2}}
		if _, err := fresh.Reserve(e.ctx, fmt.Sprintf("fresh-y-%d", i), items, "y", time.Minute); !errors.Is(err, ErrLimitExceeded) {
			t.Fatalf("order fresh-y-%d: %v, want ErrLimitExceeded", i, err)
		}
	}
	e.keysNoRedo(before, "refused orders of an instance that learned the limit from a reply")
}

// TestShortByHoldsRefusedBehindFence: an order short of stock only while
// other orders hold units (reserved, not confirmed), which could be its
// own earlier attempt's, is refused behind a fence: one failed record on
// its home node and nothing else. Before, the reads stepped aside and the
// next paths took what the nodes had left, then rolled it back: redo
// entries, which pgsync lands as cancelled rows.
func TestShortByHoldsRefusedBehindFence(t *testing.T) {
	e := newSoldOutEnv(t)
	e.loadHeld()
	before := e.state()
	for i := range 10 {
		id := fmt.Sprintf("short-%d", i)
		_, err := e.newInv().Reserve(e.ctx, id, []Item{{Route: "all", SKU: "held", Quantity: 2}}, "", time.Minute)
		if !errors.Is(err, ErrInsufficientStock) {
			t.Fatalf("order %s (2 units, 1 available, 2 reserved): %v, want ErrInsufficientStock", id, err)
		}
		home, err := e.inv.homeFor(e.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		f, err := ReadOrder(e.ctx, e.clients[home.Name()], id).Fields()
		if err != nil || f["status"] != string(OrderFailed) {
			t.Fatalf("order %s: its record is %v (%v), want the fence: failed", id, f, err)
		}
	}
	after := e.state()
	keys := e.keysNoRedo(before, "orders short by holds")
	if keys != 10 {
		t.Errorf("10 orders short by holds left %d keys, want one each (the fence): before %v, after %v", keys, before, after)
	}
	if lvl, err := e.inv.GetStock(e.ctx, "all", "held"); err != nil || lvl.Available != 1 || lvl.Reserved != 2 {
		t.Errorf("stock after the refusals: %+v (%v), want 1 available and 2 reserved", lvl, err)
	}
}

// fenceReplyLost is a Faults under which the first fence op of each order
// runs on its node and loses its reply (the outcome unknown to the caller,
// as after a timeout); later ones answer.
type fenceReplyLost struct {
	mu   sync.Mutex
	lost map[string]bool // order key → its first fence's reply was lost
}

func (f *fenceReplyLost) Call(ctx context.Context, c ScriptCall, send func() (any, error)) (any, error) {
	if c.Script != orderScript.name || len(c.Args) == 0 || c.Args[0] != string(opFence) {
		return send()
	}
	f.mu.Lock()
	first := !f.lost[c.Keys[0]]
	f.lost[c.Keys[0]] = true
	f.mu.Unlock()
	v, err := send()
	if err == nil && first {
		return nil, fmt.Errorf("fence reply lost: %w", context.DeadlineExceeded)
	}
	return v, err
}

func (f *fenceReplyLost) Crash(context.Context, string) bool { return false }

// TestFenceReplyLost: the fence's write landed but its reply was lost;
// refuseShort asks again, finds the failed record and refuses behind it:
// no redo entry and no key but the fence. (Without the second ask it
// stepped aside and the next paths took what was left and rolled it back:
// redo entries and 12 keys over the 5 orders.)
func TestFenceReplyLost(t *testing.T) {
	e := newSoldOutEnv(t)
	e.loadHeld()
	f := &fenceReplyLost{lost: map[string]bool{}}
	inv, err := New(e.r, Options{Logger: slog.New(slog.DiscardHandler), Faults: f})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(inv.Close)
	before := e.state()
	for i := range 5 {
		id := fmt.Sprintf("lost-%d", i)
		if _, err := inv.Reserve(e.ctx, id, []Item{{Route: "all", SKU: "held", Quantity: 2}}, "", time.Minute); !errors.Is(err, ErrInsufficientStock) {
			t.Fatalf("order %s (2 units, 1 available, 2 reserved), its fence's reply lost: %v, want ErrInsufficientStock", id, err)
		}
		home, err := inv.homeFor(e.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if f, err := ReadOrder(e.ctx, e.clients[home.Name()], id).Fields(); err != nil || f["status"] != string(OrderFailed) {
			t.Fatalf("order %s: its record is %v (%v), want failed", id, f, err)
		}
	}
	if len(f.lost) != 5 {
		t.Fatalf("%d orders' fences met the fault, want 5", len(f.lost))
	}
	keys := e.keysNoRedo(before, "orders whose fence reply was lost")
	if keys != 5 {
		t.Errorf("5 orders whose fence reply was lost left %d keys, want one each (a failed record)", keys)
	}
	if lvl, err := e.inv.GetStock(e.ctx, "all", "held"); err != nil || lvl.Available != 1 || lvl.Reserved != 2 {
		t.Errorf("stock after the refusals: %+v (%v), want 1 available and 2 reserved", lvl, err)
	}
}
