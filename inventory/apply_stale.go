package inventory

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
	"github.com/shardis/shardis/topology"
)

// Stale counters a change would put in play (topology/doc.go, "Stale
// counters on a joining node").
//
// A node may hold counters of a route it does not serve: the take back
// (apply_takeback.go) leaves those whose transfer's destination holds no
// marker (xferMarkerTTL passed, or the counter did not exist when step 3
// ran), those with units reserved in the node's older copy, and those an
// earlier change than the last moved off it. Their units are counted on
// the transfer's destination. The states of such a counter K of route R
// on node N, for a change c (c.From → c.To at c.Epoch) that changes R's
// members:
//
//	not in play (N does not serve K in c.From nor in c.To) ──▶ left as it is
//	in play, no units                                      ──▶ fine (a limit only, CopyLimits')
//	in play, units, N holds the marker of c's transfer of K ──▶ c's own: the rerun rule finishes it
//	in play, units, no such marker                         ──▶ stale: the apply refuses (a quota counter on a resume: logged)
//
// In play: a stock hash of R on N when N joins R (not in c.From's
// members, in c.To's: its units would be sold as R's); a quota counter of
// R for user u on N when N is not u's home in c.From's R (so no instance
// counts it) and either is u's home in c.To's R (read as u's count, and
// step 3 adds u's counter from its old home to it) or is a member of
// c.From's R (step 3 scans its quota counters and transfers this one to
// u's new home, adding it there). Units: any of available, reserved,
// confirmed, loaded of a stock hash not 0; a quota count not 0. A field
// that does not read as an integer counts as units (named as such).
//
// Explained: N holds xferMarkerKey(xferID(c.Epoch, kind, s, K)) for a
// member s of c.From's R: the in step of c's own transfer of K put units
// there (an earlier attempt at c.Token, whose nodes all went back below
// c.Epoch: TestJoinKeepsUnitsOfItsOwnTransfer's world); the rerun of
// that transfer (same id) is a no-op on N and subtracts on s, by the
// rerun rule (migrate.go). Nothing else explains units on a node that
// does not serve them: in a stable topology every counter is where the
// topology reads it (step 3 moved each whose home moved, and waited for
// the busy ones), so units elsewhere came back with an older copy of N's
// data, after a transfer had given them to its destination.
//
// Not reached by whole copies: xfer_in writes the marker only at
// c.Token, so a copy of N holding it holds N's bump to c.Epoch too, and
// N is at c.Epoch or later, never one of the nodes read here (all below
// c.Epoch; migrate.go, "The rerun rule"). That test's world reaches it by
// putting back n1's and n2's topology records only, their data kept. It
// is safe there only while nothing was sold or loaded on s at c.From's
// topology since: the rerun's out records what s holds now, which its
// done subtracts and its in (a no-op) adds nowhere.
//
// When, each time before the run writes anything:
//   - Check (a new epoch, a dry run too): every node of c.From and c.To,
//     all at c.From's token and stable (topology's check), stock hashes
//     and quota counters;
//   - Retire, first thing, on the nodes it is given that are behind
//     c.Epoch (an epoch below it: data from before their bump; a node
//     fenced at c.Epoch holds data of an attempt at it, and is not read):
//     those a rerun is about to bump (resume: stock hashes refuse, quota
//     counters are logged and let through: counted twice, a user's limit
//     is only stricter, while a refusal would leave the nodes behind
//     unbumped and every order touching them failing until an operator
//     came: the schedule explorer's seed 157177),
//     or an apply of the current topology to move forward (c.Forward:
//     stock hashes only; no step 3 runs, so nothing is added to a quota
//     counter, which reads as what the older copy holds, lost writes as
//     for order records). Before an apply's first bump, Retire reads every
//     node again, as Check did.
//
// Why it is safe: the refusal comes before the run's first write, so
// the nodes are as an interrupt at that point leaves them, which the
// apply's rerun resumes (an interrupted bump: orders spanning nodes at
// both epochs fail cleanly; a node behind serves no one). The rule reads
// only N's keys and c.Epoch, so every rerun, crash point and concurrent
// apply of the same change answers alike while N holds the counter. A
// node already at c.Token is not read again: its data is from after its
// bump, which a check before it read clean, and instances at c.Token may
// have written it since (a load onto a joining member carries no
// marker). The operator deletes the keys the refusal names on N (their
// units are counted elsewhere) and runs the apply again.
//
// What the refusal also names, reads only: the transfer records on N of
// transfers of K off N (StaleCounter.Records; a copy taken between a
// transfer's out and done holds one), to be deleted with K, since a
// later apply at their epoch would read them as its own; and, for a
// stock hash, the units of K loaded on the other nodes of R (c.From's
// and c.To's members: StaleCounter.LoadedElsewhere, and NoneElsewhere
// when there are none). "Counted elsewhere" need not hold: the units
// moved, after N's copy, to a node that went back since and lost them
// (the schedule explorer's seed 195213: the transfer of a later apply
// onto N itself, lost with N's data; or, with the SKU's stock spread
// over several nodes, a destination that went back to a copy holding
// only its own share: found by a review, which none elsewhere did not
// tell). The refusal stands (serving the copy's units could sell again
// what was sold after the copy), and says what to compare: once the key
// is deleted, the units loaded on R against what the system of record
// says was loaded, the difference loaded again.

