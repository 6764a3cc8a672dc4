package explore

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redisproc"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
	"github.com/shardis/shardis/topology"
)

// A World is the real servers schedules run against: four redis-server
// processes with AOF (appendfsync always, so a restart from the AOF loses
// nothing acknowledged), started once and reset between schedules, and
// the routers of the inventory instances. Topology T0 is n1..n3 (routes
// a: n1, b: n2, c: n3); T1 adds n4 to route c; T2 (Options.Shrink) moves
// route c to n1 and n2 and removes n4, while n3 stays for a route of its
// own, d. Schedules start at T0, epoch 1.
type World struct {
	srvs   map[string]*redisproc.Server
	direct map[string]*redis.Client // plain clients: reset and checks
	cfg0   *config.Config           // topology T0 (n1..n3)
	cfg1   *config.Config           // topology T1 (n1..n4)
	cfg2   *config.Config           // topology T2 (n1..n3, route c moved off n3)
	// actors' routers (one per instance) and the healer's, all over T0
	routers []*router.Router
	healR   *router.Router
	saved   map[string][]any // node → its epoch-1 topology state (resetScript's ARGV)
	homes   *inventory.Homes // order homes of T0
	homes1  *inventory.Homes // order homes of T1
	log     *slog.Logger
	// clock is the nodes' clock skew (clock.go): zero in a world whose
	// nodes read the machine's clock.
	clock worldClock
}

// Nodes of a world; n4 joins in T1 only.
var (
	nodesT0  = []string{"n1", "n2", "n3"}
	allNodes = []string{"n1", "n2", "n3", "n4"}
)

// The routes of the world's topologies. T2 has T0's nodes, so its order
// homes are T0's and the schedule's instances of T0 serve it (their
// configuration names every node of it: inventory/epoch.go); from T1,
// two nodes leave route c in one apply, n4 the server and n3 only the
// route (it serves d, which holds no stock): each one's c/s units move to
// c/s's home among n1 and n2.
var (
	routesT0 = map[string][]string{"a": {"n1"}, "b": {"n2"}, "c": {"n3"}}
	routesT1 = map[string][]string{"a": {"n1"}, "b": {"n2"}, "c": {"n3", "n4"}}
	routesT2 = map[string][]string{"a": {"n1"}, "b": {"n2"}, "c": {"n1", "n2"}, "d": {"n3"}}
)

// Timing of a schedule: short, so expiry paths run within it.
const (
	attemptLease = 40 * time.Millisecond
	orderTTL     = 80 * time.Millisecond
)

// NewWorld starts the servers and routers, every node on the machine's
// clock. Close it.
func NewWorld() (*World, error) { return newWorld(false) }

