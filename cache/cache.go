// Package cache is a read-through cache over a shardis router: the read
// path guards of the design seeds (000, 001, 004) on a sharded router.
//
// Get(key, loader) returns the cached value, or fills a miss by calling
// the loader, guarded so that a flash sale's read flood cannot reach the
// database:
//
//   - Single flight across instances. Concurrent misses of a key in one
//     process share one fill (in-process single flight); across processes a
//     gate key (SET NX PX on the key's node, seed 000 §2.1) lets exactly one
//     caller run the loader while the others poll the key for up to
//     Options.FillWait and then get ErrFilling; when the gate's holder
//     lets it go without storing a value (its caller gave up, its loader
//     failed), a waiter takes the gate and fills the key itself.
//   - Negative caching. A loader that returns ErrNotFound leaves a marker
//     for at most Options.NegativeTTL; Get answers ErrNotFound from it
//     without the loader, never an empty value.
//   - TTL jitter. Every value lives TTL ± Jitter·TTL, drawn uniformly, so keys
//     filled together do not expire together; a marker lives NegativeTTL
//     less up to Jitter·NegativeTTL. An L1 copy (below) never outlives the
//     copy in Redis it was read from, nor, in the instance that filled it,
//     the shortest-lived of the copies it wrote.
//   - Hot-key replicas. Options.Replicas(key) = n keeps n copies on n
//     distinct nodes of the route (copy 0 is the key on its own node; copy i
//     is placed by hashing key#i, skipping nodes already used, and stored
//     under a Redis key of its own copy number's namespace, never another
//     key's: copies.go, copyKey); reads pick a
//     random usable copy and fail over to the others, so a hot key's reads
//     spread over several Redis processes and survive one node's loss.
//     Replicas' answer may change over time: Set and Invalidate touch
//     every copy up to Options.MaxReplicas, whatever it answers now (a
//     Set replaces the copies beyond the answer that exist), so a copy
//     written while the key was hot is not read stale once it is hot
//     again.
//   - L1. With Options.L1Size > 0 each instance keeps a bounded in-process
//     LRU (l1.go: a small own implementation — a map and a list, no
//     dependency — since only Get/Add/Remove/Purge with a size bound are
//     needed). Set and Invalidate publish the key on Redis pub/sub; every
//     instance subscribes on every node of the route and drops the key
//     from its L1 (invalidate.go). Pub/sub was picked over server-assisted
//     tracking (CLIENT TRACKING) because it works with the router's RESP2
//     clients and plain connections, and one channel per route serves
//     every instance; the cost, that a message published while an instance
//     is disconnected is lost, is covered by dropping that instance's whole
//     L1 whenever a subscription breaks or is made again, or goes silent
//     (a subscription that hears nothing PINGs, and is dropped and made
//     again when not even the PONG came within 3s).
//   - Loader rate limit. With Options.LoaderRate > 0 a token bucket in Redis
//     (bucket.go, one Lua script, on the first usable node of the bucket
//     key's ring walk)
//     caps loader calls per second across all instances; over it Get
//     returns ErrThrottled without calling the loader, and with
//     Options.Backfill the miss is queued on a Redis stream for
//     [Cache.Backfill] (backfill.go) to fill later.
//   - Node down. A key's copies on a node that is not usable are not read;
//     when no copy can be read because no node of them can serve (an
//     error reply a node gives on purpose is Get's error as it came, and
//     a copy of another type, WRONGTYPE, or a string not in the cache's
//     encoding, a miss the fill overwrites)
//     Get fails at once with an error
//     wrapping router.ErrUnavailable, or, with Options.FallbackToLoader,
//     calls the loader without caching, still rate limited and still in
//     the key's in-process single flight (concurrent Gets of the key in
//     one process share one loader call, or the next one for those that
//     joined it after its call: below). Copies never move: each sits on
//     the node the ring gives it (copies.go), whatever the server's
//     on_node_down or a route's drain says, so a Set or Invalidate always
//     reaches the copies a Get reads (a copy moved while its node was down
//     or drained would miss the writes in between, and be read stale once
//     the node is back).
//   - Writes win over racing fills. Set and Invalidate leave a new version
//     beside every copy (version.go); a fill reads the versions before its
//     loader runs and stores a copy only where the version is unchanged,
//     so a value (or "not found") its loader read before a Set or
//     Invalidate is returned to its callers but not stored, in Redis or
//     L1. A fill that takes longer than FillLease plus a minute stores
//     nothing.
//   - Which Gets of an in-process run get its answer (flight.go). A Get
//     that misses joins the key's run (a fill, or a FallbackToLoader
//     load) whenever it comes, also after the step that decided the
//     run's answer, and it may have started after a Set or Invalidate
//     that came after that step. So a run's answer (a value, or "not
//     found") is its first caller's, and a joined Get's only when a step
//     sent after it joined confirmed it: the loader's call (it reads the
//     row after any write that returned before the join), the read that
//     found the copy (waitFill's poll, or the fill's read of the versions,
//     which a refill of the other copies follows by a round trip), or a
//     store its version check accepted on a copy's node. A FallbackToLoader
//     load has the loader's call alone. The joined Gets it was not
//     confirmed for are handed together to a next run (one more fill or
//     loader call, not one each), run by the first of them still waiting.
//   - Close stops the subscriptions and turns L1 off: later Gets read
//     Redis.
//
// What it does not promise: a value is as fresh as its TTL or the last Set
// or Invalidate (a copy on a node the Set or Invalidate could not reach
// keeps its older value until its TTL); L1 copies may be stale for the time an
// invalidation takes to arrive (measured under 100 ms on loopback) and, if
// a publish is lost while the subscription looks healthy, until L1TTL.
package cache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardis/shardis/router"
)

