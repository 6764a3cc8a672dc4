// Package node wraps one standalone Redis endpoint: its go-redis client, its
// UP/DOWN state, its per-route enable flags, its identity stamp and a circuit
// breaker that every command passes through.
//
// A Node holds no policy: it does not probe itself and does not pick itself.
// The health scheduler flips its state with [Node.SetUp] and [Node.SetDown]
// after [Node.Probe]; the router chooses among nodes with [Node.Usable] and
// [Node.RouteEnabled]. Package node imports nothing of shardis.
package node

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// State is a node's availability as last established by a probe.
type State int32

const (
	// StateDown means the node must not be used: its last probe failed, or
	// it has not been probed yet (the zero value).
	StateDown State = iota
	// StateUp means the node's last probe succeeded.
	StateUp
)

// String returns "up" or "down".
func (s State) String() string {
	if s == StateUp {
		return "up"
	}
	return "down"
}

// RouteKey names a second-level route of a first-level server key.
type RouteKey struct {
	Server string // the first-level server key (config.Config.Servers)
	Route  string // the route key within that server
}

// String returns "server/route".
func (k RouteKey) String() string { return k.Server + "/" + k.Route }

// Node is one Redis endpoint. All methods are safe for concurrent use.
type Node struct {
	opts   Options
	log    *slog.Logger
	client *clients // hooked clients: every command is admitted first
	// probe is a one-connection client without the hook: probes bypass
	// state and breaker. It is replaced after a probe failed on the
	// connection (see resetProbe); newProbe builds it.
	probeMu     sync.Mutex
	probe       *redis.Client // guarded by probeMu
	newProbe    func() *redis.Client
	probeClosed bool // guarded by probeMu

	read        *renewed                 // the replica read client, built on first use (sentinel.go); renewed by SetUp
	masterAddr  atomic.Pointer[string]   // where the probe last connected (sentinel.go)
	upAddr      atomic.Pointer[string]   // the master the clients were last renewed for (SetUp; written under upMu)
	sentinels   atomic.Pointer[[]string] // the group's sentinels known: seeds and discovered (sentinel.go); nil = the seeds
	sentinelsMu sync.Mutex               // serialises learnSentinels
	askers      askers                   // sentinelsAgree's clients, one per sentinel (askers.go)

	upMu          sync.Mutex                // serialises SetUp: its new breaker and renewed clients land before UP
	state         atomic.Int32              // a State
	guard         atomic.Pointer[guard]     // the current breaker generation; a fresh one on DOWN→UP (breaker.go)
	routes        map[RouteKey]*atomic.Bool // immutable map; flags are live
	downErr       atomic.Pointer[error]     // why the node is DOWN; nil when UP
	ident         identity                  // stamp bookkeeping, own lock
	maxSeq        atomic.Int64              // highest write sequence acknowledged to this process
	ackStopped    atomic.Bool               // StopAcknowledging was called: Acknowledge fails (seq.go)
	pipelined     atomic.Int64              // commands that rode a shared pipeline (pipeline.go)
	busyPipelined atomic.Int64              // of them, on the busy pipeline
	settings      atomic.Pointer[Settings]  // eviction and persistence settings (settings.go); nil until read
	side          *renewed                  // witness traffic (witness.go): no hook, off the probe's connection; renewed by SetUp
	drainMu       sync.Mutex                // held across drainGen's check and a probe's apply, and across its bump and the write's flag (drain.go)
	drainGen      atomic.Uint64             // bumped by each drain write of this process (drain.go)
	witnessed     atomic.Pointer[peerView]  // the highest mark peers hold of this node, as last read (SetWitnessed)
	held          atomic.Pointer[Mark]      // a mark a peer is known to hold of this node (NoteHeld)
	acked         atomic.Pointer[Mark]      // a write of this mark's generation and incarnation was acknowledged, its mark held (Acknowledge)
	holdMu        sync.Mutex                // guards hold
	hold          *holdAttempt              // the Witnesses.Hold first writes share, nil when none runs (Acknowledge)
	peerRead      peerRead                  // the dial checks' reads of the peers' marks (dialcheck.go)
	confirms      confirmRound              // ConfirmMaster's shared rounds of questions to the sentinels (sentinel_confirm.go)
	closeOnce     sync.Once

	memory atomic.Pointer[memoryRead] // the last MemoryLimit read (memory.go)
}

