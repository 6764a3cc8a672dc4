// Package config loads and validates the shardis configuration.
//
// A configuration is a YAML file, optionally overridden by environment
// variables with the SHARDIS_ prefix (see [Load] for the mapping). Loading
// never half-succeeds: [Load] either returns a fully defaulted and validated
// *[Config] or an error listing every problem found, each naming the key
// path and the offending value. Two kinds come first and alone, because
// the configuration they stand in front of is unknown: YAML that does not
// parse, and environment variables that cannot be applied (one giving a
// key a value while another gives it sub-keys, a section named without
// the double underscore, an entry the file spells in another case).
package config

import (
	"fmt"
	"time"
)

// Config is the whole shardis configuration. A Config returned by [Load] or
// [Parse] is validated and has every default applied; treat it as read-only
// after that (it is shared by the router, the inventory and the service).
type Config struct {
	// Service configures `shardis serve`.
	Service Service `koanf:"service"`
	// Nodes maps a node name to its Redis endpoint. Names are the identity of
	// a node on the hash ring and in its stamp: renaming a node moves keys.
	Nodes map[string]Node `koanf:"nodes"`
	// Servers maps a first-level server key (order, product, inventory …) to
	// its routing policy and second-level route keys.
	Servers map[string]Server `koanf:"servers"`
	// Health configures the heartbeat and reconnect scheduler.
	Health Health `koanf:"health"`
	// Breaker configures the per-node circuit breaker.
	Breaker Breaker `koanf:"breaker"`
	// Client configures every node's go-redis client.
	Client Client `koanf:"client"`
	// Pipeline configures auto-pipelining of every node's client.
	Pipeline Pipeline `koanf:"pipeline"`
	// Inventory configures the inventory service built on the router.
	Inventory Inventory `koanf:"inventory"`
	// Sync configures `shardis sync`, the redo-log consumer that lands
	// deductions in PostgreSQL.
	Sync Sync `koanf:"sync"`
}

// Service configures the RPC listener of `shardis serve`.
type Service struct {
	// Listen is the host:port the service listens on.
	// default: 127.0.0.1:7400
	Listen string `koanf:"listen"`
	// GRPCListen, when set, is a second host:port that serves the same
	// services to gRPC clients over grpc-go's own transport (cheaper per
	// call than the service port's net/http HTTP/2; same token, TLS,
	// limits, metrics and health). The service port keeps serving gRPC
	// too.
	// default: "" (off)
	GRPCListen string `koanf:"grpc_listen"`
	// AuthToken, when set, is required on every RPC as
	// "Authorization: Bearer <token>". /healthz and /metrics stay open.
	// default: "" (no authentication)
	AuthToken string `koanf:"auth_token"`
	// TLS serves HTTPS (HTTP/2 over TLS) when cert_file and key_file are
	// set; with client_ca_file, clients must present a certificate signed
	// by it (mutual TLS).
	// default: plaintext HTTP/2 (h2c)
	TLS ServiceTLS `koanf:"tls"`
	// MaxBodyBytes is the largest request body accepted; larger ones are
	// refused with resource_exhausted.
	// default: 1048576 (1 MiB)
	MaxBodyBytes int `koanf:"max_body_bytes"`
	// ShutdownTimeout bounds the wait for in-flight calls on SIGINT/SIGTERM.
	// Closing the libraries follows it: the witness marks' last writes take
	// up to client.command_timeout more when a node hangs.
	// default: 10s
	ShutdownTimeout time.Duration `koanf:"shutdown_timeout"`
}

// ServiceTLS configures TLS on the service listener.
type ServiceTLS struct {
	// CertFile is the PEM server certificate; set together with KeyFile.
	// Empty (with KeyFile) means no TLS: plaintext h2c.
	CertFile string `koanf:"cert_file"`
	// KeyFile is the PEM private key of CertFile; set together with it.
	KeyFile string `koanf:"key_file"`
	// ClientCAFile, when set, requires and verifies client certificates.
	ClientCAFile string `koanf:"client_ca_file"`
}

