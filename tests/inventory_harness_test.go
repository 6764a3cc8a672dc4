package tests

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/health"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/rollback"
	"github.com/shardis/shardis/router"
)

// invServer is the inventory server key of every inventory test.
const invServer = "inventory"

// invFastHealth is the health configuration of the inventory tests: a
// killed node (connection refused) is noticed within a few hundred
// milliseconds, but a probe may take up to 1s, so a loaded machine (-race,
// parallel packages) does not mark a live node DOWN (a 100ms timeout did).
var invFastHealth = config.Health{
	Heartbeat: 100 * time.Millisecond,
	Timeout:   time.Second,
	Backoff:   []time.Duration{100 * time.Millisecond, 200 * time.Millisecond},
}

// invDiscard is the logger of the inventory tests: the failure paths they
// provoke log plenty.
var invDiscard = slog.New(slog.DiscardHandler)

// invOpts configures newInvCluster. The zero value is three nodes n1..n3
// without persistence, one route "r" over all of them, fast health checks
// and a 1s attempt lease.
type invOpts struct {
	nodes  int
	aof    bool
	routes map[string][]string // route → node names; default {"r": all}
	health *config.Health
	lease  time.Duration // inventory.Options.AttemptLease
}

// invCluster is real redis-server nodes with a router, an inventory, a
// deferred-settle queue and direct clients to every node.
type invCluster struct {
	t       testing.TB
	names   []string                     // sorted
	srv     map[string]*redistest.Server // by node name
	clients map[string]*redis.Client     // direct, bypassing the router
	cfg     *config.Config
	r       *router.Router
	inv     *inventory.Inventory
	q       *rollback.Queue
	homes   *inventory.Homes // order homes, as the inventory places them
	lease   time.Duration

	recMu sync.Mutex
	recs  []*rollback.Reconciler // woken by NodeUp on every UP event
}

func newInvCluster(t testing.TB, o invOpts) *invCluster {
	t.Helper()
	if o.nodes == 0 {
		o.nodes = 3
	}
	if o.health == nil {
		o.health = &invFastHealth
	}
	if o.lease == 0 {
		o.lease = time.Second
	}
	c := &invCluster{
		t: t, srv: map[string]*redistest.Server{}, clients: map[string]*redis.Client{},
		lease: o.lease,
	}
	servers := redistest.StartN(t, o.nodes, redistest.Options{AOF: o.aof})
	cfg := config.Default()
	cfg.Nodes = map[string]config.Node{}
	for i, s := range servers {
		name := fmt.Sprintf("n%d", i+1)
		c.names = append(c.names, name)
		c.srv[name] = s
		c.clients[name] = s.Client(t)
		cfg.Nodes[name] = config.Node{Addr: s.Addr(), Weight: 1}
	}
	sort.Strings(c.names)
	if o.routes == nil {
		o.routes = map[string][]string{"r": append([]string(nil), c.names...)}
	}
	cfg.Servers = map[string]config.Server{invServer: {OnNodeDown: config.OnNodeDownFail, Routes: o.routes}}
	cfg.Health = *o.health
	cfg.Health.Backoff = append([]time.Duration(nil), o.health.Backoff...)
	cfg.Inventory.ReconcileInterval = 100 * time.Millisecond
	if err := cfg.Validate(); err != nil {
		t.Fatalf("inventory test config: %v", err)
	}
	c.cfg = &cfg
	c.q = rollback.NewQueue()
	c.r, c.inv = c.newInventory(t, c.q)

	var err error
	if c.homes, err = inventory.NewHomes(c.cfg); err != nil {
		t.Fatalf("order homes: %v", err)
	}
	return c
}

// newInventory builds another router and inventory over the same nodes
// (another process, as far as the nodes can tell), closed when the test
// ends. UP events of its router wake the cluster's reconcilers.
func (c *invCluster) newInventory(t testing.TB, q *rollback.Queue) (*router.Router, *inventory.Inventory) {
	t.Helper()
	return c.newInventoryFor(t, c.cfg, q)
}

