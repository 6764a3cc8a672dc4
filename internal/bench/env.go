package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redisproc"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
)

// Server keys and routes of the benchmark configuration.
const (
	kvServer  = "bench" // router throughput: route kvRoute over every node
	kvRoute   = "kv"
	invServer = "inventory" // config.Default's inventory.server
	routeAll  = "all"       // inventory route over every node
)

// nodeNames are the benchmark's node names, in configuration order.
var nodeNames = []string{"n1", "n2", "n3"}

// singleRoutes are inventory routes of one node each: routeOf[i] lives on
// nodeNames[i], so a 3-item order over them touches three nodes.
var singleRoutes = []string{"r1", "r2", "r3"}

// clientOptions returns the go-redis options every baseline client of the
// benchmark uses: the options shardis gives its node clients (node.New),
// so the comparison is between routing layers, not client settings. The
// pool size is go-redis's default (10 per GOMAXPROCS), as for shardis's
// nodes.
func clientOptions(addr string, timeout time.Duration) *redis.Options {
	return &redis.Options{
		Addr:                     addr,
		Protocol:                 2,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		DialTimeout:              timeout,
		DialerRetries:            1,
		ReadTimeout:              time.Second,
		WriteTimeout:             time.Second,
		ContextTimeoutEnabled:    true,
		MaxRetries:               -1,
		PoolTimeout:              time.Second,
	}
}

// Cluster is three redis-server nodes and everything the benchmark routes
// over them: the shardis router and inventory, a direct go-redis client
// per node, a go-redis Ring and a twemproxy.
type Cluster struct {
	Servers []*redisproc.Server  // like nodeNames
	Addrs   []string             // the nodes' host:port, like nodeNames
	Cfg     *config.Config       // the configuration Router and the inventories run on (BenchConfig)
	Router  *router.Router       // the shardis router over the nodes, auto-pipelining on
	Inv     *inventory.Inventory // the inventory over Router, shipped settings
	// InvAlone is an inventory over Router with group commit off
	// (inventory.group_commit 1): every script call carries one order.
	InvAlone *inventory.Inventory
	Log      *slog.Logger // the logger everything started is given

	Direct   []*redis.Client        // like nodeNames
	DirectAP []*redis.AutoPipeliner // Direct[i]'s go-redis auto-pipeliner (blocking face)
	HandRing *router.Ring           // members like nodeNames: picks Direct[i] by hand
	// PlainRouter is the router of the same build and nodes with
	// auto-pipelining off (single-caller latency); nil without baselines.
	PlainRouter *router.Router
	// PlainInv is the inventory over PlainRouter; nil without baselines.
	PlainInv *inventory.Inventory
	// Ring is a go-redis Ring over the nodes (a baseline); nil without
	// baselines.
	Ring *redis.Ring
	// Twemproxy is the twemproxy process in front of the nodes; nil
	// without baselines.
	Twemproxy *Twemproxy
	// Service is the RPC section's service child while it runs
	// (rpcserve.go); its CPU is counted apart (Sample.ServiceCPU).
	Service    atomic.Pointer[ServiceProc]
	TwemClient *redis.Client   // the go-redis client to Twemproxy; nil without baselines
	Admin      []*redis.Client // plain clients for setup (flush, preload)
	Meter      *CPUMeter       // CPU of other processes (see runRounds)
}

// Pids returns the pids of the cluster's redis-servers and twemproxy.
func (c *Cluster) Pids() []int {
	var out []int
	for _, s := range c.Servers {
		out = append(out, s.Pid())
	}
	if c.Twemproxy != nil {
		out = append(out, c.Twemproxy.Pid())
	}
	if svc := c.Service.Load(); svc != nil {
		out = append(out, svc.Pid())
	}
	return out
}

// BenchConfig returns the shardis configuration of the benchmark over
// addrs (like nodeNames): config.Default() (health and breaker defaults)
// with the key-value route and the inventory routes.
func BenchConfig(addrs []string) *config.Config {
	cfg := config.Default()
	cfg.Service.Listen = "127.0.0.1:0"
	cfg.Nodes = map[string]config.Node{}
	for i, name := range nodeNames {
		cfg.Nodes[name] = config.Node{Addr: addrs[i], Weight: 1}
	}
	inv := map[string][]string{routeAll: nodeNames}
	for i, r := range singleRoutes {
		inv[r] = []string{nodeNames[i]}
	}
	cfg.Servers = map[string]config.Server{
		kvServer:  {OnNodeDown: config.OnNodeDownFail, Routes: map[string][]string{kvRoute: nodeNames}},
		invServer: {OnNodeDown: config.OnNodeDownFail, Routes: inv},
	}
	return &cfg
}