// Node is one Redis endpoint: a standalone server (Addr) or a master group
// managed by Redis Sentinel (Sentinel). Exactly one of the two is set.
type Node struct {
	// Addr is the node's host:port. Required unless Sentinel is set; unique
	// across nodes.
	Addr string `koanf:"addr"`
	// Sentinel makes the node a Sentinel-managed master group: shardis asks
	// the sentinels for the group's current master and follows its
	// promotions. Everything else about the node (its name on the ring,
	// routes, weight, breaker, identity stamp) is unchanged.
	// default: off (a standalone node at Addr)
	Sentinel Sentinel `koanf:"sentinel"`
	// ReadFrom is where the router's read path (Router.ReadClient) sends
	// commands: "master", or "replica_preferred" (a replica of the group
	// when the sentinels list a healthy one, else the master; Sentinel
	// nodes only). Writes, Router.Client and the inventory always use the
	// master.
	// default: master ("" means master)
	ReadFrom string `koanf:"read_from"`
	// Username is the ACL user name of the data node(s); empty means the
	// default user.
	Username string `koanf:"username"`
	// Password is the AUTH password of the data node(s); empty means no AUTH.
	Password string `koanf:"password"`
	// DB is the logical database index.
	// default: 0
	DB int `koanf:"db"`
	// Weight is the node's share of the ring relative to other nodes of
	// the same route (virtual points per weight unit): 1..MaxWeight.
	// default: 1
	Weight int `koanf:"weight"`
	// TLS configures TLS to the node. It is on when Enabled is true or any
	// other field is set.
	// default: off
	TLS NodeTLS `koanf:"tls"`
}

// ReadFrom values of [Node.ReadFrom].
const (
	// ReadFromMaster sends reads to the master, like writes.
	ReadFromMaster = "master"
	// ReadFromReplicaPreferred sends the router's reads to a replica of a
	// Sentinel group when one is listed healthy, else to the master.
	ReadFromReplicaPreferred = "replica_preferred"
)

// Sentinel configures a node that is a Sentinel-managed master group.
type Sentinel struct {
	// Master is the group's name as the sentinels know it (the name in
	// `sentinel monitor NAME …`). Required with the block.
	Master string `koanf:"master"`
	// Addrs is a seed list of the sentinels' host:port (more are discovered
	// from them). At least one.
	Addrs []string `koanf:"addrs"`
	// Username is the ACL user name for the sentinels, not for the data
	// nodes: those use the node's own username. Empty means the default
	// user.
	Username string `koanf:"username"`
	// Password authenticates to the sentinels (their requirepass or the
	// ACL user's password), not to the data nodes: those use the node's
	// own password. Empty means no AUTH to the sentinels.
	Password string `koanf:"password"`
	// TLS configures TLS to the sentinels and to the group's data nodes
	// alike (go-redis dials both with one TLS configuration); the node's
	// own tls key must stay empty. server_name defaults to the host of the
	// address dialed.
	// default: off
	TLS NodeTLS `koanf:"tls"`
}

// On reports whether any sentinel key is set.
func (s Sentinel) On() bool {
	return s.Master != "" || len(s.Addrs) > 0 || s.Username != "" || s.Password != "" || s.TLS.On()
}

// NodeTLS configures TLS from shardis to one Redis node.
type NodeTLS struct {
	// Enabled turns TLS on with the system's roots when nothing else is set.
	Enabled bool `koanf:"enabled"`
	// CAFile is a PEM bundle of the CAs that sign the node's certificate;
	// empty means the system roots.
	CAFile string `koanf:"ca_file"`
	// CertFile is a PEM client certificate, for nodes that require client
	// certificates (tls-auth-clients yes); set together with KeyFile.
	// Empty means no client certificate.
	CertFile string `koanf:"cert_file"`
	// KeyFile is the PEM private key of CertFile; set together with it.
	KeyFile string `koanf:"key_file"`
	// ServerName overrides the name verified in the node's certificate;
	// default: the host of addr.
	ServerName string `koanf:"server_name"`
	// InsecureSkipVerify disables certificate verification. For tests only.
	InsecureSkipVerify bool `koanf:"insecure_skip_verify"`
}

// On reports whether TLS is configured.
func (t NodeTLS) On() bool { return t != NodeTLS{} }

// String formats the node with its passwords redacted, so %v and %+v of a
// Node never print a secret.
func (n Node) String() string {
	if n.Sentinel.On() {
		return fmt.Sprintf("{Sentinel:%v ReadFrom:%s Username:%s Password:%s DB:%d Weight:%d TLS:%+v}",
			n.Sentinel, n.ReadFrom, n.Username, redact(n.Password), n.DB, n.Weight, n.TLS)
	}
	return fmt.Sprintf("{Addr:%s Username:%s Password:%s DB:%d Weight:%d TLS:%+v}", n.Addr, n.Username, redact(n.Password), n.DB, n.Weight, n.TLS)
}

// String formats the sentinel settings with the password redacted.
func (s Sentinel) String() string {
	return fmt.Sprintf("{Master:%s Addrs:%v Username:%s Password:%s TLS:%+v}", s.Master, s.Addrs, s.Username, redact(s.Password), s.TLS)
}