// StaleCounter is a counter a change would put in play on a node that
// does not serve it (this file's rule).
type StaleCounter struct {
	Node, Route, Key string
	Units            string // what it holds, e.g. "available 8, reserved 0, confirmed 2, loaded 10"
	// Records are the transfer records on Node of transfers of Key off it
	// (a copy taken between a transfer's out and done holds one): delete
	// them with Key, or a later apply at their epoch would read them as
	// its own (migrate.go, "The rerun rule").
	Records []string
	// LoadedElsewhere, for a stock hash, is the sum of its loaded units
	// on the route's other nodes (the change's old and new members): the
	// SKU's stock on the route once Key is deleted. Its units are counted
	// there unless they moved, after the copy, onto a node that went back
	// since and lost them: compare this with what the system of record
	// says was loaded, and load the difference once Key is deleted. A
	// loaded field that does not read as an integer counts as none.
	LoadedElsewhere int64
	// NoneElsewhere, for a stock hash, says that no other node of the
	// route holds a loaded unit of it (LoadedElsewhere is 0 and no node
	// holds an unreadable loaded field): deleting Key leaves the SKU with
	// no stock on the route.
	NoneElsewhere bool
}

// StaleCountersError refuses an apply that would put stale counters in
// play. It wraps topology.ErrInvalid: nothing was written by the run it
// stopped.
type StaleCountersError struct {
	Epoch int64          // the epoch of the change refused
	Found []StaleCounter // by node, then key
}

// Error names each counter found (node, key, route, units) and what the
// operator does about them.
func (e *StaleCountersError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v: nodes hold counters of a route they do not serve that the apply to epoch %d would put in play, their units counted twice: ", topology.ErrInvalid, e.Epoch)
	for i, s := range e.Found {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "node %s holds %s of route %q (%s)", s.Node, s.Key, s.Route, s.Units)
		if len(s.Records) > 0 {
			fmt.Fprintf(&b, " and the transfer record(s) %s", strings.Join(s.Records, ", "))
		}
		switch {
		case s.NoneElsewhere:
			b.WriteString(", and no other node of the route holds a loaded unit of it: its units may be counted nowhere else " +
				"(a node they moved to went back since), so once it is deleted load the SKU's stock on the route again from your records (`shardis stock load`)")
		case strings.HasPrefix(s.Key, stockKeyPrefix):
			fmt.Fprintf(&b, ", and the route's other nodes hold %d loaded units of it", s.LoadedElsewhere)
		}
	}
	b.WriteString(". They came back with an older copy of the node's data after a transfer had moved their units to another node, which counts them " +
		"unless it went back since too (the move forward leaves them when the transfer's marker is gone, their stock was reserved, or an earlier apply than the last moved them): " +
		"once no part pending on those nodes holds them (`shardis parts stuck`; a part set aside there is settled or retried first), delete those keys, " +
		"and the transfer records named, on those nodes (DEL); for each stock hash, compare the units the route's other nodes hold loaded with what your records say was loaded, " +
		"and load the difference (`shardis stock load`); then run `shardis topology apply` again")
	return b.String()
}

// Unwrap makes a StaleCountersError a topology.ErrInvalid.
func (e *StaleCountersError) Unwrap() error { return topology.ErrInvalid }

// refuseStale returns a StaleCountersError for what staleOn finds on
// nodes for c (quota counters too when quotas), or nil. A stale quota
// counter refuses only when quotaRefuses (a new epoch's check: nothing
// bumped yet, the nodes serve on at the current epoch while the operator
// deletes it); on a resume it is logged and let through (see the rule
// above: counted twice, a limit is only stricter, and a refusal there
// would leave the nodes behind unbumped, every order touching them
// failing, until an operator came; the schedule explorer's seed 157177).
func (a *migrator) refuseStale(ctx context.Context, c topology.Change, nodes []string, quotas, quotaRefuses bool) error {
	var found []StaleCounter
	for _, name := range nodes {
		n, err := a.node(name)
		if err != nil {
			return err
		}
		f, err := a.staleOn(ctx, c, n, quotas)
		if err != nil {
			return err
		}
		found = append(found, f...)
	}
	found = slices.DeleteFunc(found, func(s StaleCounter) bool {
		if quotaRefuses || !strings.HasPrefix(s.Key, quotaKeyPrefix) {
			return false
		}
		a.log.Warn("topology: a quota counter came back with its node's data after a transfer had moved it: step 3 adds it to the user's count at its new home, counted twice (the user's limit is stricter, nothing is oversold); delete it on the node to avoid that",
			"node", s.Node, "route", s.Route, "key", s.Key, "units", s.Units)
		return true
	})
	if len(found) == 0 {
		return nil
	}
	sort.Slice(found, func(i, j int) bool {
		return found[i].Node < found[j].Node || (found[i].Node == found[j].Node && found[i].Key < found[j].Key)
	})
	return &StaleCountersError{Epoch: c.Epoch, Found: found}
}