// StartCluster starts the nodes (aof: append-only file with appendfsync
// always, as in the drill), the router and the inventory; withBaselines
// adds the direct clients, the go-redis Ring and twemproxy.
func StartCluster(ctx context.Context, aof, withBaselines bool, log *slog.Logger) (c *Cluster, err error) {
	return startCluster(ctx, aof, withBaselines, log, nil)
}

// startCluster is StartCluster with tune, when not nil, given the
// configuration before anything is built from it (a measure whose nodes
// run many times slower, under callgrind, gives them longer timeouts).
func startCluster(ctx context.Context, aof, withBaselines bool, log *slog.Logger, tune func(*config.Config)) (c *Cluster, err error) {
	c = &Cluster{Log: log}
	c.Meter = NewCPUMeter(c.Pids)
	defer func() {
		if err != nil {
			c.Close()
			c = nil
		}
	}()
	for range nodeNames {
		s, err := redisproc.Start(redisproc.Options{AOF: aof, KillWithParent: true})
		if err != nil {
			return c, err
		}
		c.Servers = append(c.Servers, s)
		c.Addrs = append(c.Addrs, s.Addr())
	}
	c.Cfg = BenchConfig(c.Addrs)
	if tune != nil {
		tune(c.Cfg)
	}
	if err := c.Cfg.Validate(); err != nil {
		return c, err
	}
	for _, a := range c.Addrs {
		c.Admin = append(c.Admin, redis.NewClient(&redis.Options{Addr: a, Protocol: 2, DisableIdentity: true,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
			ReadTimeout:              30 * time.Second, PoolSize: 4}))
	}
	if c.Router, err = router.New(ctx, c.Cfg, router.Options{KeepData: c.Cfg.KeepData(), Logger: log}); err != nil {
		return c, err
	}
	for _, n := range c.Router.Nodes() {
		if n.State() != node.StateUp {
			return c, fmt.Errorf("node %s is not up after the first probe: %v", n.Name(), n.DownReason())
		}
	}
	if c.Inv, err = inventory.New(c.Router, inventory.Options{Logger: log}); err != nil {
		return c, err
	}
	if c.InvAlone, err = inventory.New(c.Router, inventory.Options{Logger: log, GroupCommit: 1}); err != nil {
		return c, err
	}
	if !withBaselines {
		return c, nil
	}

	plain := *c.Cfg
	plain.Pipeline.Enabled = false
	if c.PlainRouter, err = router.New(ctx, &plain, router.Options{KeepData: plain.KeepData(), Logger: log}); err != nil {
		return c, err
	}
	if c.PlainInv, err = inventory.New(c.PlainRouter, inventory.Options{Logger: log}); err != nil {
		return c, err
	}
	addrMap := map[string]string{}
	for i, name := range nodeNames {
		d := redis.NewClient(clientOptions(c.Addrs[i], c.Cfg.Health.Timeout))
		ap, err := d.AutoPipeline()
		if err != nil {
			return c, fmt.Errorf("go-redis AutoPipeline: %w", err)
		}
		c.Direct = append(c.Direct, d)
		c.DirectAP = append(c.DirectAP, ap)
		addrMap[name] = c.Addrs[i]
	}
	// The same ring the router builds, member i = nodeNames[i] = Direct[i].
	if c.HandRing, err = router.ConfigRing(c.Cfg, nodeNames); err != nil {
		return c, err
	}
	base := clientOptions("", c.Cfg.Health.Timeout)
	c.Ring = redis.NewRing(&redis.RingOptions{
		Addrs:                 addrMap,
		Protocol:              base.Protocol,
		DisableIdentity:       base.DisableIdentity,
		DialTimeout:           base.DialTimeout,
		DialerRetries:         base.DialerRetries,
		ReadTimeout:           base.ReadTimeout,
		WriteTimeout:          base.WriteTimeout,
		ContextTimeoutEnabled: base.ContextTimeoutEnabled,
		MaxRetries:            base.MaxRetries,
		PoolTimeout:           base.PoolTimeout,
		NewClient: func(o *redis.Options) *redis.Client {
			o.MaintNotificationsConfig = base.MaintNotificationsConfig
			return redis.NewClient(o)
		},
	})
	if c.Twemproxy, err = StartTwemproxy(nodeNames, c.Addrs); err != nil {
		return c, err
	}
	// One client replaces the three: it gets the three pools' connections
	// (3 × go-redis's default), so twemproxy sees as many concurrent
	// requests as the nodes do in the other variants.
	topt := clientOptions(c.Twemproxy.Addr(), c.Cfg.Health.Timeout)
	topt.PoolSize = 3 * 10 * goMaxProcs()
	topt.Dialer = TwemproxyDialer(topt.DialTimeout)
	c.TwemClient = redis.NewClient(topt)
	return c, nil
}

