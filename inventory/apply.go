package inventory

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
	"github.com/shardis/shardis/topology"
)

// The inventory's side of a topology change: [ApplyTopology] wires a
// [topology.Apply] to a migrator, the [topology.Driver] that runs its
// steps on the inventory nodes (record scripts here and in epoch_lua.go,
// the moves in apply_migrate.go and migrate.go).

// ApplyOptions configures [ApplyTopology].
type ApplyOptions struct {
	// To is the configuration whose topology to apply. Required.
	To *config.Config
	// From is the configuration currently applied. It is needed only for
	// the addresses of nodes that leave the topology (To does not list
	// them); when given, its topology must be the nodes' current one.
	// default: none (the current topology is read from the nodes)
	From *config.Config
	// Wait is [topology.Options.Wait].
	// default: 1 minute
	Wait time.Duration
	// DryRun checks and reports what would change without writing.
	DryRun bool
	// Logger receives progress.
	// default: slog.Default()
	Logger *slog.Logger
	// Faults injects faults into the apply's script calls and crash
	// points (faults.go): for tests and the schedule explorer only.
	// default: none
	Faults Faults
}

// ApplyTopology moves the inventory nodes to the topology of opts.To by
// [topology.Apply] (check, bump, migrate, stable), over a router of its own
// that reaches the nodes of both configurations. Every node of the current
// and the new topology must be reachable. It is idempotent: run it again
// to resume an interrupted apply, or to finish one that returned in phase
// migrating (see ApplyOptions.Wait).
func ApplyTopology(ctx context.Context, opts ApplyOptions) (topology.Report, error) {
	if opts.To == nil {
		return topology.Report{}, fmt.Errorf("%w: topology apply needs the new configuration", ErrInvalid)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	merged := *opts.To
	merged.Nodes = map[string]config.Node{}
	for name, n := range opts.To.Nodes {
		merged.Nodes[name] = n
	}
	topts := topology.Options{To: topology.Of(opts.To), Wait: opts.Wait, DryRun: opts.DryRun, Logger: opts.Logger}
	if opts.From != nil {
		for name, n := range opts.From.Nodes {
			if _, ok := merged.Nodes[name]; !ok {
				merged.Nodes[name] = n
			}
		}
		from := topology.Of(opts.From)
		topts.From = &from
	}
	r, err := router.New(ctx, &merged, router.Options{KeepData: merged.KeepData(), Logger: opts.Logger})
	if err != nil {
		return topology.Report{}, err
	}
	defer r.Close()
	inv, err := newInventory(r, Options{Logger: opts.Logger, Faults: opts.Faults}, true)
	if err != nil {
		return topology.Report{}, err
	}
	topts.Crash = func(ctx context.Context, point string) error {
		if inv.crash(ctx, point) {
			return errCrashed
		}
		return nil
	}
	return topology.Apply(ctx, topts, &migrator{inv: inv, r: r, log: opts.Logger})
}

// migrator is the inventory's [topology.Driver]. Each step method records
// the change it runs (c) and counts what it moves (moved).
type migrator struct {
	inv   *Inventory
	r     *router.Router
	log   *slog.Logger
	c     topology.Change
	moved topology.Moved
}

// node returns the named node when it is configured and usable: every
// node of both topologies must answer.
func (a *migrator) node(name string) (*node.Node, error) {
	n, err := a.r.Node(name)
	if err != nil {
		return nil, fmt.Errorf("node %s is in the current topology but not in --config: pass --from with a configuration that gives its address: %w", name, err)
	}
	if !n.Usable() {
		return nil, fmt.Errorf("%w: node %s is unavailable (%s): every node of both topologies must answer", ErrUnavailable, name, a.inv.unusableReason(n))
	}
	return n, nil
}

// Read implements [topology.Driver] by topoReadScript.
func (a *migrator) Read(ctx context.Context, name string) (topology.Record, error) {
	n, err := a.node(name)
	if err != nil {
		return topology.Record{}, err
	}
	return readRecord(ctx, n)
}

// Write implements [topology.Driver] by topoWriteScript.
func (a *migrator) Write(ctx context.Context, name, expect string, rec topology.Record) error {
	n, err := a.node(name)
	if err != nil {
		return err
	}
	return writeRecord(ctx, a.inv, n, expect, rec)
}

// Pending implements [topology.Driver]: the size of the node's pending
// index ([PendingKey]).
func (a *migrator) Pending(ctx context.Context, name string) (int, error) {
	n, err := a.node(name)
	if err != nil {
		return 0, err
	}
	pending, err := n.Client().ZCard(ctx, PendingKey).Result()
	if err != nil {
		return 0, fmt.Errorf("%w: node %s: %v", ErrUnavailable, name, err)
	}
	return int(pending), nil
}

// begin starts a step of change c: it records c and zeroes the counts.
func (a *migrator) begin(c topology.Change) {
	a.c, a.moved = c, topology.Moved{}
}

// scan returns every key of n matching pattern.
func scan(ctx context.Context, n *node.Node, pattern string) ([]string, error) {
	var out []string
	it := n.Client().Scan(ctx, 0, pattern, 1000).Iterator()
	for it.Next(ctx) {
		out = append(out, it.Val())
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("%w: node %s: scan %s: %v", ErrUnavailable, n.Name(), pattern, err)
	}
	sort.Strings(out)
	return out, nil
}

// limitSetScript writes a per-user limit and its version onto a stock
// hash of a node that may not be at any epoch yet (a joining node), unless
// the node holds a newer version (limit_sync.lua's rule: a change made at
// the new epoch reached it) or that limit at that version. KEYS: 1 stamp,
// 2 stock hash. ARGV: 1 node name, 2 limit, 3 version. Replies "ok"
// (written) or "kept".
//
// It runs outside the prelude and runner of lua.go, and must: copyLimits
// runs before bump moves the joining nodes to the new epoch, when such a
// node has no epoch token (or the previous one), which the prelude would
// refuse (SHARDIS_EPOCH), and the migrator works on a router of its own
// (both topologies' nodes), not the inventory's view. It checks the
// node's identity as the prelude does; its errors go through nodeErr and
// its reply through a replyReader (reply.go). It is sent with the
// durability wait, and advances the node's write sequence, acknowledged
// (runBareWrite: durability.go, "Bare writes"): the apply does not copy
// the limits again once it bumped the nodes.
var limitSetScript = newBareScript("limit-set", identityLua+bareWriteLua(luaFile("limit_set.lua")))

// CopyLimits implements [topology.Driver]: members that join a route get
// the route's per-user limits before any instance can take quota on them:
// for each SKU, the limit of the newest version the old members hold (the
// smallest positive one of that version, 0 only when all say 0), with its
// version, unless the joining node holds a newer one. The apply calls it
// before its first bump and again once every old node is bumped: until
// then an instance of the old topology may change a limit on the route's
// old members (a LoadStock that answers success), which the first copy
// missed, and a joining node kept the limit from before the change for
// good (no record of it is left for ConvergeLimits), so a user whose
// quota node it is could pass the changed limit. Once the old nodes are
// bumped no old instance changes them, and a change of the new topology
// carries a newer version, which the second copy keeps. The members that
// stay get, the same way, every limit some old member does not hold as
// is: a LoadStock that failed on some nodes recorded its change for
// ConvergeLimits on the nodes that took it only, and when those leave the
// route the record leaves with them (the staying members kept no limit for
// good, though the failure promised they would take it).
// A route that c.From does not have gets none: it has no old members
// (Check refuses one added back over other nodes while its old counters
// are there).
func (a *migrator) CopyLimits(ctx context.Context, c topology.Change) (copied int, err error) {
	for route, ms := range c.To.Routes {
		old := membersOf(c.From.Routes[route])
		if len(old) == 0 || sameMembers(c.From.Routes[route], ms) {
			continue
		}
		limits, mixed, err := a.routeLimits(ctx, route, old)
		if err != nil {
			return copied, err
		}
		for _, m := range ms {
			give := limits
			if old[m.Name] {
				give = mixed
			}
			n, err := a.setLimits(ctx, m.Name, give)
			copied += n
			if err != nil {
				return copied, err
			}
		}
	}
	return copied, nil
}

// Check implements [topology.Driver]: it refuses c when a route c.From
// does not have holds counters where c.To's route would not find them
// (addedRoute), or when a node holds a stale counter c would put in play
// (refuseStale, apply_stale.go).
func (a *migrator) Check(ctx context.Context, c topology.Change) error {
	for _, route := range slices.Sorted(maps.Keys(c.To.Routes)) {
		if _, ok := c.From.Routes[route]; ok {
			continue
		}
		if err := a.addedRoute(ctx, c, route); err != nil {
			return err
		}
	}
	return a.refuseStale(ctx, c, topology.Union(c.From.Nodes(), c.To.Nodes()), true, true)
}

// versionedLimit is a per-user limit and the version of its change.
type versionedLimit struct{ limit, ver int64 }

// routeLimits reads the per-user limit of every stock hash of route on the
// members old: per hash, the newest version's, and of that version the
// smallest positive one (0 only when all say 0). mixed holds those of
// limits that some member of old does not hold as is (a change that did
// not reach every node: its record for ConvergeLimits may be on a node
// that leaves).
func (a *migrator) routeLimits(ctx context.Context, route string, old map[string]bool) (limits, mixed map[string]versionedLimit, err error) {
	limits = map[string]versionedLimit{}
	held := map[string][]versionedLimit{}
	for name := range old {
		n, err := a.node(name)
		if err != nil {
			return nil, nil, err
		}
		keys, err := scan(ctx, n, stockKeyPrefix+route+":*")
		if err != nil {
			return nil, nil, err
		}
		for _, k := range keys {
			v, err := readLimit(ctx, n, k)
			if err != nil {
				return nil, nil, err
			}
			held[k] = append(held[k], v)
			cur, ok := limits[k]
			if !ok || v.ver > cur.ver || (v.ver == cur.ver && v.limit > 0 && (cur.limit == 0 || v.limit < cur.limit)) {
				limits[k] = v
			}
		}
	}
	mixed = map[string]versionedLimit{}
	for k, vs := range held {
		if len(vs) < len(old) || slices.ContainsFunc(vs, func(v versionedLimit) bool { return v != limits[k] }) {
			mixed[k] = limits[k]
		}
	}
	return limits, mixed, nil
}

// readLimit reads the per-user limit and its version off stock hash k on
// n (0 for a field not there).
func readLimit(ctx context.Context, n *node.Node, k string) (v versionedLimit, err error) {
	got, err := n.Client().HMGet(ctx, k, "limit", "limit_ver").Result()
	if err != nil {
		return v, fmt.Errorf("%w: node %s: %s limit: %v", ErrUnavailable, n.Name(), k, err)
	}
	for i, p := range []*int64{&v.limit, &v.ver} {
		if got[i] == nil {
			continue
		}
		s, _ := got[i].(string)
		if *p, err = strconv.ParseInt(s, 10, 64); err != nil {
			return v, fmt.Errorf("%w: node %s: %s limit: %v", ErrCorrupt, n.Name(), k, err)
		}
	}
	return v, nil
}

// setLimits writes limits (stock hash → limit) onto the joining node name
// and returns how many it wrote (those the node held already, or held at
// a newer version, are not written).
func (a *migrator) setLimits(ctx context.Context, name string, limits map[string]versionedLimit) (set int, err error) {
	n, err := a.node(name)
	if err != nil {
		return 0, err
	}
	for k, v := range limits {
		reply, err := a.inv.runBareWrite(ctx, n, limitSetScript, "limit-set", []string{stampKey, k}, name, v.limit, v.ver)
		if err != nil {
			return set, nodeErr(n, err)
		}
		if reply == "kept" {
			continue
		}
		r := newReplyReader(name, "limit-set")
		if r.word(reply, "ok"); r.err != nil {
			return set, r.err
		}
		set++
	}
	return set, nil
}

// parseQuotaKey splits a quota key of route (ParseQuotaKey).
func parseQuotaKey(route, key string) (sku, user string, ok bool) {
	r, sku, user, err := ParseQuotaKey(key)
	return sku, user, err == nil && r == route
}

// ReadTopology reads the topology record of every node cfg configures
// (the inventory server's and any other), for `shardis topology show`. A
// node that cannot be read is reported with Epoch 0 and its error.
func ReadTopology(ctx context.Context, cfg *config.Config) ([]topology.Record, map[string]error, error) {
	r, err := router.New(ctx, cfg, router.Options{KeepData: cfg.KeepData(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, nil, err
	}
	defer r.Close()
	var out []topology.Record
	errs := map[string]error{}
	for _, n := range r.Nodes() {
		if !n.Usable() {
			reason := "breaker open"
			if err := n.DownReason(); err != nil {
				reason = err.Error()
			}
			errs[n.Name()] = fmt.Errorf("%w: %s", ErrUnavailable, reason)
			out = append(out, topology.Record{Node: n.Name()})
			continue
		}
		rec, err := readRecord(ctx, n)
		if err != nil {
			errs[n.Name()] = err
		}
		rec.Node = n.Name()
		out = append(out, rec)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out, errs, nil
}
