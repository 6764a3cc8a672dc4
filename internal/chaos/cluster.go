package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redisproc"
	"github.com/shardis/shardis/internal/service"
	"github.com/shardis/shardis/inventory"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
)

// invServer is the inventory server key of the run's configuration.
const invServer = "inventory"

// cluster is the run's redis-server nodes and the in-process service.
type cluster struct {
	opts   Options
	log    *slog.Logger
	out    io.Writer
	t0     time.Time
	names  []string                     // n1..nN and the spare, sorted
	spare  string                       // the node the topology nemesis adds to and removes from route a
	procs  map[string]*redisproc.Server // by node name (standalone nodes)
	groups map[string]*redisproc.Group  // by node name (Options.Sentinel; sentinel.go)
	httpc  *http.Client
	sync   *recordSync // Options.Sync: the system of record (sync.go); set before the load

	mu sync.Mutex
	// paths tallies the reserve paths of every service instance stopped
	// so far (inventory.Stats), guarded by mu.
	paths map[string]int64
	// cfg, routes and homes change with the topology nemesis (topology.go).
	cfg    *config.Config
	routes map[string][]string // route → node names
	homes  *inventory.Homes    // order homes: inventory.NewHomes
	// seen: every placement of the run (order homes, quota nodes), in order.
	seen   []placement
	srv    *service.Server // nil while the service is down
	addr   string          // last address served; kept while the service restarts
	inv    shardisv1connect.InventoryServiceClient
	admin  shardisv1connect.AdminServiceClient
	direct map[string]*redis.Client // direct clients by address, for healing and checks, made on first use
}

// layout returns the routes over nodes n1..nN: "a" on every node, "b" on
// all but n1, "c" on n1 and nN only.
func layout(names []string) map[string][]string {
	last := names[len(names)-1]
	return map[string][]string{
		"a": append([]string(nil), names...),
		"b": append([]string(nil), names[1:]...),
		"c": {names[0], last},
	}
}

func startCluster(opts Options, log *slog.Logger, out io.Writer) (c *cluster, err error) {
	c = &cluster{opts: opts, log: log, out: out, procs: map[string]*redisproc.Server{}, t0: time.Now()}
	defer func() {
		if err != nil {
			_ = c.close()
		}
	}()
	cfg := config.Default()
	cfg.Service.Listen = "127.0.0.1:0"
	cfg.Nodes = map[string]config.Node{}
	for i := 1; opts.Sentinel && i <= opts.Nodes; i++ {
		c.names = append(c.names, fmt.Sprintf("n%d", i))
	}
	if opts.Sentinel {
		if cfg.Nodes, err = c.startGroups(c.names); err != nil {
			return nil, err
		}
	}
	for i := 1; !opts.Sentinel && i <= opts.Nodes+1; i++ { // the last one is the spare
		name := fmt.Sprintf("n%d", i)
		po := redisproc.Options{AOF: true, KillWithParent: true}
		if opts.Dir != "" {
			po.Dir = filepath.Join(opts.Dir, name)
		}
		s, err := redisproc.Start(po)
		if err != nil {
			return nil, err
		}
		c.names = append(c.names, name)
		c.procs[name] = s
		cfg.Nodes[name] = config.Node{Addr: s.Addr(), Weight: 1}
	}
	if !opts.Sentinel {
		c.spare = c.names[len(c.names)-1]
	}
	c.routes = layout(c.names[:opts.Nodes])
	sort.Strings(c.names)
	cfg.Servers = map[string]config.Server{invServer: {OnNodeDown: config.OnNodeDownFail, Routes: c.routes}}
	cfg.Health = config.Health{
		Heartbeat: 200 * time.Millisecond,
		Timeout:   200 * time.Millisecond,
		Backoff:   []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond},
	}
	cfg.Inventory.ReservationTTL = opts.ReservationTTL
	cfg.Inventory.ReconcileInterval = opts.ReconcileInterval
	cfg.Inventory.Durability = opts.Durability
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("chaos: configuration: %w", err)
	}
	c.cfg = &cfg

	first, err := placementOf(c.cfg)
	if err != nil {
		return nil, err
	}
	c.homes, c.seen = first.homes, []placement{first}
	c.httpc = &http.Client{Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: time.Second}).DialContext,
		MaxIdleConns:        4 * (opts.Clients + 4),
		MaxIdleConnsPerHost: 2 * (opts.Clients + 4),
		IdleConnTimeout:     30 * time.Second,
	}}
	if c.spare != "" {
		fmt.Fprintf(out, "  node %s %s (AOF appendfsync always) spare: joins and leaves route a (topology change)\n", c.spare, c.procs[c.spare].Addr())
	}
	for _, name := range c.names {
		if name == c.spare {
			continue
		}
		if g := c.groups[name]; g != nil {
			fmt.Fprintf(out, "  node %s: Sentinel group %s, master %s, replica %s, sentinels %v (AOF appendfsync always) routes:",
				name, g.Name, g.Data[0].Addr(), g.Data[1].Addr(), g.SentinelAddrs())
		} else {
			fmt.Fprintf(out, "  node %s %s (AOF appendfsync always) routes:", name, c.procs[name].Addr())
		}
		for _, r := range []string{"a", "b", "c"} {
			for _, m := range c.routes[r] {
				if m == name {
					fmt.Fprintf(out, " %s", r)
				}
			}
		}
		fmt.Fprintln(out)
	}
	if err := c.startService(); err != nil {
		return nil, err
	}
	return c, nil
}