// Close stops everything StartCluster started. It is idempotent.
func (c *Cluster) Close() {
	if c == nil {
		return
	}
	if c.TwemClient != nil {
		_ = c.TwemClient.Close()
		c.TwemClient = nil
	}
	if c.Twemproxy != nil {
		c.Twemproxy.Kill()
		c.Twemproxy = nil
	}
	if c.Ring != nil {
		_ = c.Ring.Close()
		c.Ring = nil
	}
	for _, d := range c.Direct {
		_ = d.Close() // closes its auto-pipeliner too
	}
	c.Direct, c.DirectAP = nil, nil
	// Each inventory first (its commits still off the callers' paths end),
	// then its router, as inventory.Inventory.Close asks.
	for _, inv := range []*inventory.Inventory{c.PlainInv, c.Inv, c.InvAlone} {
		if inv != nil {
			inv.Close()
		}
	}
	c.PlainInv, c.Inv, c.InvAlone = nil, nil, nil
	if c.PlainRouter != nil {
		_ = c.PlainRouter.Close()
		c.PlainRouter = nil
	}
	if c.Router != nil {
		_ = c.Router.Close()
		c.Router = nil
	}
	for _, a := range c.Admin {
		_ = a.Close()
	}
	c.Admin = nil
	for _, s := range c.Servers {
		_ = s.Kill()
		_ = s.Close()
	}
	c.Servers = nil
}