// New returns a Node in [StateDown] (not yet probed). It does not connect:
// go-redis dials lazily, and the first [Node.Probe] establishes state.
func New(opts Options) (*Node, error) {
	if s := opts.Sentinel; s != nil {
		if s.Master == "" || len(s.Addrs) == 0 {
			return nil, fmt.Errorf("node %s: Sentinel needs Master and at least one of Addrs", opts.Name)
		}
		if opts.Addr == "" {
			opts.Addr = "sentinel:" + s.Master
		}
	}
	if opts.Name == "" || opts.Addr == "" {
		return nil, errors.New("node: Name and Addr (or Sentinel) are required")
	}
	opts.setDefaults()
	n := &Node{opts: opts, log: opts.Logger.With("node", opts.Name, "addr", opts.Addr)}
	n.routes = make(map[RouteKey]*atomic.Bool, len(opts.Routes))
	for _, rk := range opts.Routes {
		f := new(atomic.Bool)
		f.Store(true)
		n.routes[rk] = f
	}
	base := redis.Options{
		Addr:                     opts.Addr,
		Username:                 opts.Username,
		Password:                 opts.Password,
		DB:                       opts.DB,
		TLSConfig:                opts.TLSConfig,
		Protocol:                 2,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		DialTimeout:              opts.DialTimeout,
		DialerRetries:            1,
		ReadTimeout:              opts.CommandTimeout,
		WriteTimeout:             opts.CommandTimeout,
		ContextTimeoutEnabled:    true,
		MaxRetries:               -1, // never replay a command: scripts and INCR are not idempotent
		PoolSize:                 opts.PoolSize,
		PoolTimeout:              opts.CommandTimeout,
	}
	var mkGated func() *redis.Client
	if opts.Sentinel == nil {
		mkGated = func() *redis.Client { return n.factory(n.gatedOptions(base), false)() }
	}
	n.client = newClients(n, n.factory(base, false), mkGated)
	n.read = newRenewed(n, n.readFactory(base), false)

	probe := base
	probe.PoolSize = 1
	probe.MaxIdleConns = 1
	probe.DialTimeout = opts.ProbeTimeout
	probe.ReadTimeout = opts.ProbeTimeout
	probe.WriteTimeout = opts.ProbeTimeout
	probe.PoolTimeout = opts.ProbeTimeout
	probe.PipelinePoolSize = -1 // the probe's pipelines share its one connection
	mkProbe := n.factory(probe, false)
	n.newProbe = func() *redis.Client {
		c := mkProbe()
		c.AddHook(addrHook{n})
		return c
	}
	n.probe = n.newProbe()
	side := base
	side.PoolSize = 2
	side.MaxIdleConns = 2
	n.side = newRenewed(n, n.factory(side, false), true)

	n.guard.Store(n.newGuard())
	n.setDownErr(errors.New("not probed yet"))
	return n, nil
}

// Name returns the configured name.
func (n *Node) Name() string { return n.opts.Name }

// Addr returns host:port of a standalone node, or the name given to a
// Sentinel node ("sentinel:MASTER" by default; see [Node.MasterAddr] for
// where its master is).
func (n *Node) Addr() string { return n.opts.Addr }

// Client returns the node's go-redis client. Every command, pipeline and
// script run on it is admitted by the node first: while the node is DOWN or
// its breaker is open it fails at once with an [*Error]. Commands are never
// retried by the client (a network error may or may not have applied a
// write; the caller decides). Do not Close it: [Node.Close] does.
//
// Fetch it per use rather than keeping it: when the node comes back after
// failed dials it gets a fresh client (go-redis's pool would refuse to dial
// for up to a second), and the old one is closed a little later.
func (n *Node) Client() *redis.Client { return n.client.get() }

// State returns the node's current state.
func (n *Node) State() State { return State(n.state.Load()) }

