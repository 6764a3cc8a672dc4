package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel master groups.
//
// A node with Options.Sentinel set is a master group managed by Redis
// Sentinel instead of one standalone server. Every client the node builds
// (the hooked client, the auto-pipeliner's client, the probe client and the
// replica read client) is a go-redis failover client
// (redis.NewFailoverClient): it asks the sentinels for the group's master
// at every dial and drops its connections to a former master when the
// one sentinel it listens to announces a switch. Everything else is the same as for a
// standalone node: the name, routes, breaker, identity stamp, pipelining
// and metrics belong to the group, whichever server is its master.
//
// Failover, as the node sees it: the master dies, commands fail on the
// network (node failures), the health scheduler probes, the probe cannot
// reach a master (the sentinels still name the dead one until they agree it
// is down) and the node goes DOWN: commands are refused at once. Reconnect
// probes follow the backoff; once the sentinels have promoted a replica the
// probe dials it, finds the stamp that replication carried over (the same
// name, incarnation and write sequence, so it is recognised as the same
// node; one whose data is behind what was acknowledged is refused as
// rolled back, like a standalone node restored from an old snapshot), and
// the node is UP again. On every DOWN→UP of a group the hooked client,
// the witness client and the replica read client are replaced by fresh
// ones (SetUp), so no pooled connection to a former master survives, nor
// one of the read client to a replica since promoted: a failover client
// drops them itself only when its own sentinel's announcement reaches it
// (that sentinel may be dead or the message late) or when it dials, and
// the sentinels convert a demoted master, which kills its clients'
// connections, only up to ten seconds after the switch: until then a
// mark written there is acknowledged and then lost at its resync.
//
// A probe of a group also checks that the server it reached is a master
// (INFO replication inside the stamp script): a demoted master still
// reachable on an old connection is refused ([ErrNotMaster]) and the probe
// re-dials through the sentinels. A READONLY reply to a command counts as
// a node failure for the same reason. A reconnect probe (DOWN→UP)
// succeeds only once every configured sentinel that answers names the
// master it reached (sentinelsAgree): the node's clients each ask a
// sentinel of their own, so until then some would still dial the old one.
// While the node is UP, every probe asks them too, and one that names
// another server fails it: the node does not stay UP at a demoted master
// whose switch its clients' sentinel never announced to them.
// The sentinels asked are the configured seeds and the others of the
// group that they named on earlier reconnect probes (learnSentinels):
// every client the node builds gets them all, so a node whose seeds died
// still reaches its group. A dial that finds no master at all (no
// sentinel knows the group's name) fails with [ErrNoMaster], a node
// failure.
// A hung sentinel (frozen, or behind a partition that drops packets; its
// port may still accept connections) costs a bounded part of a dial or a
// probe, not all of it: see sentinelBound (TestReview4FrozenSentinelFirst).

// ErrNotMaster is wrapped by a probe error of a Sentinel node when the
// server reached is not (or no longer) the group's master: the sentinels
// are switching masters.
var ErrNotMaster = errors.New("server reached is a replica, not the master")

// SentinelOptions makes a node a Sentinel-managed master group.
type SentinelOptions struct {
	// Master is the group's name as the sentinels know it.
	Master string
	// Addrs is a seed list of sentinel host:port addresses. The other
	// sentinels of the group that they name (SENTINEL SENTINELS) are
	// learnt on every reconnect probe and asked too (learnSentinels).
	Addrs []string
	// Username and Password authenticate to the sentinels. The data
	// nodes use Options.Username and Options.Password.
	Username, Password string
	// ReadFromReplicas makes [Node.ReadClient] prefer a replica of the
	// group (go-redis ReplicaOnly: a random replica the sentinels list as
	// healthy, else the master).
	// default: false (ReadClient is Client)
	ReadFromReplicas bool
}

// IsSentinel reports whether the node is a Sentinel master group.
func (n *Node) IsSentinel() bool { return n.opts.Sentinel != nil }

// MasterAddr returns the address of the server the node's probe last
// connected to: for a Sentinel node, the group's master as of the last
// (re)connection; for a standalone node, the address its connection
// resolved to (IP:port). "" before the first connection.
func (n *Node) MasterAddr() string {
	if p := n.masterAddr.Load(); p != nil {
		return *p
	}
	return ""
}