// Reset empties every node but keeps its shardis identity stamp, in one
// MULTI per node so no script ever sees a node without its stamp (which
// would be reported as data loss): FLUSHALL ASYNC and re-writing the stamp
// happen atomically. The stamp is WATCHed from its read to the EXEC, so a
// write that lands in between (a commit still on its way from the run
// before: carried commits wait a few ms for a group, inventory/carry.go)
// makes Reset read it again instead of writing back an older write
// sequence, which the inventory would take for a node gone back in time.
// Benchmark variants start from the same, empty state. Reset returns once
// every node has freed what it flushed (lazyfree_pending_objects 0, up to
// 30s): a node frees a flushed keyspace on a thread of its own, and the
// hundreds of thousands of keys a run leaves took a second or more of
// that thread's CPU, which the next run measured would have paid (its
// nodes' CPU and the cores its clients share).
func (c *Cluster) Reset(ctx context.Context) error {
	var errs []error
	for i, a := range c.Admin {
		errs = append(errs, resetNode(ctx, a, nodeNames[i]))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for i, a := range c.Admin {
		if err := waitLazyFree(ctx, a, 30*time.Second); err != nil {
			return fmt.Errorf("%s: %w", nodeNames[i], err)
		}
	}
	return nil
}

// waitLazyFree waits until the node a talks to has no lazy free pending
// (INFO memory's lazyfree_pending_objects 0), up to limit.
func waitLazyFree(ctx context.Context, a *redis.Client, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		info, err := a.InfoMap(ctx, "memory").Result()
		if err != nil {
			return fmt.Errorf("INFO memory: %w", err)
		}
		n := info["Memory"]["lazyfree_pending_objects"]
		if n == "0" {
			return nil
		}
		if n == "" {
			return fmt.Errorf("INFO memory has no lazyfree_pending_objects")
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s objects still pending a lazy free after %v", n, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// resetNode is Reset on one node, retried while the stamp changes under it.
func resetNode(ctx context.Context, a *redis.Client, name string) error {
	for range 100 {
		err := a.Watch(ctx, func(tx *redis.Tx) error {
			stamp, err := tx.HGetAll(ctx, node.StampKey).Result()
			if err != nil {
				return err
			}
			if len(stamp) == 0 {
				return fmt.Errorf("node has no shardis stamp")
			}
			_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.FlushAllAsync(ctx)
				p.HSet(ctx, node.StampKey, stamp)
				return nil
			})
			return err
		}, node.StampKey)
		if !errors.Is(err, redis.TxFailedErr) {
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			return nil
		}
	}
	return fmt.Errorf("%s: the stamp kept changing under Reset", name)
}

// waitUsable waits until every node of r is usable (UP, breaker not
// open), up to limit.
func waitUsable(nodes []*node.Node, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		var down []string
		for _, n := range nodes {
			if !n.Usable() {
				down = append(down, n.Name())
			}
		}
		if len(down) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nodes %v not usable after %v", down, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// retrySetup runs a setup step, and on failure (a node marked DOWN or its
// breaker opened by an overloaded machine) waits until every node is
// usable and tries again, three times in all.
func retrySetup(nodes []*node.Node, f func() error) error {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if err = waitUsable(nodes, 15*time.Second); err != nil {
			continue
		}
		if err = f(); err == nil {
			return nil
		}
	}
	return err
}

// procCPU is the CPU time used so far by this process, the redis-servers
// and twemproxy.
type procCPU struct{ client, server, proxy, service uint64 }

func (c *Cluster) procCPU() procCPU {
	p := procCPU{client: procTicks(os.Getpid())}
	for _, s := range c.Servers {
		p.server += procTicks(s.Pid())
	}
	if c.Twemproxy != nil {
		p.proxy = procTicks(c.Twemproxy.Pid())
	}
	if svc := c.Service.Load(); svc != nil {
		p.service = procTicks(svc.Pid())
	}
	return p
}

func ticks(n uint64) time.Duration { return time.Duration(n) * time.Second / clockTicks }

// measure runs a load and adds to the sample the CPU time every process
// used and the commands the nodes executed.
func (c *Cluster) measure(l *Load, d time.Duration, op Op) Sample {
	ctx := context.Background()
	a0 := c.commandStats(ctx)
	var ma, mb runtime.MemStats
	runtime.ReadMemStats(&ma)
	a := c.procCPU()
	fa := c.Meter.Snap()
	s := l.Run(d, op)
	c.Meter.Note(Foreign(fa, c.Meter.Snap()))
	b := c.procCPU()
	runtime.ReadMemStats(&mb)
	b0 := c.commandStats(ctx)
	s.Mallocs = int64(mb.Mallocs - ma.Mallocs)
	s.ClientCPU, s.ServerCPU, s.ProxyCPU = ticks(b.client-a.client), ticks(b.server-a.server), ticks(b.proxy-a.proxy)
	s.ServiceCPU = ticks(b.service - a.service)
	s.Scripts, s.ScriptExec, s.Commands = b0.scripts-a0.scripts, time.Duration(b0.scriptUsec-a0.scriptUsec)*time.Microsecond,
		b0.commands-a0.commands
	return s
}

// cmdStats sums INFO commandstats over the nodes: script calls (EVAL,
// EVALSHA, FCALL) and the time spent running them, and every other command
// (those that scripts call are counted there too). INFO itself is left
// out.
type cmdStats struct{ scripts, scriptUsec, commands int64 }

func (c *Cluster) commandStats(ctx context.Context) cmdStats {
	var st cmdStats
	for _, a := range c.Admin {
		info, err := a.Info(ctx, "commandstats").Result()
		if err != nil {
			continue
		}
		for _, line := range strings.Split(info, "\n") {
			name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" {
				continue
			}
			script := name == "cmdstat_eval" || name == "cmdstat_evalsha" || name == "cmdstat_fcall"
			for _, kv := range strings.Split(rest, ",") {
				k, v, _ := strings.Cut(kv, "=")
				n, _ := strconv.ParseInt(v, 10, 64)
				switch {
				case k == "calls" && script:
					st.scripts += n
				case k == "calls":
					st.commands += n
				case k == "usec" && script:
					st.scriptUsec += n
				}
			}
		}
	}
	return st
}