// DownReason returns why the node is DOWN, or nil when it is UP.
func (n *Node) DownReason() error {
	if p := n.downErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Usable reports whether a command would be admitted now: the node is UP
// and its breaker is closed, open past its timeout, or half-open with no
// trial in flight (so the trial can happen; while it is in flight,
// commands are refused; a trial that ended without a verdict, its caller
// having given up or the client not having sent it, lets the next one
// through). It is cheap, and lock-free while the breaker is closed.
func (n *Node) Usable() bool {
	if State(n.state.Load()) != StateUp {
		return false
	}
	return n.guard.Load().admits()
}

// RouteEnabled reports whether the node takes new traffic for the route.
// A route the node does not serve reports false.
func (n *Node) RouteEnabled(rk RouteKey) bool {
	f, ok := n.routes[rk]
	return ok && f.Load()
}

// RouteFlag is a node's live enabled flag for one route, resolved once with
// [Node.RouteFlag] so that a hot path reads it without the map lookup of
// [Node.RouteEnabled]. The zero RouteFlag stands for a route the node does
// not serve. It is a small value, safe to copy and to read concurrently.
type RouteFlag struct{ f *atomic.Bool }

// Enabled reports what [Node.RouteEnabled] reports for the flag's node and
// route, now: false for the zero RouteFlag.
func (r RouteFlag) Enabled() bool { return r.f != nil && r.f.Load() }

// RouteFlag returns the live flag of one route of the node: it follows
// every later [Node.SetRouteEnabled] of that route. For a route the node
// does not serve it returns the zero RouteFlag (never enabled).
func (n *Node) RouteFlag(rk RouteKey) RouteFlag { return RouteFlag{n.routes[rk]} }

// SetRouteEnabled enables or drains one route on this node, live, without
// touching its other routes. It returns [ErrUnknownRoute] for a route the
// node does not serve.
func (n *Node) SetRouteEnabled(rk RouteKey, enabled bool) error {
	f, ok := n.routes[rk]
	if !ok {
		return fmt.Errorf("%w: node %s does not serve %q", ErrUnknownRoute, n.opts.Name, rk.String())
	}
	if f.Swap(enabled) != enabled {
		n.log.Info("route flag changed", "route", rk.String(), "enabled", enabled)
	}
	return nil
}

// Routes returns the routes the node serves and whether each is enabled,
// in no particular order.
func (n *Node) Routes() map[RouteKey]bool {
	out := make(map[RouteKey]bool, len(n.routes))
	for rk, f := range n.routes {
		out[rk] = f.Load()
	}
	return out
}

// SetUp marks the node UP and reports whether that changed its state. On a
// DOWN→UP change the breaker is replaced by a closed one (the probe just
// proved the node answers) and, for a Sentinel group, the clients are
// renewed (the hooked clients, the witness client and the replica read
// client), all before UP is published: a command, witness mark or replica
// read that sees the node UP never meets the breaker its DOWN spell
// opened, nor a pooled connection to a former master (or, for the read
// client, to a replica since promoted). Calls are serialised, so two
// probes that both saw the node DOWN renew it once. A Sentinel group
// that stayed UP while its probe reached another master (a switch the
// node never saw fail) has its clients renewed too, at the SetUp after
// that probe.
func (n *Node) SetUp() bool {
	n.upMu.Lock()
	defer n.upMu.Unlock()
	if State(n.state.Load()) == StateUp {
		if n.IsSentinel() && n.masterMoved() {
			n.renewForMaster()
		}
		return false
	}
	n.guard.Store(n.newGuard())
	// A Sentinel group's master may have changed while it was DOWN: no
	// pooled connection to a former master may survive.
	if n.IsSentinel() {
		n.renewForMaster()
	} else {
		n.client.renew(false)
	}
	n.downErr.Store(nil)
	return State(n.state.Swap(int32(StateUp))) != StateUp
}

// SetDown marks the node DOWN for reason and reports whether that changed
// its state. Commands fail at once from now on.
func (n *Node) SetDown(reason error) bool {
	n.setDownErr(reason)
	return State(n.state.Swap(int32(StateDown))) != StateDown
}

// downText is the DOWN reason without the node's own name, which the
// refusal around it already carries.
func (n *Node) downText() string {
	reason := n.DownReason()
	var e *Error
	if errors.As(reason, &e) && e.Node == n.opts.Name {
		return e.Err.Error()
	}
	return fmt.Sprint(reason)
}

func (n *Node) setDownErr(reason error) {
	if reason == nil {
		reason = errors.New("marked down")
	}
	n.downErr.Store(&reason)
}

// BreakerState returns "closed", "half-open" or "open".
func (n *Node) BreakerState() string { return n.guard.Load().cb.State().String() }

// Close closes every client of the node. Commands after Close fail: with
// redis.ErrClosed while the node is UP, with its refusal ([ErrDown]) while
// it is DOWN; neither counts against the node ([IsFailure]). It is
// idempotent.
func (n *Node) Close() error {
	var err error
	n.closeOnce.Do(func() {
		n.probeMu.Lock()
		n.probeClosed = true
		probe := n.probe
		n.probeMu.Unlock()
		err = errors.Join(n.client.close(), probe.Close(), n.side.close(), n.read.close(), n.askers.close())
	})
	return err
}

// probeClient returns the current probe client.
func (n *Node) probeClient() *redis.Client {
	n.probeMu.Lock()
	defer n.probeMu.Unlock()
	return n.probe
}

// resetProbe replaces the probe client old after a probe failed on the
// connection. go-redis stops dialing a pool once PoolSize dials in a row
// failed (one, for the probe) and returns the last dial error instead
// until a background redial, retried only once a second, succeeds: kept,
// the client would report a restarted node as unreachable for up to a
// second more than the backoff says. A fresh client dials at once.
func (n *Node) resetProbe(old *redis.Client) {
	n.probeMu.Lock()
	if n.probeClosed || n.probe != old {
		n.probeMu.Unlock()
		return
	}
	n.probe = n.newProbe()
	n.probeMu.Unlock()
	_ = old.Close()
}