// newWorld is NewWorld; with skew, every node reads its wall clock
// through a skew file (clock.go), so the clock actor can step it.
func newWorld(skew bool) (w *World, err error) {
	w = &World{srvs: map[string]*redisproc.Server{}, direct: map[string]*redis.Client{},
		log: slog.New(slog.DiscardHandler)}
	defer func() {
		if err != nil {
			w.Close()
		}
	}()
	var env func(name string) []string
	if skew {
		if env, err = w.skewEnv(); err != nil {
			return w, err
		}
	}
	addrs := map[string]string{}
	for _, name := range allNodes {
		opts := redisproc.Options{AOF: true, KillWithParent: true}
		if env != nil {
			opts.Env = env(name)
		}
		s, err := redisproc.Start(opts)
		if err != nil {
			return w, fmt.Errorf("explore: starting node %s: %w", name, err)
		}
		w.srvs[name] = s
		addrs[name] = s.Addr()
		w.direct[name] = redis.NewClient(&redis.Options{Addr: s.Addr(), Protocol: 2, MaxRetries: -1})
	}
	if w.cfg0, err = worldConfig(addrs, routesT0); err != nil {
		return w, err
	}
	if w.cfg1, err = worldConfig(addrs, routesT1); err != nil {
		return w, err
	}
	if w.cfg2, err = worldConfig(addrs, routesT2); err != nil {
		return w, err
	}
	if w.homes, err = inventory.NewHomes(w.cfg0); err != nil {
		return w, err
	}
	if w.homes1, err = inventory.NewHomes(w.cfg1); err != nil {
		return w, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := 0; i < 3; i++ {
		r, err := router.New(ctx, w.cfg0, router.Options{KeepData: w.cfg0.KeepData(), Logger: w.log})
		if err != nil {
			return w, fmt.Errorf("explore: router: %w", err)
		}
		w.routers = append(w.routers, r)
	}
	w.healR, w.routers = w.routers[2], w.routers[:2]
	// The first instance writes the epoch-1 records; keep them for Reset.
	inv, err := inventory.New(w.healR, inventory.Options{Logger: w.log})
	if err != nil {
		return w, err
	}
	// The first read initialises the nodes' topology records within its
	// own second (inventory/epoch.go: resync); on a loaded machine that
	// can pass first, and the view says not ready until a later read.
	st := inv.TopologyStatus(ctx)
	for !st.Ready && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
		st = inv.TopologyStatus(ctx)
	}
	if !st.Ready {
		return w, fmt.Errorf("explore: topology not ready: %s", st.Reason)
	}
	w.saved = map[string][]any{}
	for _, name := range allNodes {
		stamp, err := w.direct[name].HMGet(ctx, node.StampKey, stampTopo...).Result()
		if err != nil {
			return w, err
		}
		fields, err := w.direct[name].HGetAll(ctx, "shardis:topology").Result()
		if err != nil {
			return w, err
		}
		var args []any
		for _, v := range stamp {
			s, _ := v.(string)
			args = append(args, s)
		}
		for k, v := range fields {
			args = append(args, k, v)
		}
		w.saved[name] = args
	}
	return w, nil
}

// worldConfig is the configuration of the topology of routes (T0, T1 or
// T2) over the nodes they name: fast health checks, a breaker that does
// not open on injected faults, group commit off (one script per call, so
// every call is scheduled alone), short leases and TTLs.
func worldConfig(addrs map[string]string, routes map[string][]string) (*config.Config, error) {
	cfg := config.Default()
	cfg.Nodes = map[string]config.Node{}
	own := map[string][]string{} // a copy: the configuration is the world's
	for route, ms := range routes {
		own[route] = slices.Clone(ms)
		for _, name := range ms {
			cfg.Nodes[name] = config.Node{Addr: addrs[name], Weight: 1}
		}
	}
	cfg.Servers = map[string]config.Server{"inventory": {OnNodeDown: config.OnNodeDownFail, Routes: own}}
	// a restarted node is held back 400 ms (its default here, 1.05 s, is
	// mostly the probe timeout; marks reach a peer on loopback within a
	// few heartbeats)
	cfg.Health = config.Health{Heartbeat: 50 * time.Millisecond, Timeout: time.Second,
		Backoff: []time.Duration{20 * time.Millisecond}, HoldBack: 400 * time.Millisecond}
	cfg.Breaker = config.Breaker{Failures: 1000, OpenTimeout: 50 * time.Millisecond}
	cfg.Client.CommandTimeout = 2 * time.Second
	cfg.Pipeline.Enabled = false
	cfg.Inventory.ReservationTTL = orderTTL
	cfg.Inventory.MaxReservationTTL = movedTTL
	cfg.Inventory.Retention = time.Hour
	cfg.Inventory.AttemptLease = attemptLease
	cfg.Inventory.GroupCommit = 1
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("explore: configuration: %w", err)
	}
	return &cfg, nil
}

// resetScript empties a node's inventory and gives it back its epoch-1
// topology state: ARGV[1..2] the stamp's topology fields (stampTopo; ""
// for none), then field, value pairs of shardis:topology. The stamp's
// other fields (name, incarnation, write sequence) stay: the routers know
// them.
var resetScript = redis.NewScript(`
for _, k in ipairs(redis.call('KEYS', 'inv:*')) do redis.call('DEL', k) end
redis.call('DEL', 'shardis:topology')
for i, f in ipairs({'epoch', 'attempt'}) do
  if ARGV[i] ~= '' then redis.call('HSET', 'shardis:node', f, ARGV[i]) else redis.call('HDEL', 'shardis:node', f) end
end
for i = 3, #ARGV, 2 do redis.call('HSET', 'shardis:topology', ARGV[i], ARGV[i + 1]) end
return 1
`)