// staleOn returns the stale counters c would put in play on n.
func (a *migrator) staleOn(ctx context.Context, c topology.Change, n *node.Node, quotas bool) ([]StaleCounter, error) {
	var out []StaleCounter
	for _, route := range slices.Sorted(maps.Keys(c.From.Routes)) {
		oldMs, newMs := c.From.Routes[route], c.To.Routes[route]
		if newMs == nil || sameMembers(oldMs, newMs) {
			continue // a removed route moves nothing; an added one is addedRoute's
		}
		old, joins := membersOf(oldMs), membersOf(newMs)
		s := staleScan{a: a, c: c, n: n, route: route, srcs: a.xferSrcs(oldMs), members: memberNames(oldMs, newMs)}
		if !old[n.Name()] && joins[n.Name()] {
			f, err := s.stock(ctx)
			if err != nil {
				return nil, err
			}
			out = append(out, f...)
		}
		if !quotas {
			continue
		}
		f, err := s.quotas(ctx, oldMs, newMs, old[n.Name()])
		if err != nil {
			return nil, err
		}
		out = append(out, f...)
	}
	return out, nil
}

// xferSrcs is what c's transfers off the members ms name as their source
// (xferSrc: their names, or "" under [MutationXferNoSource]).
func (a *migrator) xferSrcs(ms []router.Member) []string {
	if a.inv.mutated(MutationXferNoSource) {
		return []string{""}
	}
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Name
	}
	return out
}

// staleScan reads one route's counters on one node for refuseStale.
type staleScan struct {
	a     *migrator
	c     topology.Change
	n     *node.Node
	route string
	srcs  []string // the sources c's transfers of the route name
	// members are the route's nodes in c.From and c.To (NoneElsewhere)
	members []string
}