// since is the time since the start of the run, for the timeline.
func (c *cluster) since() string {
	return fmt.Sprintf("%7.2fs", time.Since(c.t0).Seconds())
}

// startService starts the service on a new port and points the clients
// at it.
func (c *cluster) startService() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv, err := service.Start(ctx, c.config(), c.log)
	if err != nil {
		return fmt.Errorf("chaos: starting the service: %w", err)
	}
	c.mu.Lock()
	c.srv = srv
	c.addr = srv.Addr()
	c.inv, c.admin = newClients(c.httpc, c.addr)
	c.mu.Unlock()
	return nil
}

// stopService shuts the service down gracefully (in-flight calls get up
// to 3s). The clients keep the old address and get refused meanwhile.
func (c *cluster) stopService() error {
	c.mu.Lock()
	srv := c.srv
	c.srv = nil
	c.mu.Unlock()
	return c.shutdown(srv)
}

// swapService starts a new service instance, points the clients at it
// and returns the previous one, still running (a rolling restart).
func (c *cluster) swapService() (*service.Server, error) {
	c.mu.Lock()
	old := c.srv
	c.mu.Unlock()
	if err := c.startService(); err != nil {
		return nil, err
	}
	return old, nil
}

// shutdown stops a service instance after adding its reserve-path
// counters to the cluster's tally.
func (c *cluster) shutdown(srv *service.Server) error {
	if srv == nil {
		return nil
	}
	st := srv.Inv.Stats()
	c.mu.Lock()
	if c.paths == nil {
		c.paths = map[string]int64{}
	}
	c.paths["local"] += st.LocalReservations
	c.paths["staged"] += st.StagedReservations
	c.paths["staged_fallback"] += st.StagedFallbacks
	c.paths["staged_refused"] += st.StagedRefusals
	c.paths["staged_recovered"] += st.StagedRecovered
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err := srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		return nil // in-flight calls were cut: that is part of the fault
	}
	return err
}

func (c *cluster) serviceUp() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.srv != nil
}

// rpc returns the Connect clients of the current service address.
func (c *cluster) rpc() (shardisv1connect.InventoryServiceClient, shardisv1connect.AdminServiceClient) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inv, c.admin
}

// directClient returns a plain go-redis client of a node (of its group's
// current master), bypassing the service.
func (c *cluster) directClient(name string) *redis.Client {
	addr := c.nodeAddr(name)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.direct == nil {
		c.direct = map[string]*redis.Client{}
	}
	if cl := c.direct[addr]; cl != nil {
		return cl
	}
	cl := redis.NewClient(&redis.Options{
		Addr: addr, Protocol: 2, DisableIdentity: true,
		DialTimeout: time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second,
	})
	c.direct[addr] = cl
	return cl
}

// loadStock loads the run's SKUs through the service.
func (c *cluster) loadStock(opts Options) ([]SKU, error) {
	hot := 30 + 8*int64(opts.Duration/time.Second)
	skus := []SKU{
		{Route: "a", SKU: "big", Loaded: 1_000_000},
		{Route: "a", SKU: "hot", Loaded: hot},
		{Route: "a", SKU: "lim", Loaded: 1_000_000, Limit: 4},
		{Route: "b", SKU: "big", Loaded: 1_000_000},
		{Route: "b", SKU: "lim", Loaded: 1_000_000, Limit: 3},
		{Route: "c", SKU: "big", Loaded: 1_000_000},
		{Route: "c", SKU: "hot", Loaded: hot},
	}
	for _, s := range skus {
		if err := c.loadOne(s); err != nil {
			return nil, err
		}
	}
	return skus, nil
}

