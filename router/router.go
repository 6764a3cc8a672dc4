// Package router routes keys to standalone Redis nodes.
//
// A configuration maps first-level server keys (order, product, inventory …)
// and their second-level route keys (clothes, electronics …) onto sets of
// nodes. Each (server, route) pair is a [Set] with its own consistent-hash
// [Ring]; a key goes to the first node of its ring walk that is UP and
// enabled for the route. What happens when that home node is down is the
// server's policy: "fail" returns an error wrapping [ErrUnavailable] (keys
// never move silently), "next" falls through to the next candidate.
//
// The [Router] owns policy; [node] wraps one endpoint and [health] probes
// them. Create one Router per process with [New], share it, and [Router.Close]
// it on shutdown.
package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/health"
	"github.com/shardis/shardis/node"
)

var (
	// ErrUnavailable is wrapped by the error of a key that no usable node
	// can serve: its home node is DOWN or its breaker is open (policy
	// "fail"), or every node of the set is (policy "next").
	ErrUnavailable = errors.New("no node available")
	// ErrUnknownRoute is wrapped by the error for a (server, route) pair the
	// configuration does not define.
	ErrUnknownRoute = errors.New("unknown server or route")
	// ErrUnknownNode is wrapped by the error for a node name the
	// configuration does not define.
	ErrUnknownNode = errors.New("unknown node")
)

// Options configures [New]. The zero value works.
type Options struct {
	// Logger receives node state changes, breaker changes and identity
	// problems.
	// default: slog.Default()
	Logger *slog.Logger
	// OnStateChange, when set, is called with every node state change after
	// it is logged, outside any lock, in order per node. It must not block
	// for long.
	OnStateChange func(health.Event)
	// OnProbe, when set, is called after every health probe of a node with
	// its duration and error (for metrics). It must be cheap.
	OnProbe func(node string, d time.Duration, err error)
	// ObserveCommand, when set, is called after every command that reached
	// a node, with its duration and whether it was a node failure. It runs
	// on the caller's goroutine and must be cheap (a histogram observe).
	ObserveCommand func(node string, d time.Duration, failure bool)
	// Clock drives the health scheduler.
	// default: the real clock
	Clock health.Clock
	// Hooks are added to every go-redis client of every node, including
	// the clients a node builds anew after an outage, outermost: they see
	// every command and pipeline callers issue (e.g. redisotel tracing).
	// default: none
	Hooks []redis.Hook
	// KeepData lists the server keys whose nodes hold data that must not
	// be lost (an inventory's server, its inventory.server). Each of their
	// nodes is stamped, its peers witness its acknowledged writes, and it
	// is refused when it comes back with less than was acknowledged, until
	// an operator accepts its data (node.Options.Critical, witness.go); its
	// maxmemory policy is judged by the stricter rule in Status. An unknown
	// key is an error of New. inventory.New refuses a router that does not
	// keep its server's data.
	// default: none
	KeepData []string
}

// Router routes keys of configured (server, route) sets to nodes. It is
// safe for concurrent use; its sets and nodes are fixed at [New].
type Router struct {
	cfg   *config.Config
	log   *slog.Logger
	opts  Options
	nodes map[string]*node.Node // immutable after New
	names []string              // sorted node names
	sets  map[node.RouteKey]*Set
	sched *health.Scheduler
	wit   *witnesses
	// critical marks the nodes of the servers of Options.KeepData (data
	// that must not be lost); immutable after New.
	critical map[string]bool
}