// stock returns the route's stock hashes on n (which joins the route)
// that hold units no transfer of c explains.
func (s staleScan) stock(ctx context.Context) ([]StaleCounter, error) {
	keys, err := scan(ctx, s.n, stockKeyPrefix+s.route+":*")
	if err != nil {
		return nil, err
	}
	var out []StaleCounter
	for _, k := range keys {
		units, held, err := stockUnits(ctx, s.n, k)
		if err != nil {
			return nil, err
		}
		if out, err = s.note(ctx, out, xferStock, k, units, held); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// quotas returns the route's quota counters on n that c would put in
// play (isOld: n is a member of c.From's route, oldMs) and that hold a
// count no transfer of c explains.
func (s staleScan) quotas(ctx context.Context, oldMs, newMs []router.Member, isOld bool) ([]StaleCounter, error) {
	oldRing, err := router.NewRing(oldMs)
	if err != nil {
		return nil, err
	}
	newRing, err := router.NewRing(newMs)
	if err != nil {
		return nil, err
	}
	keys, err := scan(ctx, s.n, quotaKeyPrefix+s.route+":*")
	if err != nil {
		return nil, err
	}
	var out []StaleCounter
	for _, k := range keys {
		_, user, ok := parseQuotaKey(s.route, k)
		if !ok {
			continue // left in place by step 3 too (moveQuotas)
		}
		home := "user:" + user
		if oldRing.Name(oldRing.Home(home)) == s.n.Name() || !(isOld || newRing.Name(newRing.Home(home)) == s.n.Name()) {
			continue // counted here now, or not in play
		}
		got, err := s.n.Client().Get(ctx, k).Result()
		if err != nil && err != redis.Nil {
			return nil, fmt.Errorf("%w: node %s: reading %s: %v", ErrUnavailable, s.n.Name(), k, err)
		}
		units, held := describeUnits([]string{"count"}, []any{nilIfEmpty(got, err)})
		if out, err = s.note(ctx, out, xferQuota, k, units, held); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// note appends to out the counter key (of kind; units as describeUnits
// names them) when it holds units and no transfer of c explains them.
func (s staleScan) note(ctx context.Context, out []StaleCounter, kind xferKind, key, units string, held bool) ([]StaleCounter, error) {
	if !held {
		return out, nil
	}
	stale, err := s.unexplained(ctx, kind, key)
	if err != nil || !stale {
		return out, err
	}
	found := StaleCounter{Node: s.n.Name(), Route: s.route, Key: key, Units: units}
	if found.Records, err = scan(ctx, s.n, xferKeyPrefix+"*|"+string(kind)+"|"+globEscape(s.n.Name())+"|"+globEscape(key)); err != nil {
		return out, err
	}
	found.Records = slices.DeleteFunc(found.Records, func(k string) bool { return strings.HasPrefix(k, xferMarkerKeyPrefix) })
	slices.Sort(found.Records)
	if kind == xferStock {
		if found.LoadedElsewhere, found.NoneElsewhere, err = s.loadedElsewhere(ctx, key); err != nil {
			return out, err
		}
	}
	return append(out, found), nil
}

// loadedElsewhere sums the loaded units of stock hash key on the
// members of the route but n (StaleCounter.LoadedElsewhere), and reports
// whether none holds any (NoneElsewhere: a value that is not an integer
// counts as units there, but adds nothing to the sum).
func (s staleScan) loadedElsewhere(ctx context.Context, key string) (sum int64, none bool, err error) {
	none = true
	for _, name := range s.members {
		if name == s.n.Name() {
			continue
		}
		m, err := s.a.node(name)
		if err != nil {
			return 0, false, err
		}
		got, err := m.Client().HGet(ctx, key, "loaded").Result()
		if err == redis.Nil {
			continue
		}
		if err != nil {
			return 0, false, fmt.Errorf("%w: node %s: reading %s: %v", ErrUnavailable, name, key, err)
		}
		if got != "0" {
			none = false // units, or a value that is not 0: counted there
		}
		if v, perr := strconv.ParseInt(got, 10, 64); perr == nil {
			sum += v
		}
	}
	return sum, none, nil
}

// memberNames are the names of the members of olds and news, each once.
func memberNames(olds, news []router.Member) []string {
	var out []string
	for _, m := range append(slices.Clone(olds), news...) {
		if !slices.Contains(out, m.Name) {
			out = append(out, m.Name)
		}
	}
	return out
}

// globEscape escapes the characters SCAN's MATCH pattern reads as a glob
// in s, so that s matches itself only.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// unexplained reports whether n holds no marker of c's transfer of key
// (of kind) off any of the route's old members.
func (s staleScan) unexplained(ctx context.Context, kind xferKind, key string) (bool, error) {
	markers := make([]string, 0, len(s.srcs))
	for _, src := range s.srcs {
		if src != s.n.Name() {
			markers = append(markers, xferMarkerKey(xferID(s.c.Epoch, kind, src, key)))
		}
	}
	if len(markers) == 0 {
		return true, nil
	}
	held, err := s.n.Client().Exists(ctx, markers...).Result()
	if err != nil {
		return false, fmt.Errorf("%w: node %s: reading the markers of %s's transfers: %v", ErrUnavailable, s.n.Name(), key, err)
	}
	return held == 0, nil
}

// stockUnits reads stock hash key on n and names its counters
// (describeUnits), reporting whether any is not 0.
func stockUnits(ctx context.Context, n *node.Node, key string) (units string, held bool, err error) {
	fields := []string{"available", "reserved", "confirmed", "loaded"}
	got, err := n.Client().HMGet(ctx, key, fields...).Result()
	if err != nil {
		return "", false, fmt.Errorf("%w: node %s: reading %s: %v", ErrUnavailable, n.Name(), key, err)
	}
	units, held = describeUnits(fields, got)
	return units, held, nil
}

// nilIfEmpty is a GET's value, nil when the key is missing.
func nilIfEmpty(v string, err error) any {
	if err == redis.Nil {
		return nil
	}
	return v
}

// describeUnits names each of fields with its value in got (HMGET's: nil
// for none, read as 0) and reports whether any is not 0; a value that
// is not an integer is named as such and counts as units.
func describeUnits(fields []string, got []any) (string, bool) {
	parts := make([]string, len(fields))
	held := false
	for i, f := range fields {
		s, _ := got[i].(string)
		if got[i] == nil {
			s = "0"
		}
		v, err := strconv.ParseInt(s, 10, 64)
		switch {
		case err != nil:
			parts[i], held = fmt.Sprintf("%s %q (not an integer)", f, s), true
		default:
			parts[i], held = fmt.Sprintf("%s %d", f, v), held || v != 0
		}
	}
	return strings.Join(parts, ", "), held
}

// behindEpoch returns the nodes of behind (name → the token read) whose
// epoch is below c.Epoch, sorted: their data is from before their bump
// (a fenced node counts by the token under its fence; no token: epoch 0).
func behindEpoch(c topology.Change, behind map[string]string) []string {
	var out []string
	for name, tok := range behind {
		e, _, _ := topology.SplitToken(strings.TrimPrefix(tok, node.FencePrefix))
		if e < c.Epoch {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}