// loadOne loads SKU s through the service until every node of its route
// reports it loaded with its limit, as README tells an operator whose
// LoadStock failed part way: read GetStock (every node reachable) and load
// only what is missing. A loaded machine can mark a node down for a probe
// that timed out while the run sets up (a busy CI run failed on it); the
// faults start only after the load. It gives up after 30 s.
func (c *cluster) loadOne(s SKU) error {
	inv, _ := c.rpc()
	deadline := time.Now().Add(30 * time.Second)
	var last error
	for ; time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		lvl, err := inv.GetStock(ctx, connect.NewRequest(&v1.GetStockRequest{RouteKey: s.Route, SkuId: s.SKU}))
		cancel()
		var st *v1.StockLevel
		if err == nil {
			st = lvl.Msg.GetStock()
			err = unreadNode(st)
		}
		if err != nil && connect.CodeOf(err) != connect.CodeNotFound { // not found: never loaded yet
			last = err
			continue
		}
		missing, limitsDiffer := s.Loaded, false
		if st != nil {
			missing -= st.Loaded
			for _, n := range st.Nodes {
				limitsDiffer = limitsDiffer || n.PerUserLimit != s.Limit
			}
		}
		if missing < 0 {
			return fmt.Errorf("chaos: LoadStock %s/%s: %d loaded, more than the %d wanted", s.Route, s.SKU, st.Loaded, s.Loaded)
		}
		if missing == 0 && !limitsDiffer {
			return nil
		}
		ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
		_, last = inv.LoadStock(ctx, connect.NewRequest(&v1.LoadStockRequest{
			RouteKey: s.Route, SkuId: s.SKU, Quantity: missing, PerUserLimit: proto.Int64(s.Limit)}))
		cancel()
	}
	return fmt.Errorf("chaos: LoadStock %s/%s: not loaded after 30 s: %w", s.Route, s.SKU, last)
}

// unreadNode is nil when every node of st answered, else an error naming
// the first that did not: its loaded units are not counted in st.
func unreadNode(st *v1.StockLevel) error {
	for _, n := range st.GetNodes() {
		if !n.Reachable || n.Error != "" {
			return fmt.Errorf("node %s not read: %s", n.Node, n.Error)
		}
	}
	return nil
}

// incarnations returns every node's stamp incarnation.
func (c *cluster) incarnations() (map[string]string, error) {
	out := map[string]string{}
	for _, name := range c.names {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		inc, err := c.directClient(name).HGet(ctx, "shardis:node", "incarnation").Result()
		cancel()
		if err != nil {
			return nil, fmt.Errorf("chaos: node %s: reading its stamp: %w", name, err)
		}
		out[name] = inc
	}
	return out, nil
}

