package node

import (
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
)

// Options configures [New]. Name, and Addr or Sentinel, are required;
// every other zero value means its default.
type Options struct {
	// Name is the node's configured name: its ring identity and the name
	// written into its stamp.
	Name string
	// Addr is host:port of a standalone node. For a Sentinel node it is
	// only the name shown in errors and logs.
	// default: "sentinel:" + Sentinel.Master for a Sentinel node
	Addr string
	// Sentinel, when set, makes the node a Sentinel-managed master group
	// (sentinel.go): every client follows the group's current master.
	// default: nil (a standalone node at Addr)
	Sentinel *SentinelOptions
	// Username and Password authenticate to the data node(s) (ACL user,
	// requirepass).
	Username, Password string
	// DB is the logical database.
	DB int
	// TLSConfig enables TLS to the node when non-nil.
	TLSConfig *tls.Config
	// Routes lists the (server, route) pairs the node serves. Each starts
	// enabled; [Node.SetRouteEnabled] on any other pair is an error.
	Routes []RouteKey
	// DialTimeout bounds connecting to the node. For a Sentinel node it
	// includes asking the sentinels for the master, each of them within a
	// quarter of it (and, for the probe's dial, of ProbeTimeout): a
	// sentinel that does not answer costs at most three quarters.
	// default: 300ms
	DialTimeout time.Duration
	// CommandTimeout is the read and write timeout of commands. A caller's
	// context deadline, when shorter, wins.
	// default: 1s
	CommandTimeout time.Duration
	// ProbeTimeout bounds one [Node.Probe]'s round trip to the node. A
	// probe whose connection must be established first (first contact,
	// after a failure) gives that another ProbeTimeout plus DialTimeout.
	// default: 300ms
	ProbeTimeout time.Duration
	// PoolSize is the connection pool size.
	// default: go-redis's default, 10 per GOMAXPROCS
	PoolSize int
	// BreakerFailures is the number of consecutive failed commands that
	// opens the breaker. While it is closed with no failure counted,
	// commands skip it (the fast path) and only their failures are
	// reported, so a success admitted before a failure and answered after
	// it does not reset the count.
	// default: 5
	BreakerFailures int
	// BreakerOpenTimeout is how long the breaker stays open before it lets
	// one half-open trial through.
	// default: 1s
	BreakerOpenTimeout time.Duration
	// OnFailure, when set, is called after every command that failed with a
	// node failure (see [IsFailure]); for commands the node's pipelines
	// sent, once per batch. It runs on the caller's goroutine (a pipeline's
	// sender's, for a batch) and must return quickly (the health
	// scheduler's Trigger does).
	OnFailure func()
	// Observe, when set, is called after every command or pipeline that
	// reached the network, with its duration and whether it was a node
	// failure (for latency metrics); for commands the node's pipelines
	// sent, once per batch. A command the client never sent (no free
	// connection in time, redis.ErrPoolTimeout, or the client closed,
	// redis.ErrClosed) is not observed. It runs on the goroutine OnFailure
	// runs on.
	Observe func(d time.Duration, failure bool)
	// Witnesses, when set with Critical, holds the first write of each
	// incarnation on a peer before it is acknowledged ([Node.Acknowledge],
	// witness.go). The marks peers hold of the node reach its probes
	// through [Node.SetWitnessed].
	// default: nil (writes are acknowledged without a peer's mark)
	Witnesses Witnesses
	// Critical marks a node that holds data which must not be lost (the
	// inventory's): unsafe eviction or persistence settings are logged as
	// warnings at first contact and when a reconnect finds them changed,
	// a probe refuses it when its data went back, and every command
	// connection dialled once its stamp was seen reads the stamp before
	// its first command (dialcheck.go).
	// default: false
	Critical bool
	// Settle, for a Critical node, is how long its data is held back
	// after it came up on another server process (a restart, a Sentinel
	// promotion): long enough for every running process to have marked
	// on the peers the writes it saw acknowledged (identity.go, "A new
	// server process"). The router sets it from config health.hold_back.
	// default: 0 (not held back)
	Settle time.Duration
	// Hooks are added to every client the node builds (also after an
	// outage), before its own hooks: they see every command and pipeline
	// the caller issues, whether it is sent on its own or auto-pipelined.
	// default: none
	Hooks []redis.Hook
	// Pipeline, when non-nil, turns on auto-pipelining of the node's client
	// with these go-redis options (see pipeline.go): a command that finds
	// at least PipelineFrom commands of the client under way shares a
	// pipeline with them; one that finds fewer is sent at once on the pool.
	// default: nil (off); the router turns it on from the configuration
	Pipeline *redis.AutoPipelineOptions
	// PipelineFrom is the number of the client's commands under way (the
	// new one included) from which a command is auto-pipelined; below it
	// the command is sent on its own. 1 pipelines every command.
	// default: 6
	PipelineFrom int
	// BusyPipeline, when non-nil with Pipeline set, adds a second
	// auto-pipeliner with these options for busy moments: a pipelined
	// command that finds at least BusyFrom commands of the client under
	// way (itself included), or while the client's commands under way
	// average at least its MaxBatchSize (its batch target), rides it
	// instead of the Pipeline one (pipeline.go). Each pipeliner runs
	// its own batches (one at a time with go-redis's default
	// MaxConcurrentBatches), so a busy node gets a second batch in flight
	// while a quieter one uses only the prompt pipeliner. Give it a
	// MaxFlushDelay so that it waits for more commands before each flush.
	// default: nil (one pipeliner); the router sets it from the configuration
	BusyPipeline *redis.AutoPipelineOptions
	// BusyFrom is the number of the client's commands under way (the new
	// one included) from which a pipelined command rides BusyPipeline
	// whatever the average; with BusyFrom ≤ PipelineFrom every pipelined
	// command does.
	// default: 12
	BusyFrom int
	// Logger receives identity and breaker events.
	// default: slog.Default()
	Logger *slog.Logger
}

func (o *Options) setDefaults() {
	if o.DialTimeout <= 0 {
		o.DialTimeout = 300 * time.Millisecond
	}
	if o.CommandTimeout <= 0 {
		o.CommandTimeout = time.Second
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = 300 * time.Millisecond
	}
	if o.BreakerFailures <= 0 {
		o.BreakerFailures = 5
	}
	if o.BreakerOpenTimeout <= 0 {
		o.BreakerOpenTimeout = time.Second
	}
	if o.PipelineFrom <= 0 {
		o.PipelineFrom = 6
	}
	if o.BusyFrom <= 0 {
		o.BusyFrom = 12
	}
	if o.OnFailure == nil {
		o.OnFailure = func() {}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}
