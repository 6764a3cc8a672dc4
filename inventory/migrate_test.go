package inventory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/router"
	"github.com/shardis/shardis/topology"
)

// Crash points of the topology protocol (package topology, migrate.go), one by
// one against real nodes: crashAt stops `topology apply` at a point, as a
// process dying between two scripts would; then the next actor (a new
// instance, a rerun of the apply) must finish with every invariant intact.

type migrateEnv struct {
	t        *testing.T
	ctx      context.Context
	old, new *config.Config
	clients  map[string]*redis.Client
	order    string // reserved and confirmed through the old topology; its home moves to n4
	tomb     string // cancelled before any reserve; its home moves to n4
	user     string // holds 2 of "lim" (limit 2); its quota home moves to n4
	userPrev string // the user's quota node in the old topology
}

func newMigrateEnv(t *testing.T) *migrateEnv {
	srvs := redistest.StartN(t, 4, redistest.Options{})
	// No test of this env stops a node, and the default 300ms dial timeout
	// failed a loopback dial on a busy machine (ci442, TestTopologyCrashPoints/bump:
	// "dial tcp …: i/o timeout" in the rerun of the apply): envConfig.
	base := envConfig()
	base.Nodes = map[string]config.Node{}
	e := &migrateEnv{t: t, clients: map[string]*redis.Client{}}
	for i, s := range srvs {
		name := fmt.Sprintf("n%d", i+1)
		base.Nodes[name] = config.Node{Addr: s.Addr(), Weight: 1}
		e.clients[name] = s.Client(t)
	}
	with := func(members ...string) *config.Config {
		c := base
		c.Servers = map[string]config.Server{"inventory": {OnNodeDown: config.OnNodeDownFail, Routes: map[string][]string{"r": members}}}
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		return &c
	}
	e.old, e.new = with("n1", "n2", "n3"), with("n1", "n2", "n3", "n4")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	e.ctx = ctx
	oh, _ := NewHomes(e.old)
	nh, _ := NewHomes(e.new)
	moved := func(prefix string) string {
		for i := 0; ; i++ {
			id := fmt.Sprintf("%s-%d", prefix, i)
			if nh.Home(id) == "n4" && oh.Home(id) != "n4" {
				return id
			}
		}
	}
	e.order, e.tomb = moved("o"), moved("t")
	oq, _ := router.NewRing(topology.Of(e.old).Routes["r"])
	nq, _ := router.NewRing(topology.Of(e.new).Routes["r"])
	for i := 0; e.user == ""; i++ {
		u := fmt.Sprintf("u-%d", i)
		if nq.Name(nq.Home("user:"+u)) == "n4" {
			e.user, e.userPrev = u, oq.Name(oq.Home("user:"+u))
		}
	}
	old := e.open(e.old)
	if _, err := old.LoadStock(ctx, "r", "lim", 90, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Reserve(ctx, e.order, []Item{{Route: "r", SKU: "lim", Quantity: 2}}, e.user, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Confirm(ctx, e.order); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Cancel(ctx, e.tomb); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *migrateEnv) open(cfg *config.Config) *Inventory {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := router.New(ctx, cfg, router.Options{KeepData: cfg.KeepData(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = r.Close() })
	inv, err := New(r, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		e.t.Fatal(err)
	}
	return inv
}

func (e *migrateEnv) apply() (topology.Report, error) {
	return e.applyWith(nil)
}

// applyWith is apply with faults injected.
func (e *migrateEnv) applyWith(f Faults) (topology.Report, error) {
	return ApplyTopology(e.ctx, ApplyOptions{To: e.new, Wait: 5 * time.Second, Logger: slog.New(slog.DiscardHandler), Faults: f})
}

// check verifies through a new instance what the old topology decided:
// the order is confirmed, the tombstone refuses a reserve, the user is at
// the limit. A refusal for the topology (a node not yet moved) is allowed
// only when partial is true.
func (e *migrateEnv) check(what string, partial bool) {
	e.t.Helper()
	inv := e.open(e.new)
	ok := func(op string, err error, want error) {
		e.t.Helper()
		if want == nil && err == nil || want != nil && errors.Is(err, want) {
			return
		}
		if partial && errors.Is(err, ErrTopology) {
			return
		}
		e.t.Errorf("%s: %s = %v, want %v", what, op, err, want)
	}
	out, err := inv.Confirm(e.ctx, e.order)
	ok("Confirm of the confirmed order", err, nil)
	if err == nil && out.Status != StatusConfirmed {
		e.t.Errorf("%s: Confirm of the confirmed order = %+v", what, out)
	}
	_, err = inv.Reserve(e.ctx, e.tomb, []Item{{Route: "r", SKU: "lim", Quantity: 1}}, "someone", time.Minute)
	ok("Reserve of the tombstoned order", err, ErrCancelled)
	_, err = inv.Reserve(e.ctx, "more-"+e.user, []Item{{Route: "r", SKU: "lim", Quantity: 1}}, e.user, time.Minute)
	ok("Reserve past the user's limit", err, ErrLimitExceeded)
}

// finished checks the end state after a complete apply: the user's
// counter is exactly 2, on n4 only, and no transfer record is left.
func (e *migrateEnv) finished(what string) {
	e.t.Helper()
	rep, err := e.apply()
	if err != nil || rep.Phase != topology.PhaseStable {
		e.t.Fatalf("%s: rerun of the apply = %+v, %v; want stable", what, rep, err)
	}
	e.check(what+", after the rerun", false)
	k := quotaKey("r", "lim", e.user)
	if v, err := e.clients["n4"].Get(e.ctx, k).Int64(); err != nil || v != 2 {
		e.t.Errorf("%s: %s on n4 = %d, %v; want 2", what, k, v, err)
	}
	if n, _ := e.clients[e.userPrev].Exists(e.ctx, k).Result(); n != 0 {
		v, _ := e.clients[e.userPrev].Get(e.ctx, k).Result()
		e.t.Errorf("%s: %s still on %s (%s)", what, k, e.userPrev, v)
	}
	for name, c := range e.clients {
		if keys, _ := c.Keys(e.ctx, "inv:xfer:[0-9]*").Result(); len(keys) > 0 {
			e.t.Errorf("%s: transfer records left on %s: %v", what, name, keys)
		}
	}
}

// TestTopologyCrashPoints: an apply that dies at each crash point of the
// migration, run again, ends with what the old topology decided, and
// with every copy marked moved expiring (expireMoved): a reserved order
// moved too (held) is reserved on its new home with no TTL. A crash at
// "install" (its copy not yet given the retention) is tried at each of
// the three moved orders, so one of them is held.
func TestTopologyCrashPoints(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, f Faults, point string) {
		e := newMigrateEnv(t)
		held := e.reserveMoving(e.open(e.old), "held", 1)[0]
		if f != nil {
			if _, err := e.applyWith(f); !errors.Is(err, errCrashed) {
				t.Fatalf("apply with a crash at %s = %v, want the injected crash", point, err)
			}
			e.check("after a crash at "+point, point == "bump")
		}
		e.finished("crash at " + point)
		e.movedCopiesExpire(held)
	}
	for _, point := range []string{"bump", "move-out", "xfer-out", "xfer-in"} {
		t.Run(point, func(t *testing.T) { run(t, crashAtPoint(point), point) })
	}
	for nth := int32(1); nth <= 3; nth++ {
		t.Run(fmt.Sprintf("install-%d", nth), func(t *testing.T) { run(t, &topoFaults{point: "install", nth: nth}, "install") })
	}
	t.Run("none", func(t *testing.T) { run(t, nil, "none") })
}

// movedCopiesExpire checks that every order record marked moved on the
// old topology's nodes has a TTL, and that each of held, reserved, is
// live on n4 with none.
func (e *migrateEnv) movedCopiesExpire(held ...string) {
	e.t.Helper()
	for _, id := range held {
		if f := orderFieldsOn(e.t, e.ctx, e.clients["n4"], id); f["status"] != string(OrderReserved) || f["moved"] != "" {
			e.t.Errorf("order %s on n4: %v; want it live, reserved", id, f)
		}
		if ttl, err := e.clients["n4"].PTTL(e.ctx, orderKey(id)).Result(); err != nil || ttl != -1 {
			e.t.Errorf("order %s on n4 has TTL %v, %v; want none (reserved)", id, ttl, err)
		}
	}
	marked := 0
	for _, name := range []string{"n1", "n2", "n3"} {
		c := e.clients[name]
		keys, err := c.Keys(e.ctx, orderKeyPrefix+"*").Result()
		if err != nil {
			e.t.Fatal(err)
		}
		for _, k := range keys {
			id := k[len(orderKeyPrefix):]
			if orderFieldsOn(e.t, e.ctx, c, id)["moved"] == "" {
				continue
			}
			marked++
			if ttl, err := c.PTTL(e.ctx, k).Result(); err != nil || ttl <= 0 {
				e.t.Errorf("order %s's copy on %s, marked moved, has TTL %v, %v; want one", id, name, ttl, err)
			}
		}
	}
	if marked != 2+len(held) {
		e.t.Errorf("%d copies marked moved on n1..n3, want %d (the confirmed order, the tombstone, %v)", marked, 2+len(held), held)
	}
}

// movingStock is the stock of route r's SKU "free" that the tests of
// records moved by a topology change reserve from.
const movingStock = 30

// reserveMoving loads movingStock units and reserves n 1-unit orders of
// them through old, ids prefix-0, prefix-1 …, each picked so that the
// change moves its home to n4.
func (e *migrateEnv) reserveMoving(old *Inventory, prefix string, n int) []string {
	e.t.Helper()
	if _, err := old.LoadStock(e.ctx, "r", "free", movingStock, 0); err != nil {
		e.t.Fatal(err)
	}
	oh, _ := NewHomes(e.old)
	nh, _ := NewHomes(e.new)
	var ids []string
	for i := 0; len(ids) < n; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		if nh.Home(id) != "n4" || oh.Home(id) == "n4" {
			continue
		}
		if _, err := old.Reserve(e.ctx, id, []Item{{Route: "r", SKU: "free", Quantity: 1}}, "", time.Minute); err != nil {
			e.t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// settleMoved confirms ids[0] and cancels ids[1] (reserved by
// reserveMoving, moved to n4 by the change) through an inventory at the
// new configuration, and checks the stock adds up.
func (e *migrateEnv) settleMoved(ids []string) {
	e.t.Helper()
	inv := e.open(e.new)
	if out, err := inv.Confirm(e.ctx, ids[0]); err != nil || out.Status != StatusConfirmed || out.PendingParts != 0 {
		e.t.Fatalf("Confirm %s: %+v, %v", ids[0], out, err)
	}
	if out, err := inv.Cancel(e.ctx, ids[1]); err != nil || out.Status != StatusCancelled || out.PendingParts != 0 {
		e.t.Fatalf("Cancel %s: %+v, %v", ids[1], out, err)
	}
	lvl, err := inv.GetStock(e.ctx, "r", "free")
	if err != nil || lvl.Confirmed != 1 || lvl.Reserved != 0 || lvl.Available != movingStock-1 {
		e.t.Errorf("stock after the move: %+v, %v; want 1 confirmed, %d available", lvl, err, movingStock-1)
	}
}

// TestApplyExpiresFrozenCopies: copies marked moved that kept no TTL (as
// every release before expireMoved left the copies of orders reserved at
// their move, or a failed expireMoved leaves one) get the records'
// retention from the next apply's retirement step (Retire, expireFrozen:
// one script call per node and batch), here an apply that adds a route
// over the same nodes, so no order moves; the orders stay reserved on
// their home, with no TTL.
func TestApplyExpiresFrozenCopies(t *testing.T) {
	e := newMigrateEnv(t)
	held := e.reserveMoving(e.open(e.old), "held", 4)
	if rep, err := e.apply(); err != nil || rep.Phase != topology.PhaseStable {
		t.Fatalf("apply = %+v, %v", rep, err)
	}
	oh, _ := NewHomes(e.old)
	for _, id := range held {
		if err := e.clients[oh.Home(id)].Persist(e.ctx, orderKey(id)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	more := e.routeX()
	rep, err := ApplyTopology(e.ctx, ApplyOptions{To: more, Wait: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil || rep.Phase != topology.PhaseStable || rep.OrdersMoved != 0 {
		t.Fatalf("apply adding route x = %+v, %v; want stable, no order moved", rep, err)
	}
	e.movedCopiesExpire(held...)
}

// TestApplyRefusedWhileMigrating: an apply to another topology while the
// last one is still migrating (it died in step 3, its user's quota
// counter not yet moved) is refused, naming the node still migrating,
// whether it adds a route or goes back to the previous topology. Before,
// the first ended stable with the counter left on its old node, and a
// Reserve past the user's limit (2 of 2 held) succeeded; going back left
// the transfer record begun on the counter's node. Once the last apply
// is run again to its end, the new one goes through and the limit holds.
func TestApplyRefusedWhileMigrating(t *testing.T) {
	e := newMigrateEnv(t)
	if _, err := e.applyWith(crashAtPoint("xfer-out")); !errors.Is(err, errCrashed) {
		t.Fatalf("apply with a crash at xfer-out = %v, want the injected crash", err)
	}
	more := e.routeX()
	apply := func(to *config.Config) (topology.Report, error) {
		return ApplyTopology(e.ctx, ApplyOptions{To: to, Wait: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	}
	for _, to := range []*config.Config{more, e.old} {
		if rep, err := apply(to); !errors.Is(err, topology.ErrInvalid) || !strings.Contains(err.Error(), "still migrating") {
			t.Fatalf("apply of %s while migrating = %+v, %v; want refused, a node still migrating", topology.Of(to), rep, err)
		}
	}
	e.finished("the crashed apply run again")
	if rep, err := apply(more); err != nil || rep.Phase != topology.PhaseStable {
		t.Fatalf("apply of another topology once stable = %+v, %v", rep, err)
	}
	_, err := e.open(more).Reserve(e.ctx, "more-"+e.user, []Item{{Route: "r", SKU: "lim", Quantity: 1}}, e.user, time.Minute)
	if !errors.Is(err, ErrLimitExceeded) {
		t.Fatalf("Reserve past the user's limit = %v, want ErrLimitExceeded", err)
	}
}

// TestLateRetireLeavesANewerNodeAlone: a Retire of the apply to e.new
// (epoch 2) that read n4 behind but runs only after later applies moved
// n4 on to epoch 3 must leave n4 alone: its records are the ones
// instances act on, homed by epoch 3's topology, not epoch 1's. Before,
// only a node at the change's own token was passed over, so n4 was
// treated as behind and its live records away from their epoch-1 homes
// were retired at its token: the confirmed order then read as never
// reserved.
func TestLateRetireLeavesANewerNodeAlone(t *testing.T) {
	e := newMigrateEnv(t)
	if rep, err := e.apply(); err != nil || rep.Phase != topology.PhaseStable {
		t.Fatalf("apply = %+v, %v", rep, err)
	}
	t2, err := e.clients["n4"].HGet(e.ctx, "shardis:topology", "token").Result()
	if err != nil {
		t.Fatal(err)
	}
	more := e.routeX()
	if rep, err := ApplyTopology(e.ctx, ApplyOptions{To: more, Wait: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)}); err != nil || rep.Phase != topology.PhaseStable {
		t.Fatalf("apply of route x = %+v, %v", rep, err)
	}
	c := topology.Change{From: topology.Of(e.old), To: topology.Of(e.new), Epoch: 2, Token: t2}
	got, err := testMigrator(t, e.ctx, e.new).Retire(e.ctx, c, []string{"n4"})
	if err != nil || got.Retired != 0 || got.Reinstalled != 0 {
		t.Fatalf("late Retire of epoch 2 on n4, at epoch 3 = %+v, %v; want nothing retired or put back", got, err)
	}
	if out, err := e.open(more).Confirm(e.ctx, e.order); err != nil || out.Status != StatusConfirmed {
		t.Fatalf("Confirm of the confirmed %s = %+v, %v", e.order, out, err)
	}
}

// routeX returns e.new with a route x on n1 added: an apply of it moves
// no order (the nodes are the same) and bumps every node.
func (e *migrateEnv) routeX() *config.Config {
	e.t.Helper()
	more := *e.new
	more.Servers = map[string]config.Server{"inventory": {OnNodeDown: config.OnNodeDownFail,
		Routes: map[string][]string{"r": {"n1", "n2", "n3", "n4"}, "x": {"n1"}}}}
	if err := more.Validate(); err != nil {
		e.t.Fatal(err)
	}
	return &more
}