// healAll resumes paused nodes, restarts killed ones, starts the service
// if it is down, re-enables every route on every node and waits until the
// service sees every node UP with a closed breaker.
func (c *cluster) healAll() error {
	if err := c.healGroups(); err != nil {
		return err
	}
	for _, name := range c.names {
		p := c.procs[name]
		if p == nil {
			continue // a Sentinel group: healGroups
		}
		if err := p.Resume(); err != nil {
			return err
		}
		if !p.Running() {
			if err := p.Restart(); err != nil {
				return fmt.Errorf("chaos: heal: restarting %s: %w", name, err)
			}
			fmt.Fprintf(c.out, "%s heal: restarted %s\n", c.since(), name)
		}
	}
	if !c.serviceUp() {
		if err := c.startService(); err != nil {
			return err
		}
		fmt.Fprintf(c.out, "%s heal: started the service\n", c.since())
	}
	if err := c.finishTopology(); err != nil {
		return err
	}
	for route, members := range c.layoutNow() {
		for _, name := range members {
			if err := c.setRoute(name, route, true, 20); err != nil {
				return fmt.Errorf("chaos: heal: undrain %s on %s: %w", route, name, err)
			}
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, admin := c.rpc()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		res, err := admin.ListNodes(ctx, connect.NewRequest(&v1.ListNodesRequest{}))
		cancel()
		if err == nil {
			up := 0
			for _, n := range res.Msg.Nodes {
				if n.State == v1.NodeState_NODE_STATE_UP && n.Breaker != "open" {
					up++
				}
			}
			if up == len(c.names) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("chaos: heal: nodes not all UP after 60s (last: %v, err %v)", res, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// setRoute drains (enabled=false) or re-enables a route on a node through
// the AdminService, trying up to tries times (the service may be
// restarting).
func (c *cluster) setRoute(nodeName, route string, enabled bool, tries int) error {
	var err error
	for i := 0; i < tries; i++ {
		_, admin := c.rpc()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err = admin.SetRouteEnabled(ctx, connect.NewRequest(&v1.SetRouteEnabledRequest{
			Node: nodeName, Server: invServer, Route: route, Enabled: enabled}))
		cancel()
		if err == nil {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return err
}

// waitNoPending polls every node's pending index until it is empty
// everywhere or timeout passes; it returns what is left.
func (c *cluster) waitNoPending(timeout time.Duration) (int64, error) {
	deadline := time.Now().Add(timeout)
	for {
		var total int64
		var lastErr error
		for _, name := range c.names {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			n, err := c.directClient(name).ZCard(ctx, inventory.PendingKey).Result()
			cancel()
			if err != nil {
				lastErr = err
				n = 1
			}
			total += n
		}
		if total == 0 {
			return 0, nil
		}
		if time.Now().After(deadline) {
			if lastErr != nil {
				return total, fmt.Errorf("chaos: reading the pending index: %w", lastErr)
			}
			return total, nil
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// close stops the service and every node, and closes the clients.
func (c *cluster) close() error {
	errs := []error{c.stopService()}
	c.mu.Lock()
	for _, cl := range c.direct {
		_ = cl.Close()
	}
	c.direct = nil
	c.mu.Unlock()
	for _, name := range c.names {
		if p := c.procs[name]; p != nil {
			if err := p.Close(); err != nil {
				errs = append(errs, fmt.Errorf("chaos: stopping %s: %w", name, err))
			}
		}
	}
	for name, g := range c.groups {
		if err := g.Close(); err != nil {
			errs = append(errs, fmt.Errorf("chaos: stopping the group of %s: %w", name, err))
		}
	}
	if c.httpc != nil {
		c.httpc.CloseIdleConnections()
	}
	return errors.Join(errs...)
}

// redoViaService reads every redo-log queue of every node that serves a
// route of the run's layout through the AdminService, from offset 0, as a
// database-sync consumer would; a node it did not read has no key in the
// result.
func (c *cluster) redoViaService() (map[string]map[string][]*v1.RedoEntry, error) {
	out := map[string]map[string][]*v1.RedoEntry{}
	_, admin := c.rpc()
	serving := map[string]bool{}
	for _, members := range c.layoutNow() {
		for _, name := range members {
			serving[name] = true
		}
	}
	for _, name := range c.names {
		if !serving[name] {
			// the spare after it left route a: the service refuses to read
			// a node outside the applied topology (SHARDIS_EPOCH), and its
			// queues are checked directly (seed 444 skipped every node's
			// comparison for it)
			continue
		}
		out[name] = map[string][]*v1.RedoEntry{}
		for q := 0; q < c.config().Inventory.RedoQueues; q++ {
			var after int64
			for {
				var res *connect.Response[v1.ReadRedoLogResponse]
				var err error
				// A node may flap on an overloaded machine: retry what
				// may be transient for up to ~10s.
				for try := 0; try < 40; try++ {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					res, err = admin.ReadRedoLog(ctx, connect.NewRequest(&v1.ReadRedoLogRequest{
						Node: name, Queue: int32(q), AfterOffset: after, Limit: 10000}))
					cancel()
					if c := connect.CodeOf(err); err == nil || (c != connect.CodeUnavailable && c != connect.CodeDeadlineExceeded) {
						break
					}
					time.Sleep(250 * time.Millisecond)
				}
				if err != nil {
					return nil, fmt.Errorf("ReadRedoLog %s queue %d after %d: %w", name, q, after, err)
				}
				if len(res.Msg.Entries) == 0 {
					break
				}
				key := res.Msg.RedoLog
				out[name][key] = append(out[name][key], res.Msg.Entries...)
				after = res.Msg.Entries[len(res.Msg.Entries)-1].Offset
			}
		}
	}
	return out, nil
}