// stampTopo are the stamp's fields a topology write sets (resetScript's
// first two arguments, in this order).
var stampTopo = []string{"epoch", "attempt"}

// setupWait bounds a world's setup waits (its nodes usable again before a
// schedule, a restarted node coming back at a router's next probe; an AOF
// rewrite before a copy): setup steps, not checks, so it is generous; a CI run under
// load ~25 once ended every world of a look with no schedule run, which
// 5s could explain.
const setupWait = 30 * time.Second

// Reset empties every node and waits until every router sees every node
// usable (a restarted node comes back through a health probe).
func (w *World) Reset(ctx context.Context) error {
	if err := w.resetClocks(); err != nil {
		return err
	}
	if err := w.liftMemoryLimits(ctx); err != nil {
		return err
	}
	for _, name := range allNodes {
		if err := resetScript.Run(ctx, w.direct[name], nil, w.saved[name]...).Err(); err != nil {
			return fmt.Errorf("explore: resetting %s: %w", name, err)
		}
	}
	return w.waitUsable(ctx)
}

// waitUsable polls until every router's nodes are usable (at most
// setupWait).
func (w *World) waitUsable(ctx context.Context) error {
	deadline := time.Now().Add(setupWait)
	for {
		down := ""
		for _, r := range append([]*router.Router{w.healR}, w.routers...) {
			for _, name := range nodesT0 {
				if n, err := r.Node(name); err != nil || !n.Usable() {
					down = name
				}
			}
		}
		if down == "" {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("explore: node %s not usable after %v", down, setupWait)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// config is the configuration of topology at ("T0", "T1" or "T2").
func (w *World) config(at string) *config.Config {
	switch at {
	case "T1":
		return w.cfg1
	case "T2":
		return w.cfg2
	}
	return w.cfg0
}

// topologies are the configurations of the topologies a schedule may
// reach: T0 and T1, and T2 when shrink (an apply of T2 ran). A rejoin
// (rejoin.go) reaches T1 again, no other.
func (w *World) topologies(shrink bool) []*config.Config {
	if shrink {
		return []*config.Config{w.cfg0, w.cfg1, w.cfg2}
	}
	return []*config.Config{w.cfg0, w.cfg1}
}

// splitRoutes are the routes a node leaves while it stays in the server,
// when shrink (an apply of T2 ran: observed.ran; T1 to T2, n3 leaves c
// for d; a rejoin from T2 to T1, rejoin.go, has n1 and n2 leave c while
// they stay, the same route, and only after an apply of T2): the apply
// moves the node's stock counters of the route,
// confirmed counts included, and its quota counters to their new homes,
// while its parts, final, stay on it (checkStock, checkQuota). A
// schedule that drew the shrink (Options.Shrink) but never reached the
// apply of T2 splits no route.
func (w *World) splitRoutes(shrink bool) map[string]bool {
	out := map[string]bool{}
	if !shrink {
		return out
	}
	t1, t2 := w.cfg1.Servers["inventory"].Routes, w.cfg2.Servers["inventory"].Routes
	nodes2 := topology.Of(w.cfg2).Nodes()
	for route, ms := range t1 {
		for _, name := range ms {
			if !slices.Contains(t2[route], name) && slices.Contains(nodes2, name) {
				out[route] = true
			}
		}
	}
	return out
}

// Restart kills node name (kill -9) and starts it again from its AOF.
func (w *World) Restart(name string) error {
	return w.srvs[name].Restart()
}

// Close stops the routers and the servers.
func (w *World) Close() {
	for _, r := range append(w.routers, w.healR) {
		if r != nil {
			_ = r.Close()
		}
	}
	for _, c := range w.direct {
		_ = c.Close()
	}
	for _, s := range w.srvs {
		_ = s.Kill()
		_ = s.Close()
	}
	if w.clock.dir != "" {
		_ = os.RemoveAll(w.clock.dir)
	}
}