// factory returns a function that builds an unhooked go-redis client with
// the options o: a plain client for a standalone node, a failover client
// for a Sentinel group (replica: one that prefers replicas).
func (n *Node) factory(o redis.Options, replica bool) func() *redis.Client {
	s := n.opts.Sentinel
	if s == nil {
		return func() *redis.Client {
			c := o
			return redis.NewClient(&c)
		}
	}
	return func() *redis.Client {
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName:              s.Master,
			SentinelAddrs:           n.knownSentinels(),
			SentinelUsername:        s.Username,
			SentinelPassword:        s.Password,
			ReplicaOnly:             replica,
			Username:                o.Username,
			Password:                o.Password,
			DB:                      o.DB,
			TLSConfig:               o.TLSConfig,
			Protocol:                o.Protocol,
			DisableIdentity:         o.DisableIdentity,
			DialTimeout:             o.DialTimeout,
			DialerRetries:           o.DialerRetries,
			ReadTimeout:             o.ReadTimeout,
			WriteTimeout:            o.WriteTimeout,
			ContextTimeoutEnabled:   o.ContextTimeoutEnabled,
			MaxRetries:              o.MaxRetries,
			PoolSize:                o.PoolSize,
			PoolTimeout:             o.PoolTimeout,
			MaxIdleConns:            o.MaxIdleConns,
			ConnMaxLifetime:         o.ConnMaxLifetime,
			ConnMaxLifetimeJitter:   o.ConnMaxLifetimeJitter,
			PipelinePoolSize:        o.PipelinePoolSize,
			PipelineReadBufferSize:  o.PipelineReadBufferSize,
			PipelineWriteBufferSize: o.PipelineWriteBufferSize,
			Dialer:                  n.failoverDialer(o),
		})
	}
}

// sentinelBound returns how long one exchange with one sentinel (its
// connection, or one round trip) may take within a dial or probe bounded
// by d: a quarter of it. go-redis's failover dialer asks the sentinel it
// listens to, twice, then all of them at once, waiting for every answer:
// a hung sentinel costs it up to three bounds before the master's dial.
// Unbounded, it held the whole dial, which then failed ("i/o timeout").
func sentinelBound(d time.Duration) time.Duration { return d / 4 }

// failoverDialer returns the dialer of a failover client with options o,
// which go-redis uses both for the master (or replica) and for the
// sentinels it asks. A known sentinel (knownSentinels) is dialled within
// sentinelBound(o.DialTimeout), and every deadline go-redis sets on its
// connection is brought within that bound (boundedConn); other addresses
// are dialled as go-redis would. A sentinel the failover client
// discovered that the node has not learnt yet is not bounded.
func (n *Node) failoverDialer(o redis.Options) func(context.Context, string, string) (net.Conn, error) {
	bound := sentinelBound(o.DialTimeout)
	data := redis.NewDialer(&redis.Options{DialTimeout: o.DialTimeout, TLSConfig: o.TLSConfig})
	sentinel := redis.NewDialer(&redis.Options{DialTimeout: bound, TLSConfig: o.TLSConfig})
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if !slices.Contains(n.knownSentinels(), addr) {
			return data(ctx, network, addr)
		}
		ctx, cancel := context.WithTimeout(ctx, bound)
		defer cancel()
		conn, err := sentinel(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		b := boundedConn{Conn: conn, bound: bound}
		if sc, ok := conn.(syscall.Conn); ok {
			return boundedSysConn{b, sc}, nil // keeps go-redis's health check of pooled connections
		}
		return b, nil
	}
}

// boundedConn is a connection to a sentinel whose deadlines are at most
// bound from when they are set. No deadline stays none: a subscription
// waits for the sentinel's announcements as long as it takes.
type boundedConn struct {
	net.Conn
	bound time.Duration
}

func (c boundedConn) within(t time.Time) time.Time {
	if limit := time.Now().Add(c.bound); !t.IsZero() && t.After(limit) {
		return limit
	}
	return t
}

func (c boundedConn) SetDeadline(t time.Time) error      { return c.Conn.SetDeadline(c.within(t)) }
func (c boundedConn) SetReadDeadline(t time.Time) error  { return c.Conn.SetReadDeadline(c.within(t)) }
func (c boundedConn) SetWriteDeadline(t time.Time) error { return c.Conn.SetWriteDeadline(c.within(t)) }

// boundedSysConn is a boundedConn over a connection that exposes its file
// descriptor (TCP, not TLS).
type boundedSysConn struct {
	boundedConn
	sc syscall.Conn
}

func (c boundedSysConn) SyscallConn() (syscall.RawConn, error) { return c.sc.SyscallConn() }