var (
	// ErrNotFound is returned by Get when the loader said the key does
	// not exist (now, or recently: a negative marker); loaders return it
	// to say so.
	ErrNotFound = errors.New("cache: not found")
	// ErrThrottled is returned by Get when a miss would exceed the loader
	// rate limit; the loader was not called.
	ErrThrottled = errors.New("cache: loader rate limit reached")
	// ErrFilling is returned by Get when another caller (another instance)
	// is filling the key and it did not appear within Options.FillWait.
	ErrFilling = errors.New("cache: key is being filled")
)

// Loader loads a key's value from the system of record. It returns
// ErrNotFound when the key does not exist.
type Loader func(ctx context.Context, key string) ([]byte, error)

// Options configures New. The zero value works.
type Options struct {
	// TTL is how long a value lives. default: 5m
	TTL time.Duration
	// Jitter is the fraction of TTL added or removed at random (of
	// NegativeTTL only removed). default: 0.1 (values live
	// 0.9·TTL..1.1·TTL, markers 0.9·NegativeTTL..NegativeTTL); must be
	// below 1. A negative value (e.g. -1) turns jitter off: values live
	// exactly TTL, markers exactly NegativeTTL. NaN is refused.
	Jitter float64
	// NegativeTTL is how long a "not found" marker lives at most (Jitter
	// only shortens it). default: 30s
	NegativeTTL time.Duration
	// FillLease is how long a filler holds a key's gate. default: 5s. A
	// fill whose loader runs longer than FillLease plus a minute returns
	// its value without storing it (a write racing it could not be told).
	FillLease time.Duration
	// FillWait is how long a caller waits for another instance's fill
	// before ErrFilling (it fills the key itself if that fill gives up
	// its gate without a value meanwhile). default: 1s
	FillWait time.Duration
	// Replicas returns how many copies a key keeps, each on a node of its
	// own (1..MaxReplicas; values out of range are clamped). Get reads
	// one of the copies of its answer then, and a fill stores them. Its
	// answer may change over time (a key turning hot, then cooling): Set
	// and Invalidate reach every copy up to MaxReplicas, whatever it
	// answers (a Set stores the value in the copies of its answer and
	// replaces the others that exist), so a Get never reads a copy older
	// than the last Set or Invalidate that returned nil. default: 1 for
	// every key
	Replicas func(key string) int
	// MaxReplicas bounds Replicas' answer: it is how many copies of a key
	// every Set and Invalidate writes or deletes (at once, one round
	// trip per copy's node; one on an unusable node makes their error,
	// since it may hold a copy an earlier, larger answer put there).
	// default: 1 without Replicas, else the number of nodes of the route
	// (every answer Replicas can give; set it to the largest answer
	// yours gives to keep writes off the other nodes). Above the number
	// of nodes of the route it is clamped to it; negative is refused.
	MaxReplicas int
	// L1Size bounds the in-process cache, in entries. default: 0 (off)
	L1Size int
	// L1TTL bounds how long an entry stays in L1. default: TTL
	L1TTL time.Duration
	// LoaderRate is the loader calls per second allowed across all
	// instances of this (server, route, Name). default: 0 (no limit);
	// negative, NaN and infinite values are refused.
	LoaderRate float64
	// LoaderBurst is the bucket's size. default: ⌈LoaderRate⌉, in 1..2³¹-1
	LoaderBurst int
	// Backfill queues throttled misses on a Redis stream for
	// [Cache.Backfill]: every miss whose fill the loader rate limit
	// refused, whether the bucket was empty or could not be read (not a
	// FallbackToLoader load: no copy of its key could be read).
	// default: false
	Backfill bool
	// FallbackToLoader makes Get call the loader (without caching; one
	// call per key at a time in a process, shared by the Gets that wait
	// for it) when no copy of the key can be read: none is on a usable
	// node, or every read of one failed as unavailable (its node could
	// not serve: not an error reply it gave on purpose). (A miss whose
	// fill gate cannot be taken, its node failing, is not loaded: Get
	// returns that error.) default: false (fail fast)
	FallbackToLoader bool
	// Name separates caches sharing a route (key prefix of gates,
	// buckets, channels and streams). default: "default"
	Name string
	// Logger receives subscription and backfill problems.
	// default: slog.Default()
	Logger *slog.Logger
}