func redact(secret string) string {
	if secret == "" {
		return ""
	}
	return "<redacted>"
}

// String formats the service settings with the auth token redacted.
func (s Service) String() string {
	tok := ""
	if s.AuthToken != "" {
		tok = "<redacted>"
	}
	return fmt.Sprintf("{Listen:%s GRPCListen:%s AuthToken:%s TLS:%+v MaxBodyBytes:%d ShutdownTimeout:%v}",
		s.Listen, s.GRPCListen, tok, s.TLS, s.MaxBodyBytes, s.ShutdownTimeout)
}

// OnNodeDown policies for [Server.OnNodeDown].
const (
	// OnNodeDownFail returns an error for a key whose home node is down:
	// keys never move silently. Right for data that lives on one node
	// (stock, counters).
	OnNodeDownFail = "fail"
	// OnNodeDownNext falls through to the next candidate on the ring,
	// cache-style: right when any node can rebuild the value.
	OnNodeDownNext = "next"
)

// Server is a first-level server key: its route keys and node-down policy.
type Server struct {
	// OnNodeDown is what happens to a key whose home node is down or whose
	// breaker is open: "fail" or "next". It governs keys picked through
	// the router; the inventory's server ignores it (stock fails over to
	// any usable node of the route, order records and quota counters
	// never move).
	// default: fail (applied by Load and Parse, where the key is absent;
	// Validate refuses "" in a Config built by hand: say which)
	OnNodeDown string `koanf:"on_node_down"`
	// Routes maps a second-level route key to the names of its nodes. The
	// order of names does not matter: placement is by consistent hashing.
	Routes map[string][]string `koanf:"routes"`
}

// Health configures the ping/reconnect scheduler.
type Health struct {
	// Heartbeat is how often every UP node is probed.
	// default: 500ms
	Heartbeat time.Duration `koanf:"heartbeat"`
	// Timeout is the dial/read/write timeout of a probe, and the dial
	// timeout of node connections.
	// default: 300ms
	Timeout time.Duration `koanf:"timeout"`
	// Backoff lists the delays between reconnect probes of a DOWN node; the
	// last one repeats. Each delay gets ±10 % jitter.
	// default: [500ms, 1s, 1.5s] (a restarted node is noticed within about
	// 1.7s; longer delays mean fewer dials to a dead node but slower recovery).
	// A node that keeps inventory data, on which this process saw writes
	// acknowledged, is probed sooner while DOWN: every (hold_back -
	// timeout) / 2 at most (250ms by default), so that its probe lands
	// within any hold (node/wentback.go).
	Backoff []time.Duration `koanf:"backoff"`
	// HoldBack is how long a node that keeps inventory data is refused
	// after it comes up on a new server process (a restart, a Sentinel
	// promotion), so that every running instance has marked on the node's
	// peers the writes it saw acknowledged before anyone writes to it
	// (node/identity.go, "A new server process"). Every instance must
	// have its marks on the peers within it: set it no shorter than a
	// heartbeat plus the probe timeout and a mark's round trip to a peer.
	// The default leaves no room for the round trip beyond the probe
	// timeout: it counts on a restarted node being found within a
	// heartbeat (its connections broken or refused fail a probe or a
	// command at once, not after the timeout), which leaves the timeout
	// for the mark's write. On a slow link to the peers set it higher.
	// 0 means the default.
	// default: heartbeat + timeout (800ms)
	HoldBack time.Duration `koanf:"hold_back"`
}

// HoldBackOrDefault returns HoldBack, or when it is 0 its default: a
// heartbeat and the probe timeout. An instance that saw writes
// acknowledged on the node's earlier process finds it gone within that
// (its next probe, or a command on a broken connection) and marks what it
// saw at once, besides every heartbeat.
func (c *Config) HoldBackOrDefault() time.Duration {
	if c.Health.HoldBack > 0 {
		return c.Health.HoldBack
	}
	return c.Health.Heartbeat + c.Health.Timeout
}

// Breaker configures the per-node circuit breaker.
type Breaker struct {
	// Failures is the number of consecutive command failures that opens a
	// node's breaker. Must be >= 1.
	// default: 5
	Failures int `koanf:"failures"`
	// OpenTimeout is how long an open breaker rejects commands before it
	// lets one half-open trial through.
	// default: 1s
	OpenTimeout time.Duration `koanf:"open_timeout"`
}