// newInventoryFor is newInventory with another configuration of the same
// nodes (another topology).
func (c *invCluster) newInventoryFor(t testing.TB, cfg *config.Config, q *rollback.Queue) (*router.Router, *inventory.Inventory) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := router.New(ctx, cfg, router.Options{KeepData: cfg.KeepData(),
		Logger: invDiscard,
		OnStateChange: func(ev health.Event) {
			if !ev.Up {
				return
			}
			c.recMu.Lock()
			recs := append([]*rollback.Reconciler(nil), c.recs...)
			c.recMu.Unlock()
			for _, rec := range recs {
				rec.NodeUp(ev.Target)
			}
		},
	})
	if err != nil {
		t.Fatalf("router.New: %v", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	for _, n := range r.Nodes() {
		if !n.Usable() {
			t.Fatalf("node %s not usable after router.New: %v", n.Name(), n.DownReason())
		}
	}
	opts := inventory.Options{AttemptLease: c.lease, Logger: invDiscard}
	if q != nil {
		opts.Deferrer = q
	}
	inv, err := inventory.New(r, opts)
	if err != nil {
		t.Fatalf("inventory.New: %v", err)
	}
	t.Cleanup(inv.Close) // before the router's Close, registered earlier
	return r, inv
}

// reconciler returns a reconciler over inv (nil: the cluster's inventory
// and queue) that UP events wake, closed when the test ends.
func (c *invCluster) reconciler(inv *inventory.Inventory, q *rollback.Queue, s rollback.Settings) *rollback.Reconciler {
	if inv == nil {
		inv, q = c.inv, c.q
	}
	if s.Logger == nil {
		// Warnings and errors reach the test log, so a failed step shows
		// its cause.
		s.Logger = slog.New(slog.NewTextHandler(tWriter{c.t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	rec := rollback.New(inv, q, s)
	c.recMu.Lock()
	c.recs = append(c.recs, rec)
	c.recMu.Unlock()
	c.t.Cleanup(rec.Close)
	return rec
}

// acceptNode does what an operator does for a node that came back empty or
// with older data (`shardis node accept`): it waits until the node is
// refused for it, then accepts its data.
func (c *invCluster) acceptNode(name string) {
	c.t.Helper()
	n, _ := c.r.Node(name)
	deadline := time.Now().Add(10 * time.Second)
	for !errors.Is(n.DownReason(), node.ErrDataLost) && !errors.Is(n.DownReason(), node.ErrRolledBack) {
		if time.Now().After(deadline) {
			c.t.Fatalf("node %s was not refused for lost data within 10s (state %v, reason %v)", name, n.State(), n.DownReason())
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.r.AcceptNode(ctx, name); err != nil {
		c.t.Fatalf("AcceptNode(%s): %v", name, err)
	}
}

// home returns the name of an order's home node.
func (c *invCluster) home(orderID string) string {
	return c.homes.Home(orderID)
}

// awaitCommitted waits until a one-round order's record on its home is
// no longer staging: Reserve answers before its commit lands (the commit
// rides a later write group, inventory/carry.go), and a test that then
// changes the order's parts behind the inventory's back must not race it.
func (c *invCluster) awaitCommitted(ctx context.Context, orderID string) {
	c.t.Helper()
	home := c.home(orderID)
	for {
		f, err := inventory.ReadOrder(ctx, c.clients[home], orderID).Fields()
		if err != nil {
			c.t.Fatalf("order %s's record on %s: %v", orderID, home, err)
		}
		if f["status"] != "staging" {
			return
		}
		select {
		case <-ctx.Done():
			c.t.Fatalf("order %s is still staging on %s: %v", orderID, home, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// first returns the node an item of an order is taken from first.
func (c *invCluster) first(route, orderID, sku string) string {
	c.t.Helper()
	set, err := c.r.Set(invServer, route)
	if err != nil {
		c.t.Fatalf("route %s: %v", route, err)
	}
	return c.firstOf(set, orderID, sku)
}

// firstOf mirrors the inventory's choice: an item goes first to its
// order's home node when the route has it (all nodes enabled and usable),
// else to the first of Candidates(orderID+sku).
func (c *invCluster) firstOf(set *router.Set, orderID, sku string) string {
	home := c.home(orderID)
	for _, n := range set.Nodes() {
		if n.Name() == home {
			return home
		}
	}
	return set.Candidates(orderID + sku)[0].Name()
}

// orderIDWith returns the first order id "prefix-i" that ok accepts.
func (c *invCluster) orderIDWith(prefix string, ok func(id string) bool) string {
	c.t.Helper()
	for i := 0; i < 100000; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		if ok(id) {
			return id
		}
	}
	c.t.Fatalf("no order id %s-* satisfies the condition", prefix)
	return ""
}

// node returns the router's node by name.
func (c *invCluster) node(name string) *node.Node {
	c.t.Helper()
	n, err := c.r.Node(name)
	if err != nil {
		c.t.Fatal(err)
	}
	return n
}

// load loads stock and fails the test on error.
func (c *invCluster) load(route, sku string, qty, limit int64) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.inv.LoadStock(ctx, route, sku, qty, limit); err != nil {
		c.t.Fatalf("LoadStock(%s, %s, %d, %d): %v", route, sku, qty, limit, err)
	}
}

// waitUsable waits until the router uses node name again.
func (c *invCluster) waitUsable(name string, timeout time.Duration) {
	c.t.Helper()
	n := c.node(name)
	deadline := time.Now().Add(timeout)
	for !n.Usable() {
		if time.Now().After(deadline) {
			c.t.Fatalf("node %s not usable within %v: %v", name, timeout, n.DownReason())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitDown waits until the router marks node name DOWN.
func (c *invCluster) waitDown(name string, timeout time.Duration) {
	c.t.Helper()
	n := c.node(name)
	deadline := time.Now().Add(timeout)
	for n.State() == node.StateUp {
		if time.Now().After(deadline) {
			c.t.Fatalf("node %s not marked down within %v", name, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// invCtx returns a context bounded by d, cancelled when the test ends.
func invCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// invItem is shorthand for one order line.
func invItem(route, sku string, qty int64) inventory.Item {
	return inventory.Item{Route: route, SKU: sku, Quantity: qty}
}

// invSumReceipts sums receipt quantities per SKU and counts the nodes
// they come from.
func invSumReceipts(rs []inventory.Receipt) (qty map[string]int64, nodes map[string]bool) {
	qty, nodes = map[string]int64{}, map[string]bool{}
	for _, r := range rs {
		qty[r.SKU] += r.Quantity
		nodes[r.Node] = true
	}
	return qty, nodes
}

// invUntil sleeps until at (no-op if at has passed).
func invUntil(at time.Time) {
	if d := time.Until(at); d > 0 {
		time.Sleep(d)
	}
}

// invCounter counts errors by kind for concurrent callers.
type invCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *invCounter) add(k string) {
	c.mu.Lock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[k]++
	c.mu.Unlock()
}

func (c *invCounter) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var parts []string
	for k, v := range c.n {
		parts = append(parts, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}