// New builds a router from a validated configuration, connects to every
// node and waits until each has been probed once or ctx is done, whichever
// comes first (a node not probed by then stays DOWN until its first probe
// answers). Unreachable nodes are not an error: they are DOWN and probed
// on the backoff list. New fails only on what it is given: an invalid
// configuration, an Options.KeepData that names no server of it, or TLS
// files (a node's CA, certificate or key) that do not load.
func New(ctx context.Context, cfg *config.Config, opts Options) (*Router, error) {
	if cfg == nil {
		return nil, errors.New("router: nil config")
	}
	if err := cfg.ValidateRouter(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	r := &Router{
		cfg: cfg, log: opts.Logger, opts: opts,
		nodes: make(map[string]*node.Node, len(cfg.Nodes)),
		sets:  map[node.RouteKey]*Set{},
	}

	routesOf := map[string][]node.RouteKey{}
	for sname, srv := range cfg.Servers {
		for rname, members := range srv.Routes {
			for _, m := range members {
				routesOf[m] = append(routesOf[m], node.RouteKey{Server: sname, Route: rname})
			}
		}
	}
	critical, err := keptNodes(cfg, opts.KeepData)
	if err != nil {
		return nil, err
	}
	r.critical = critical
	r.wit = newWitnesses(r)
	// The scheduler is created after the nodes; OnFailure reaches it
	// through this holder, set before any command can run.
	var sched *health.Scheduler
	for name, nc := range cfg.Nodes {
		tlsCfg, err := NodeTLS(name, nc)
		if err != nil {
			r.closeNodes()
			return nil, fmt.Errorf("router: %w", err)
		}
		n, err := node.New(node.Options{
			Name: name, Addr: nc.Addr, Username: nc.Username, Password: nc.Password, DB: nc.DB,
			Sentinel:           sentinelOptions(nc),
			TLSConfig:          tlsCfg,
			Routes:             routesOf[name],
			DialTimeout:        cfg.Health.Timeout,
			ProbeTimeout:       cfg.Health.Timeout,
			BreakerFailures:    cfg.Breaker.Failures,
			BreakerOpenTimeout: cfg.Breaker.OpenTimeout,
			Critical:           critical[name],
			Settle:             cfg.HoldBackOrDefault(),
			Witnesses:          r.wit,
			Pipeline:           pipelineOptions(cfg.Pipeline),
			BusyPipeline:       busyPipelineOptions(cfg.Pipeline),
			PipelineFrom:       cfg.Pipeline.From,
			BusyFrom:           cfg.Pipeline.BusyFrom,
			Hooks:              opts.Hooks,
			CommandTimeout:     cfg.Client.CommandTimeout,
			PoolSize:           cfg.Client.PoolSize,
			OnFailure:          func() { sched.Trigger(name) },
			Observe:            observer(opts.ObserveCommand, name),
			Logger:             opts.Logger,
		})
		if err != nil {
			r.closeNodes()
			return nil, fmt.Errorf("router: node %s: %w", name, err)
		}
		r.nodes[name] = n
		r.names = append(r.names, name)
	}
	sort.Strings(r.names)

	for sname, srv := range cfg.Servers {
		for rname, members := range srv.Routes {
			set, err := newSet(node.RouteKey{Server: sname, Route: rname}, srv.OnNodeDown, members, cfg, r.nodes)
			if err != nil {
				r.closeNodes()
				return nil, err
			}
			r.sets[set.key] = set
		}
	}

	// The marks peers hold, read before the first probes compare stamps
	// with them (probes never talk to peers: node/witness.go).
	r.wit.readViews(ctx)
	targets := make([]health.Target, 0, len(r.names))
	for _, name := range r.names {
		targets = append(targets, r.nodes[name])
	}
	sched = health.New(targets, health.Settings{
		Heartbeat: cfg.Health.Heartbeat,
		Backoff:   cfg.Health.Backoff,
		OnChange:  r.onChange,
		OnProbe:   opts.OnProbe,
		Clock:     opts.Clock,
	})
	r.sched = sched
	go r.wit.run(cfg.Health.Heartbeat)
	select {
	case <-sched.Ready():
	case <-ctx.Done():
	}
	r.logDownAtStart()
	return r, nil
}

// logDownAtStart logs each node that is not UP once New returns: a node
// DOWN from its first probe changes no state, so onChange never logs it.
func (r *Router) logDownAtStart() {
	for _, name := range r.names {
		n := r.nodes[name]
		if n.State() == node.StateUp {
			continue
		}
		var reason any = "no probe answered before New returned"
		err := n.DownReason()
		if err != nil {
			reason = err
		}
		if errors.Is(err, node.ErrHeldBack) {
			// A new server process: UP once the hold ends, in a moment.
			r.log.Info("node held back at start", "node", name, "addr", n.Addr(), "err", reason)
			continue
		}
		r.log.Warn("node down at start", "node", name, "addr", n.Addr(), "err", reason)
	}
}

// sentinelOptions returns the Sentinel settings of a node, nil for a
// standalone node.
func sentinelOptions(nc config.Node) *node.SentinelOptions {
	if !nc.Sentinel.On() {
		return nil
	}
	s := nc.Sentinel
	return &node.SentinelOptions{
		Master: s.Master, Addrs: append([]string(nil), s.Addrs...),
		Username: s.Username, Password: s.Password,
		ReadFromReplicas: nc.ReadFrom == config.ReadFromReplicaPreferred,
	}
}

// pipelineOptions turns the pipeline configuration into go-redis's
// auto-pipeliner options, nil when auto-pipelining is off.
func pipelineOptions(p config.Pipeline) *redis.AutoPipelineOptions {
	if !p.Enabled {
		return nil
	}
	o := redis.DefaultAutoPipelineOptions()
	o.MaxBatchSize = p.MaxBatch
	return o
}

// busyPipelineOptions returns the options of the busy auto-pipeliner: the
// prompt one's with the busy flush delay and batch target; nil when
// auto-pipelining or the busy pipeliner is off.
func busyPipelineOptions(p config.Pipeline) *redis.AutoPipelineOptions {
	if !p.Enabled || p.BusyFlushDelay <= 0 {
		return nil
	}
	o := pipelineOptions(p)
	o.MaxFlushDelay = p.BusyFlushDelay
	o.MaxBatchSize = p.BusyMaxBatch
	if o.MaxBatchSize <= 0 {
		o.MaxBatchSize = 16
	}
	return o
}

func observer(f func(string, time.Duration, bool), name string) func(time.Duration, bool) {
	if f == nil {
		return nil
	}
	return func(d time.Duration, failure bool) { f(name, d, failure) }
}

func (r *Router) onChange(ev health.Event) {
	if ev.Up {
		r.log.Info("node up", "node", ev.Target)
	} else {
		r.log.Warn("node down", "node", ev.Target, "err", ev.Err, "failed_probes", ev.FailedProbes)
		r.wit.nodeDown(ev.Target)
	}
	if r.opts.OnStateChange != nil {
		r.opts.OnStateChange(ev)
	}
}

// Config returns the configuration the router was built from. Do not
// modify it.
func (r *Router) Config() *config.Config { return r.cfg }

// Set returns the node set of a (server, route) pair, or an error wrapping
// [ErrUnknownRoute]. Holding the *Set saves a map lookup per key.
func (r *Router) Set(server, route string) (*Set, error) {
	s := r.sets[node.RouteKey{Server: server, Route: route}]
	if s == nil {
		return nil, r.unknownRoute(server, route)
	}
	return s, nil
}

func (r *Router) unknownRoute(server, route string) error {
	if _, ok := r.cfg.Servers[server]; !ok {
		return fmt.Errorf("%w: server %q is not configured", ErrUnknownRoute, server)
	}
	return fmt.Errorf("%w: server %q has no route %q", ErrUnknownRoute, server, route)
}

// Pick returns the node a key of (server, route) goes to now; see [Set.Pick].
func (r *Router) Pick(server, route, key string) (*node.Node, error) {
	s, err := r.Set(server, route)
	if err != nil {
		return nil, err
	}
	return s.Pick(key)
}

// Client returns the go-redis client of the node a key of (server, route)
// goes to now, to run any command, pipeline or script on. Commands on it
// are not retried and fail at once while that node is DOWN or its breaker
// is open. Do not Close it.
func (r *Router) Client(server, route, key string) (*redis.Client, error) {
	n, err := r.Pick(server, route, key)
	if err != nil {
		return nil, err
	}
	return n.Client(), nil
}

// ReadClient is [Router.Client] for the read path: the client of the
// key's node (the same node Client picks) that honours the node's
// read_from. For a Sentinel node with read_from replica_preferred it sends
// commands to a replica of the group when one is healthy (reads may lag
// the master: replication is asynchronous), otherwise the master; for
// every other node it is the node's client. Do not write through it and
// do not Close it.
func (r *Router) ReadClient(server, route, key string) (*redis.Client, error) {
	n, err := r.Pick(server, route, key)
	if err != nil {
		return nil, err
	}
	return n.ReadClient(), nil
}

// Node returns a node by name, or an error wrapping [ErrUnknownNode].
func (r *Router) Node(name string) (*node.Node, error) {
	n := r.nodes[name]
	if n == nil {
		return nil, fmt.Errorf("%w: %q", ErrUnknownNode, name)
	}
	return n, nil
}

// Nodes returns every node, sorted by name. The slice is a copy.
func (r *Router) Nodes() []*node.Node {
	out := make([]*node.Node, len(r.names))
	for i, name := range r.names {
		out[i] = r.nodes[name]
	}
	return out
}

// SetRouteEnabled drains (enabled=false) or re-enables one route on one
// node, live: new keys of that route skip the node, other routes are
// untouched. Keys whose home was the drained node move to their next
// candidate whatever the server's on_node_down policy, because draining
// is a decision, not a failure. The drain is recorded on the node itself
// (node.DrainKey), so every router over that node applies it within one
// heartbeat and it outlives restarts; it fails, leaving the route as it
// was here, while the node cannot be written (node.PersistRouteEnabled:
// DOWN, or unreachable, wrapping node.ErrUnreachable). A server or route
// that is not configured fails with [ErrUnknownRoute]; a route the node is
// not a member of, with node.ErrUnknownRoute.
func (r *Router) SetRouteEnabled(ctx context.Context, nodeName, server, route string, enabled bool) error {
	n, err := r.Node(nodeName)
	if err != nil {
		return err
	}
	if _, ok := r.sets[node.RouteKey{Server: server, Route: route}]; !ok {
		return r.unknownRoute(server, route)
	}
	return n.PersistRouteEnabled(ctx, node.RouteKey{Server: server, Route: route}, enabled)
}

// NodeStatus is a snapshot of one node for status displays.
type NodeStatus struct {
	Name string // the node's configured name
	// Addr is host:port of a standalone node; for a Sentinel node
	// "sentinel:MASTER (master HOST:PORT)", the master as last connected.
	Addr         string
	State        node.State             // StateUp or StateDown, as the node holds it now
	DownReason   error                  // nil when UP
	Breaker      string                 // the circuit breaker's state: "closed", "half-open" or "open"
	FailedProbes int                    // consecutive failed health probes; 0 after a success
	Incarnation  string                 // the stamp incarnation last seen by a probe; "" before the first successful one
	Routes       map[node.RouteKey]bool // route → enabled
	// Settings are the node's eviction and persistence settings (zero
	// until read).
	Settings node.Settings
	// Warning says what is unsafe about Settings for a node of a server
	// of Options.KeepData, or, for another node, that it evicts; ""
	// otherwise (and until Settings are read).
	Warning string
}

// Status returns a snapshot of every node, sorted by name.
func (r *Router) Status() []NodeStatus {
	out := make([]NodeStatus, 0, len(r.names))
	for _, name := range r.names {
		n := r.nodes[name]
		failed, _, _ := r.sched.Status(name)
		addr := n.Addr()
		if m := n.MasterAddr(); n.IsSentinel() && m != "" {
			addr += " (master " + m + ")"
		}
		st := NodeStatus{
			Name: name, Addr: addr, State: n.State(), DownReason: n.DownReason(),
			Breaker: n.BreakerState(), FailedProbes: failed, Incarnation: n.Incarnation(),
			Routes: n.Routes(),
		}
		if set, ok := n.Settings(); ok {
			st.Settings = set
			if r.critical[name] {
				st.Warning = set.Warning()
			} else if set.Evicts() {
				st.Warning = "maxmemory-policy " + set.MaxmemoryPolicy + " can evict keys"
			}
		}
		out = append(out, st)
	}
	return out
}

// Close stops acknowledging writes to the nodes whose data must be kept
// (node.Node.StopAcknowledging: a write that finishes from then on is
// reported with an outcome unknown, not acknowledged without a mark),
// stops the health scheduler, writes on the peers every witness mark that
// moved on since its last write (the nodes' writes at once, bounded by
// config.Client.CommandTimeout; a witness pass under way is cut short:
// witness.go), and closes every node's clients. It waits for in-flight
// probes; commands still running on node clients fail with
// redis.ErrClosed. With peers that hang, it takes about one command
// timeout (and the probe timeout). Close leaks no goroutine and is
// idempotent.
func (r *Router) Close() error {
	for _, n := range r.nodes {
		n.StopAcknowledging() // before the flush reads the marks
	}
	r.sched.Close()
	r.wit.close()
	err := r.closeNodes()
	r.wit.inflight.Wait()
	return err
}

func (r *Router) closeNodes() error {
	var errs []error
	for _, n := range r.nodes {
		errs = append(errs, n.Close())
	}
	return errors.Join(errs...)
}

// keptNodes marks the nodes of the server keys servers (Options.KeepData).
func keptNodes(cfg *config.Config, servers []string) (map[string]bool, error) {
	critical := map[string]bool{}
	for _, sname := range servers {
		srv, ok := cfg.Servers[sname]
		if !ok {
			return nil, fmt.Errorf("router: Options.KeepData names server key %q, which is not configured under servers", sname)
		}
		for _, members := range srv.Routes {
			for _, m := range members {
				critical[m] = true
			}
		}
	}
	return critical, nil
}

// KeepsData reports whether node name holds data that must not be lost
// (it is a node of a server of Options.KeepData).
func (r *Router) KeepsData(name string) bool { return r.critical[name] }