// Client configures the go-redis client of every node.
type Client struct {
	// CommandTimeout is the read and write timeout of commands (a caller's
	// shorter context deadline wins).
	// default: 1s
	CommandTimeout time.Duration `koanf:"command_timeout"`
	// PoolSize is the connection pool size per node (0..10000); 0 means
	// go-redis's default (10 per GOMAXPROCS).
	// default: 0
	PoolSize int `koanf:"pool_size"`
}

// Pipeline configures auto-pipelining: concurrent commands to one node
// share a pipeline (one write, one read) instead of one round trip each;
// a command that finds fewer than From commands of its node under way is
// sent at once on the node's pool.
type Pipeline struct {
	// Enabled turns auto-pipelining on for every node.
	// default: true
	Enabled bool `koanf:"enabled"`
	// MaxBatch is the target number of commands per pipeline of the
	// prompt pipeline (1..10000).
	// default: 200
	MaxBatch int `koanf:"max_batch"`
	// From is the number of one node's commands under way (the new one
	// included) from which a command is auto-pipelined; below it the
	// command is sent on its own, as by a plain client (1..100000; 0
	// means 6; 1 pipelines every command, even a lone caller's).
	// default: 6
	From int `koanf:"from"`
	// BusyFrom is the number of one node's commands under way (the new one
	// included) from which a command rides the node's busy pipeline
	// instead of its prompt one (2..100000; 0 means 12). Only with
	// BusyFlushDelay > 0. While the node's commands under way average at
	// least BusyMaxBatch, every pipelined command rides the busy pipeline.
	// default: 12
	BusyFrom int `koanf:"busy_from"`
	// BusyMaxBatch is the busy pipeline's batch target: it flushes as soon
	// as this many commands wait, or after BusyFlushDelay (1..10000; 0
	// means 16).
	// default: 16
	BusyMaxBatch int `koanf:"busy_max_batch"`
	// BusyFlushDelay is how long the busy pipeline waits for more commands
	// before each flush (0..10ms). With it a node with many callers at once
	// has two batches in flight (the prompt pipeline's and the busy one's)
	// instead of one: more throughput, a little more CPU per command (see
	// the README, "Auto-pipelining"). The prompt pipeline, which quieter
	// moments use, waits only for the callers its previous batch woke
	// (go-redis's coalescing). 0 turns the busy pipeline off.
	// default: 200µs
	BusyFlushDelay time.Duration `koanf:"busy_flush_delay"`
}

// Inventory configures the inventory service.
type Inventory struct {
	// Server is the first-level server key whose routes hold SKUs.
	// default: inventory
	Server string `koanf:"server"`
	// ReservationTTL is how long a reservation is held before the
	// reconciler cancels it, when Reserve gives no TTL.
	// default: 10m
	ReservationTTL time.Duration `koanf:"reservation_ttl"`
	// MaxReservationTTL caps a per-order TTL given to Reserve.
	// default: 1h
	MaxReservationTTL time.Duration `koanf:"max_reservation_ttl"`
	// ReconcileInterval is how often the reconciler scans for expired parts.
	// default: 1s
	ReconcileInterval time.Duration `koanf:"reconcile_interval"`
	// RedoQueues is the number of redo-log queues (sorted sets) per node,
	// 1..1024: a part's entry goes to queue xxhash(route:sku) mod
	// RedoQueues. It may change at any time: a SKU's new parts then go to
	// another queue, and the nodes keep the queues written before, which
	// `shardis sync` lands and acknowledges and the service trims like
	// the others, whatever RedoQueues it runs with (both read every queue
	// a node holds: inventory.RedoQueuesHeld).
	// default: 50
	RedoQueues int `koanf:"redo_queues"`
	// Retention is how long settled orders, settled parts and tombstones
	// are kept (the idempotency and anti-hanging window); it trims no
	// redo-log entry (redo_max_age does). A decided order's record lives this long
	// after its parts come due (its deadline + 1s), so a part whose settle
	// did not land must be reached by a reconciler within it: past it the
	// record is gone and the part is cancelled, a confirmed order's too.
	// Must exceed max_reservation_ttl, and be at least 3s (MinRetention).
	// default: 168h
	Retention time.Duration `koanf:"retention"`
	// RedoMaxAge, when > 0, is how old a settled redo-log entry may grow
	// before the reconciler trims it even though no consumer acknowledged
	// it (an explicit opt-in: a consumer down longer than this loses those
	// entries). 0 never trims an unacknowledged entry: settled entries are
	// trimmed once acknowledged (AckRedoLog), and the unacknowledged backlog
	// is the metric shardis_redo_unacked_entries.
	// default: 0 (never)
	RedoMaxAge time.Duration `koanf:"redo_max_age"`
	// AttemptLease is how long one Reserve attempt owns its order before a
	// retry of the same order id may take it over. A retry arriving while
	// the first attempt still runs waits for it (up to the retry's own
	// deadline); one arriving after a crashed attempt waits out the lease.
	// default: 10s
	AttemptLease time.Duration `koanf:"attempt_lease"`
	// Durability is when a write script of the inventory (reserve, commit,
	// confirm, cancel, settle, stock load …) counts as done: "none" when
	// the master ran it; "replica" when at least one replica also has it
	// (the script is followed on its connection by WAIT 1
	// durability_timeout); "aof" when it is fsynced to the master's AOF
	// and to one replica's (WAITAOF 1 1, Redis >= 7.2: refused at startup
	// on older nodes). A write not acknowledged in time is an unknown
	// outcome, handled like a timeout. See README "HA shards".
	// default: none ("" means none)
	Durability string `koanf:"durability"`
	// DurabilityTimeout is the WAIT / WAITAOF timeout of durability
	// replica and aof. It must be below client.command_timeout (the WAIT
	// reply has to arrive within the read timeout).
	// default: 500ms
	DurabilityTimeout time.Duration `koanf:"durability_timeout"`
	// GroupCommit is the most calls of one inventory script (the reserve,
	// order-record and settle scripts) that one node runs as one script
	// call (group commit: concurrent orders on one node share the script
	// call, its node checks and its round trip; each order still succeeds
	// or fails on its own). A call that finds fewer than two groups under
	// way on its node (of any script) and no call waiting there is sent at
	// once. 1 turns group commit off (0..1000; 0 means 32).
	// default: 32
	GroupCommit int `koanf:"group_commit"`
	// CarryWait is how long a one-round reservation's commit waits on its
	// home node for the next write script call there to carry it, instead
	// of a call of its own (ten times this, counted from its own start,
	// while the node is busy);
	// then it is sent by itself. Negative sends every commit by itself;
	// at most 1m; 0 means 2ms.
	// default: 2ms
	CarryWait time.Duration `koanf:"carry_wait"`
}

