package inventory

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
)

// ApplyOptions configures [ApplyTopology].
type ApplyOptions struct {
	// To is the configuration whose topology to apply. Required.
	To *config.Config
	// From is the configuration currently applied. It is needed only for
	// the addresses of nodes that leave the topology (To does not list
	// them); when given, its topology must be the nodes' current one.
	// default: none (the current topology is read from the nodes)
	From *config.Config
	// Wait bounds how long the apply waits for pending parts that keep a
	// quota counter or a leaving node's stock from moving (the parts settle
	// when their orders are confirmed, cancelled or expire). Past it,
	// ApplyTopology returns with Phase migrating and Waiting > 0: the
	// instances keep consulting the previous topology, which is safe, and
	// running the apply again later finishes.
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

// ApplyReport says what [ApplyTopology] did.
type ApplyReport struct {
	FromEpoch, ToEpoch int64
	From, To           Topology
	Joined, Left       []string // nodes that join or leave the inventory server
	LimitsCopied       int      // per-user limits written to joining route members
	OrdersMoved        int      // order records (tombstones included) moved
	QuotasMoved        int      // quota counters transferred
	StockMoved         int      // stock hashes of leaving nodes transferred
	PartsSettled       int      // pending parts of leaving nodes settled by the apply
	StagedDecided      int      // staging records (one-round reservations, staged.go) the apply decided
	LeftPending        int      // pending parts leaving nodes held at the check
	// Waiting counts counters still held by pending parts when the apply
	// returned in phase migrating; run it again later to finish.
	Waiting        int
	Phase          Phase
	AlreadyApplied bool
}

// ApplyTopology moves the inventory nodes to the topology of opts.To
// following the protocol in topology.go: check, bump, migrate, stable.
// Every node of the current and the new topology must be reachable. It is
// idempotent: run it again to resume an interrupted apply, or to finish
// one that returned in phase migrating (see ApplyOptions.Wait).
func ApplyTopology(ctx context.Context, opts ApplyOptions) (ApplyReport, error) {
	if opts.To == nil {
		return ApplyReport{}, fmt.Errorf("%w: topology apply needs the new configuration", ErrInvalid)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Wait <= 0 {
		opts.Wait = time.Minute
	}
	merged := *opts.To
	merged.Nodes = map[string]config.Node{}
	for name, n := range opts.To.Nodes {
		merged.Nodes[name] = n
	}
	if opts.From != nil {
		for name, n := range opts.From.Nodes {
			if _, ok := merged.Nodes[name]; !ok {
				merged.Nodes[name] = n
			}
		}
	}
	r, err := router.New(ctx, &merged, router.Options{KeepData: merged.KeepData(), Logger: opts.Logger})
	if err != nil {
		return ApplyReport{}, err
	}
	defer r.Close()
	inv, err := newInventory(r, Options{Logger: opts.Logger, Faults: opts.Faults}, true)
	if err != nil {
		return ApplyReport{}, err
	}
	a := &applier{inv: inv, r: r, opts: opts, log: opts.Logger, to: TopologyOf(opts.To)}
	return a.run(ctx)
}

type applier struct {
	inv  *Inventory
	r    *router.Router
	opts ApplyOptions
	log  *slog.Logger
	to   Topology
	rep  ApplyReport
}

func (a *applier) node(name string) (*node.Node, error) {
	n, err := a.r.Node(name)
	if err != nil {
		return nil, fmt.Errorf("node %s is in the current topology but not in --config: pass --from with a configuration that gives its address: %w", name, err)
	}
	if !n.Usable() {
		return nil, fmt.Errorf("%w: node %s is unavailable (%s): every node of both topologies must answer", ErrUnavailable, name, a.inv.unusableReason(n))
	}
	return n, nil
}

func (a *applier) run(ctx context.Context) (ApplyReport, error) {
	fp := a.to.Fingerprint()
	a.rep.To = a.to
	cur, recs, err := a.current(ctx)
	if err != nil {
		return a.rep, err
	}
	a.rep.FromEpoch, a.rep.From = cur.Epoch, cur.Current
	if cur.Current.Fingerprint() == fp {
		a.rep.ToEpoch = cur.Epoch
		if cur.Prev == nil || a.allStable(recs, cur.Token) {
			a.rep.AlreadyApplied, a.rep.Phase = true, PhaseStable
			return a.rep, nil
		}
		a.rep.FromEpoch, a.rep.From = cur.Epoch-1, *cur.Prev // resume
		a.diff()
		if a.opts.DryRun {
			a.rep.Phase = PhaseMigrating
			return a.rep, nil
		}
		// An interrupted bump left nodes at the previous token: finish it.
		prevTok := epochToken(cur.Epoch-1, cur.Prev.Fingerprint())
		if err := a.bump(ctx, recs, prevTok, cur.Token, cur.Epoch, *cur.Prev); err != nil {
			return a.rep, err
		}
		return a.migrate(ctx, cur.Token)
	}
	if a.opts.From != nil && TopologyOf(a.opts.From).Fingerprint() != cur.Current.Fingerprint() {
		return a.rep, fmt.Errorf("%w: --from is %s, but the nodes are at epoch %d with %s", ErrInvalid, TopologyOf(a.opts.From), cur.Epoch, cur.Current)
	}
	a.diff()
	if err := a.check(ctx, cur, recs); err != nil {
		return a.rep, err
	}
	a.rep.ToEpoch = cur.Epoch + 1
	if a.opts.DryRun {
		return a.rep, nil
	}
	if err := a.copyLimits(ctx); err != nil {
		return a.rep, err
	}
	tok := epochToken(cur.Epoch+1, fp)
	if err := a.bump(ctx, recs, cur.Token, tok, cur.Epoch+1, cur.Current); err != nil {
		return a.rep, err
	}
	a.log.Info("topology: nodes at the new epoch", "epoch", cur.Epoch+1, "topology", a.to.String())
	return a.migrate(ctx, tok)
}

// bump moves every node of prev and the new topology from the token from
// (or none, for a node that never had one) to tok, by compare-and-set;
// nodes already at tok are left alone.
func (a *applier) bump(ctx context.Context, recs map[string]TopologyRecord, from, tok string, epoch int64, prev Topology) error {
	for _, name := range union(prev.Nodes(), a.to.Nodes()) {
		rec := recs[name]
		if rec.Token == tok {
			continue
		}
		n, err := a.node(name)
		if err != nil {
			return err
		}
		expect := from
		if rec.Epoch == 0 {
			expect = ""
		}
		if err := writeRecord(ctx, n, expect, tok, epoch, a.to, &prev, PhaseMigrating); err != nil {
			return fmt.Errorf("moving %s to epoch %d (run apply again to resume): %w", name, epoch, err)
		}
		if a.inv.crash(ctx, "bump") {
			return errCrashed
		}
	}
	return nil
}

// current reads every node of the new topology and of the nodes'
// current one, and returns the newest record.
func (a *applier) current(ctx context.Context) (TopologyRecord, map[string]TopologyRecord, error) {
	recs := map[string]TopologyRecord{}
	var newest TopologyRecord
	read := func(names []string) error {
		for _, name := range names {
			if _, ok := recs[name]; ok {
				continue
			}
			n, err := a.node(name)
			if err != nil {
				return err
			}
			rec, err := readRecord(ctx, n)
			if err != nil {
				return err
			}
			recs[name] = rec
			if rec.Epoch > newest.Epoch {
				newest = rec
			}
		}
		return nil
	}
	if err := read(a.to.Nodes()); err != nil {
		return newest, nil, err
	}
	if newest.Epoch == 0 && a.opts.From == nil {
		return newest, nil, fmt.Errorf("%w: the nodes have no topology record yet: start `shardis serve` once with the current configuration, or pass --from", ErrInvalid)
	}
	if a.opts.From != nil {
		if err := read(TopologyOf(a.opts.From).Nodes()); err != nil {
			return newest, nil, err
		}
	}
	if newest.Epoch == 0 { // never initialised: the --from topology is epoch 1
		from := TopologyOf(a.opts.From)
		tok := epochToken(1, from.Fingerprint())
		for _, name := range from.Nodes() {
			n, _ := a.node(name)
			if err := writeRecord(ctx, n, "", tok, 1, from, nil, PhaseStable); err != nil {
				return newest, nil, err
			}
		}
		return a.current(ctx)
	}
	if err := read(newest.Current.Nodes()); err != nil {
		return newest, nil, err
	}
	if newest.Prev != nil && newest.Phase == PhaseMigrating {
		if err := read(newest.Prev.Nodes()); err != nil {
			return newest, nil, err
		}
	}
	return newest, recs, nil
}

func (a *applier) allStable(recs map[string]TopologyRecord, tok string) bool {
	for _, r := range recs {
		if r.Token == tok && r.Phase != PhaseStable {
			return false
		}
	}
	return true
}

// diff fills Joined and Left.
func (a *applier) diff() {
	old := map[string]bool{}
	for _, n := range a.rep.From.Nodes() {
		old[n] = true
	}
	for _, n := range a.to.Nodes() {
		if !old[n] {
			a.rep.Joined = append(a.rep.Joined, n)
		}
		delete(old, n)
	}
	for n := range old {
		a.rep.Left = append(a.rep.Left, n)
	}
	sort.Strings(a.rep.Left)
}

// check refuses a bump that could lose or strand anything.
func (a *applier) check(ctx context.Context, cur TopologyRecord, recs map[string]TopologyRecord) error {
	var bad []string
	oldNodes := map[string]bool{}
	for _, n := range cur.Current.Nodes() {
		oldNodes[n] = true
	}
	for name, rec := range recs {
		switch {
		case rec.Token == cur.Token:
		case rec.Epoch == 0 && !oldNodes[name]:
		default:
			bad = append(bad, fmt.Sprintf("%s is at %q, not the current %q", name, rec.Token, cur.Token))
		}
	}
	for _, name := range a.rep.Left {
		n, _ := a.node(name)
		pending, err := n.Client().ZCard(ctx, PendingKey).Result()
		if err != nil {
			return fmt.Errorf("%w: node %s: %v", ErrUnavailable, name, err)
		}
		a.rep.LeftPending += int(pending)
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return fmt.Errorf("%w: topology apply refused: %s", ErrInvalid, strings.Join(bad, "; "))
	}
	return nil
}

// union returns the sorted union of two name lists.
func union(a, b []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, l := range [][]string{a, b} {
		for _, n := range l {
			if !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	sort.Strings(out)
	return out
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

// limitSetScript writes a per-user limit onto a stock hash of a node that
// may not be at any epoch yet (a joining node). KEYS: 1 stamp, 2 stock
// hash. ARGV: 1 node name, 2 limit. Replies "ok".
//
// It runs outside the prelude and runner of lua.go, and must: copyLimits
// runs before bump moves the joining nodes to the new epoch, when such a
// node has no epoch token (or the previous one), which the prelude would
// refuse (SHARDIS_EPOCH), and the applier works on a router of its own
// (both topologies' nodes), not the inventory's view. It checks the
// node's identity as the prelude does; its errors go through nodeErr and
// its reply through a replyReader (reply.go).
var limitSetScript = newBareScript("limit-set", identityLua+luaFile("limit_set.lua"))

// copyLimits gives members that join a route the route's per-user limits
// before any instance can take quota on them: the smallest positive
// limit the old members hold for each SKU (0 only when all say 0).
func (a *applier) copyLimits(ctx context.Context) error {
	for route, ms := range a.to.Routes {
		old := map[string]bool{}
		for _, m := range a.rep.From.Routes[route] {
			old[m.Name] = true
		}
		var joining []string
		for _, m := range ms {
			if !old[m.Name] {
				joining = append(joining, m.Name)
			}
		}
		if len(joining) == 0 || len(old) == 0 {
			continue
		}
		limits, err := a.routeLimits(ctx, route, old)
		if err != nil {
			return err
		}
		for _, name := range joining {
			if err := a.setLimits(ctx, name, limits); err != nil {
				return err
			}
		}
	}
	return nil
}

// routeLimits reads the per-user limit of every stock hash of route on the
// members old: per hash, the smallest positive one (0 only when all say 0).
func (a *applier) routeLimits(ctx context.Context, route string, old map[string]bool) (map[string]int64, error) {
	limits := map[string]int64{}
	for name := range old {
		n, err := a.node(name)
		if err != nil {
			return nil, err
		}
		keys, err := scan(ctx, n, stockKeyPrefix+route+":*")
		if err != nil {
			return nil, err
		}
		for _, k := range keys {
			v, err := n.Client().HGet(ctx, k, "limit").Int64()
			if err != nil && err != redis.Nil {
				return nil, fmt.Errorf("%w: node %s: %s limit: %v", ErrCorrupt, name, k, err)
			}
			if cur, ok := limits[k]; !ok || (v > 0 && (cur == 0 || v < cur)) {
				limits[k] = v
			}
		}
	}
	return limits, nil
}

// setLimits writes limits (stock hash → limit) onto the joining node name.
func (a *applier) setLimits(ctx context.Context, name string, limits map[string]int64) error {
	n, err := a.node(name)
	if err != nil {
		return err
	}
	for k, v := range limits {
		reply, err := limitSetScript.Run(ctx, n.Client(), []string{stampKey, k}, name, v).Result()
		if err != nil {
			return nodeErr(n, err)
		}
		r := newReplyReader(name, "limit-set")
		if r.word(reply, "ok"); r.err != nil {
			return r.err
		}
		a.rep.LimitsCopied++
	}
	return nil
}

// parseQuotaKey splits a quota key of route (ParseQuotaKey).
func parseQuotaKey(route, key string) (sku, user string, ok bool) {
	r, sku, user, err := ParseQuotaKey(key)
	return sku, user, err == nil && r == route
}

// ReadTopology reads the topology record of every node of cfg's inventory
// server (and of extra, e.g. nodes that left), for `shardis topology
// show`. A node that cannot be read is reported with Epoch 0 and its
// error.
func ReadTopology(ctx context.Context, cfg *config.Config) ([]TopologyRecord, map[string]error, error) {
	r, err := router.New(ctx, cfg, router.Options{KeepData: cfg.KeepData(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, nil, err
	}
	defer r.Close()
	var out []TopologyRecord
	errs := map[string]error{}
	for _, n := range r.Nodes() {
		if !n.Usable() {
			reason := "breaker open"
			if err := n.DownReason(); err != nil {
				reason = err.Error()
			}
			errs[n.Name()] = fmt.Errorf("%w: %s", ErrUnavailable, reason)
			out = append(out, TopologyRecord{Node: n.Name()})
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