// Cache is a read-through cache over one (server, route) of a router. It
// is safe for concurrent use. Close it to stop its subscriptions.
type Cache struct {
	set    *router.Set
	opts   Options
	log    *slog.Logger
	prefix string // "shardis:cache:<name>:"
	l1     *l1Cache
	flight flightGroup
	stats  counters
	sub    *subscriber
	mu     sync.Mutex
	rng    *rand.Rand // guarded by mu
}

// New builds a cache over r's (server, route).
func New(r *router.Router, server, route string, opts Options) (*Cache, error) {
	set, err := r.Set(server, route)
	if err != nil {
		return nil, err
	}
	if math.IsNaN(opts.Jitter) || opts.Jitter >= 1 {
		return nil, fmt.Errorf("cache: Jitter is %v, want below 1 (0: the default 0.1, negative: none)", opts.Jitter)
	}
	if opts.LoaderRate < 0 || math.IsNaN(opts.LoaderRate) || math.IsInf(opts.LoaderRate, 0) {
		return nil, fmt.Errorf("cache: LoaderRate is %v, want a finite number >= 0 (0: no limit)", opts.LoaderRate)
	}
	if opts.MaxReplicas < 0 {
		return nil, fmt.Errorf("cache: MaxReplicas is %d, want >= 0 (0: the default)", opts.MaxReplicas)
	}
	switch {
	case opts.MaxReplicas == 0 && opts.Replicas == nil:
		opts.MaxReplicas = 1
	case opts.MaxReplicas == 0 || opts.MaxReplicas > len(set.Nodes()):
		opts.MaxReplicas = len(set.Nodes())
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&opts.TTL, 5*time.Minute)
	def(&opts.NegativeTTL, 30*time.Second)
	def(&opts.FillLease, 5*time.Second)
	def(&opts.FillWait, time.Second)
	def(&opts.L1TTL, opts.TTL)
	switch {
	case opts.Jitter == 0:
		opts.Jitter = 0.1
	case opts.Jitter < 0:
		opts.Jitter = 0
	}
	if opts.LoaderBurst <= 0 { // clamped as a float: int() of a huge rate overflows
		opts.LoaderBurst = int(max(1, min(math.Ceil(opts.LoaderRate), maxLoaderBurst)))
	}
	if opts.Name == "" {
		opts.Name = "default"
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	c := &Cache{set: set, opts: opts, log: opts.Logger,
		prefix: "shardis:cache:" + opts.Name + ":" + server + ":" + route + ":",
		rng:    rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
	c.stats.reads = map[string]*atomic.Int64{}
	for _, n := range set.Nodes() {
		c.stats.reads[n.Name()] = new(atomic.Int64)
	}
	if opts.L1Size > 0 {
		c.l1 = newL1(opts.L1Size)
		c.sub = startSubscriber(c)
	}
	return c, nil
}

// Close stops the invalidation subscriptions and turns L1 off: a closed
// cache no longer hears invalidations, so its later Gets read Redis (an
// L1 kept after Close would answer a key changed since until L1TTL). It
// is idempotent; Get, Set and Invalidate keep working after it.
func (c *Cache) Close() {
	if c.sub != nil {
		c.sub.close()
	}
	if c.l1 != nil {
		c.l1.stop()
	}
}

// Get returns key's value: from L1, from Redis, or filled by loader (see
// the package comment). Errors: ErrNotFound, ErrThrottled, ErrFilling,
// one wrapping router.ErrUnavailable, one wrapping ctx's error when ctx
// ended first (never router.ErrUnavailable then), one wrapping the error
// reply a usable node gave on purpose (e.g. NOPERM; never
// router.ErrUnavailable, and no FallbackToLoader), or the loader's own
// error. A copy holding a key of another type (WRONGTYPE) or a string not
// in the cache's encoding (something else wrote the cache's key) is a
// miss: the fill overwrites it.
//
// The returned slice is shared: an L1 hit returns the entry's own bytes,
// and the callers of one fill get the same slice. Treat it as read-only;
// copy it before changing it (a change would be what every later hit of
// the key returns, until the entry leaves L1).
func (c *Cache) Get(ctx context.Context, key string, loader Loader) ([]byte, error) {
	var gen uint64
	if c.l1 != nil {
		if enc, ok := c.l1.get(key); ok {
			c.stats.l1Hits.Add(1)
			return decode(enc)
		}
		gen = c.l1.generation()
	}
	enc, found, left, err := c.readLeft(ctx, key, c.l1 != nil)
	if err != nil {
		if !c.opts.FallbackToLoader || !errors.Is(err, router.ErrUnavailable) {
			return nil, err
		}
		enc, err = c.flight.do(ctx, key, func(ctx context.Context, run flightRun) ([]byte, error) { return c.loadUncached(ctx, key, loader, run) })
		if err != nil {
			return nil, err
		}
		return decode(enc)
	}
	if found {
		c.hit(key, enc, gen, left)
		return decode(enc)
	}
	c.stats.misses.Add(1)
	enc, err = c.flight.do(ctx, key, func(ctx context.Context, run flightRun) ([]byte, error) {
		return c.fill(ctx, key, loader, c.opts.Backfill, gen, run)
	})
	if err != nil {
		return nil, err
	}
	return decode(enc)
}

// hit counts a value read from Redis and keeps it in L1 for no longer than
// left, its remaining TTL there (readLeft: 0 unknown, negative not at all).
func (c *Cache) hit(key string, enc []byte, gen uint64, left time.Duration) {
	if isNegative(enc) {
		c.stats.negativeHits.Add(1)
	} else {
		c.stats.hits.Add(1)
	}
	if c.l1 != nil && left >= 0 {
		ttl := c.l1TTL(enc)
		if left > 0 {
			ttl = min(ttl, left)
		}
		c.l1.add(key, enc, ttl, gen)
	}
}

// l1TTL is how long an encoded value may stay in L1: L1TTL, and no longer
// than NegativeTTL for a "not found" marker.
func (c *Cache) l1TTL(enc []byte) time.Duration {
	if isNegative(enc) {
		return min(c.opts.L1TTL, c.opts.NegativeTTL)
	}
	return c.opts.L1TTL
}

// Set stores a value in the copies of key Get reads now
// (Options.Replicas), replaces its other copies up to Options.MaxReplicas
// that exist (none is created), and drops it from every instance's L1.
// On a node at maxmemory that refuses new memory (OOM, noeviction) the
// copy is deleted instead, with no error: no copy is left older than the
// Set (a Get misses it, and fills it once the node has room).
//
// An error says some copy may still hold an older value until its TTL:
// one wrapping router.ErrUnavailable when its node was unusable or could
// not serve the write, the error reply a usable node gave on purpose
// (e.g. NOPERM; not router.ErrUnavailable), or ctx's error when ctx ended
// first; each names the key and the node. This instance's L1 entry is
// dropped all the same, and the key is published to the other instances
// on every usable node of its copies; a publish that failed is an error
// too, of the same kinds (that node's subscribers were not told).
func (c *Cache) Set(ctx context.Context, key string, val []byte) error {
	err := c.mark(ctx, key, append([]byte{kindValue}, val...))
	return errors.Join(err, c.invalidateL1(ctx, key))
}

// Invalidate deletes every copy of key up to Options.MaxReplicas and
// drops it from every instance's L1, also on a node at maxmemory (OOM,
// noeviction: the delete takes no memory). Its errors are Set's: one says
// some copy may still hold its value, or that a publish to the other
// instances' L1s failed.
func (c *Cache) Invalidate(ctx context.Context, key string) error {
	return errors.Join(c.mark(ctx, key, nil), c.invalidateL1(ctx, key))
}