// Durability levels of [Inventory.Durability].
const (
	// DurabilityNone acknowledges a write once the master ran it.
	DurabilityNone = "none"
	// DurabilityReplica acknowledges a write once one replica has it (WAIT).
	DurabilityReplica = "replica"
	// DurabilityAOF acknowledges a write once it is fsynced to the
	// master's AOF and to one replica's (WAITAOF, Redis >= 7.2).
	DurabilityAOF = "aof"
)

// Default returns a Config holding every default and no nodes or servers.
// It is the starting point [Load] decodes onto.
func Default() Config {
	return Config{
		Service: Service{Listen: "127.0.0.1:7400", MaxBodyBytes: 1 << 20, ShutdownTimeout: 10 * time.Second},
		Health: Health{
			Heartbeat: 500 * time.Millisecond,
			Timeout:   300 * time.Millisecond,
			Backoff:   []time.Duration{500 * time.Millisecond, time.Second, 1500 * time.Millisecond},
		},
		Breaker:  Breaker{Failures: 5, OpenTimeout: time.Second},
		Client:   Client{CommandTimeout: time.Second},
		Pipeline: Pipeline{Enabled: true, MaxBatch: 200, From: 6, BusyFrom: 12, BusyMaxBatch: 16, BusyFlushDelay: 200 * time.Microsecond},
		Inventory: Inventory{
			Server:            "inventory",
			ReservationTTL:    10 * time.Minute,
			MaxReservationTTL: time.Hour,
			ReconcileInterval: time.Second,
			RedoQueues:        50,
			Retention:         7 * 24 * time.Hour,
			RedoMaxAge:        0,
			AttemptLease:      10 * time.Second,
			Durability:        DurabilityNone,
			DurabilityTimeout: 500 * time.Millisecond,
			GroupCommit:       32,
			CarryWait:         2 * time.Millisecond,
		},
		Sync: defaultSync(),
	}
}

// defaultNode is the value a node entry is decoded onto.
func defaultNode() Node { return Node{Weight: 1} }

// defaultServer is the value a server entry is decoded onto.
func defaultServer() Server { return Server{OnNodeDown: OnNodeDownFail} }

// KeepData is router.Options.KeepData for this configuration: the
// inventory server's key when the servers section configures it (its
// nodes keep data that must not be lost), none for a router-only
// configuration.
func (c *Config) KeepData() []string {
	if _, ok := c.Servers[c.Inventory.Server]; ok {
		return []string{c.Inventory.Server}
	}
	return nil
}