// sentinelsAgree asks every configured sentinel, concurrently, which
// server is the group's master, and returns nil when every sentinel that
// answered names addr (and at least one answered). One that has not
// answered within sentinelBound(ProbeTimeout) has not answered: a hung
// sentinel costs a quarter of the probe, not all of it. During a failover
// the sentinels disagree for a moment (the leader names the promoted replica
// first; the others learn it from its announcements), and each of the
// node's clients asks a sentinel of their own: a node declared UP while
// some still name the old master would send part of its commands there.
// A sentinel that names the master by host name (announce-hostnames yes)
// names addr when the name resolves to addr's IP, on addr's port
// (SameServer): addr is where the probe's connection went, an IP.
//
// While the node is UP (up), every probe asks too, and only a sentinel
// that names another server counts: none answering says nothing of the
// master, which keeps serving while the sentinels restart. It closes the
// window in which the node stays UP at a demoted master that its clients'
// sentinel never told them about (the one they listen to hung, or its
// +switch-master was lost): such a master still takes writes until the
// sentinels convert it, ten seconds or more later, and loses them at its
// resync. With the check, the probe that follows the switch fails, the
// node is DOWN and its probe client dials anew through the sentinels: a
// heartbeat and a quarter of the probe timeout after the sentinels name
// the new master (TestReview4FrozenSentinelFirstFailover).
func (n *Node) sentinelsAgree(ctx context.Context, addr string, up bool) error {
	s := n.opts.Sentinel
	known := n.knownSentinels()
	answers := make(chan sentinelAnswer, len(known))
	for _, a := range known {
		go func(a string) { answers <- n.askSentinel(ctx, a, addr, !up) }(a)
	}
	var others, peers []string
	answered := 0
	for range known {
		a := <-answers
		if a.err != nil {
			continue
		}
		answered++
		peers = append(peers, a.peers...)
		if !a.same {
			others = append(others, a.sentinel+" names "+a.master)
		}
	}
	n.learnSentinels(peers)
	switch {
	case answered == 0 && !up:
		return fmt.Errorf("no sentinel of %v answered", known)
	case len(others) > 0:
		return fmt.Errorf("%w of %s (%s reached; %s)", errMasterNamedElsewhere, s.Master, addr, strings.Join(others, ", "))
	}
	return nil
}

// errMasterNamedElsewhere is wrapped by sentinelsAgree's error when a
// sentinel names another server than the one reached as the group's
// master: the sentinels are switching, or the probe client was left at a
// former master. The probe then dials anew through the sentinels
// (resetProbe).
var errMasterNamedElsewhere = errors.New("a sentinel names another server as the master")

// sentinelAnswer is one sentinel's answer to sentinelsAgree: the master
// it names, and whether that is the server reached.
type sentinelAnswer struct {
	sentinel, master string
	same             bool
	peers            []string // the other sentinels it knows of the group
	err              error
}

// askSentinel asks the sentinel at a which server is the group's master,
// and whether it is addr (SameServer), and, with discover (a reconnect
// probe's question, not an UP one's: the group's sentinels are learnt on
// reconnects), which other sentinels monitor the group (peers; none when
// that fails), on the node's kept connection to it (askers.go). The
// questions are bounded by sentinelBound(ProbeTimeout) together,
// SameServer by ctx.
func (n *Node) askSentinel(ctx context.Context, a, addr string, discover bool) sentinelAnswer {
	s := n.opts.Sentinel
	bound := sentinelBound(n.opts.ProbeTimeout)
	c := n.asker(a)
	if c == nil {
		return sentinelAnswer{sentinel: a, err: redis.ErrClosed}
	}
	qctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	v, err := c.GetMasterAddrByName(qctx, s.Master).Result()
	if err == nil && len(v) != 2 {
		err = fmt.Errorf("reply %v", v)
	}
	if err != nil {
		return sentinelAnswer{sentinel: a, err: err}
	}
	master := net.JoinHostPort(v[0], v[1])
	var peers []string
	if !discover {
		return sentinelAnswer{sentinel: a, master: master, same: SameServer(ctx, master, addr)}
	}
	if list, err := c.Sentinels(qctx, s.Master).Result(); err == nil {
		for _, p := range list {
			if ip, port := p["ip"], p["port"]; ip != "" && port != "" {
				peers = append(peers, net.JoinHostPort(ip, port))
			}
		}
	}
	return sentinelAnswer{sentinel: a, master: master, same: SameServer(ctx, master, addr), peers: peers}
}

// asker returns the node's kept client of the sentinel at a (askers.go):
// one connection, every exchange bounded by sentinelBound(ProbeTimeout),
// which asks SENTINEL MYID when dialled (askerConn.identify).
// nil once the node is closed.
func (n *Node) asker(a string) *redis.SentinelClient {
	s := n.opts.Sentinel
	bound := sentinelBound(n.opts.ProbeTimeout)
	return n.askers.get(a, func(onConnect func(context.Context, *redis.Conn) error) *redis.SentinelClient {
		return redis.NewSentinelClient(&redis.Options{
			Addr: a, Username: s.Username, Password: s.Password, TLSConfig: n.opts.TLSConfig,
			Protocol: 2, DisableIdentity: true, MaxRetries: -1, PoolSize: 1,
			DialTimeout: bound, ReadTimeout: bound, WriteTimeout: bound, PoolTimeout: bound,
			ContextTimeoutEnabled: true, OnConnect: onConnect,
		})
	})
}

// knownSentinels returns the sentinels the node knows of its group: the
// configured seeds (SentinelOptions.Addrs) and those they named since
// (learnSentinels).
func (n *Node) knownSentinels() []string {
	if p := n.sentinels.Load(); p != nil {
		return append([]string(nil), *p...)
	}
	return append([]string(nil), n.opts.Sentinel.Addrs...)
}

// learnSentinels adds the sentinels in peers that the node did not know
// yet. Every client built from then on asks them too, and so does
// sentinelsAgree: a node whose seeds died still reaches the group through
// the others (a failover client's own discovery dies with the client,
// and the node replaces its clients: resetProbe, SetUp). Sentinels are
// never forgotten; one that is gone just does not answer.
func (n *Node) learnSentinels(peers []string) {
	n.sentinelsMu.Lock()
	defer n.sentinelsMu.Unlock()
	known := n.knownSentinels()
	added := false
	for _, p := range peers {
		if !slices.Contains(known, p) {
			known = append(known, p)
			added = true
		}
	}
	if added {
		n.sentinels.Store(&known)
		n.log.Info("sentinels of the group discovered", "sentinels", known)
	}
}

// SameServer reports whether the address named (by a sentinel: an IP or
// a host name, and a port) is the address reached (the remote address
// of a connection, an IP and a port): the same string, or the same port
// and a host that is, or resolves to, the reached IP. A name that does
// not resolve (within ctx) is another server.
func SameServer(ctx context.Context, named, reached string) bool {
	if named == reached {
		return true
	}
	host, port, err1 := net.SplitHostPort(named)
	rhost, rport, err2 := net.SplitHostPort(reached)
	rip := net.ParseIP(rhost)
	if err1 != nil || err2 != nil || port != rport || rip == nil {
		return false
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.Equal(rip)
	}
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return false
	}
	for _, ip := range ips {
		if ip.IP.Equal(rip) {
			return true
		}
	}
	return false
}

// ErrNoMaster is wrapped by the error of a Sentinel node's dial (and so
// of the command or probe that needed the connection) when no sentinel
// named a master of the group: none knows the group's name (SENTINEL
// REMOVE, a sentinel restarted without its configuration). It is a node
// failure ([IsFailure]).
var ErrNoMaster = errors.New("no sentinel names a master of the group")

// noMaster turns a Sentinel node's dial error err that says no sentinel
// knows the master into one wrapping [ErrNoMaster]. go-redis's failover
// dialer wraps the sentinels' nil replies (redis.Nil) in its error: a
// command failing with it would read as a missing key or a script that
// returned nil, not as a node failure, and a probe's failed dial as a
// reply of the node (resetProbe). Other errors are returned as they are.
func (n *Node) noMaster(err error) error {
	if err == nil || !n.IsSentinel() || !errors.Is(err, redis.Nil) {
		return err
	}
	return fmt.Errorf("%w (%s): %s", ErrNoMaster, n.opts.Sentinel.Master, strings.ReplaceAll(err.Error(), "\n", "; "))
}

// addrHook records the remote address of every connection the probe
// client dials: for a failover client the dial hook's addr argument is a
// placeholder, the connection knows where it went. A dial that found no
// master fails with [ErrNoMaster] (noMaster).
type addrHook struct{ n *Node }

func (h addrHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		err = h.n.noMaster(err)
		if err == nil && conn != nil && conn.RemoteAddr() != nil {
			a := conn.RemoteAddr().String()
			if prev := h.n.masterAddr.Swap(&a); h.n.IsSentinel() && (prev == nil || *prev != a) {
				h.n.log.Info("connected to the group's master", "master", a)
			}
		}
		return conn, err
	}
}

func (h addrHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h addrHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// masterMoved reports whether the probe last reached a master other than
// the one the clients were last renewed for (renewForMaster).
func (n *Node) masterMoved() bool {
	a, u := n.masterAddr.Load(), n.upAddr.Load()
	return a != nil && (u == nil || *u != *a)
}

// renewForMaster replaces a Sentinel group's clients (the hooked ones,
// the witness client and the replica read client) by fresh ones, so no
// pooled connection to a former master survives, and records the master
// the probe last reached as the one they were renewed for. Called under
// upMu.
func (n *Node) renewForMaster() {
	if a := n.masterAddr.Load(); a != nil {
		n.upAddr.Store(a)
	}
	n.client.renew(true)
	n.side.renew()
	n.read.renew()
}
