package inventory

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
	"github.com/shardis/shardis/topology"
)

// A route removed, then added back (topology/doc.go, "A route removed
// and added back").
//
// An apply that removes route R moves none of R's counters: they stay
// on R's nodes (moveCounters), out of every instance's reach until an
// apply adds R back. That apply (Check: addedRoute) keeps them where the
// new route finds them and refuses the change while a counter of R sits
// where it would not (a stock hash on a node that is no member, a
// user's quota counter on a node that is not the user's home).
//
// The removal also marks each node of R's members in c.From, in its step
// 3 (markRemoved, before any node is stable at the new token), with the
// removal's epoch: removedKey(R) = c.Epoch. The states of a counter K of
// R on node N when an apply adds R back, E the greatest mark of R read on
// any node of c.From and c.To:
//
//	N marked E                    ──▶ left by the removal: kept if the new route finds it there, else stray (refused)
//	N not marked E, some node is  ──▶ stale: refused, whatever the new route
//	no node marked (a removal by a release before the marks) ──▶ as N marked E
//
// Why a node that holds counters of R and not the newest mark is stale:
// the removal at E marked every node that held R's counters then (R's
// members at E: in a stable topology every counter is on its route's
// nodes), in the step 3 that ends before E is stable, and once R is
// removed nothing writes R's counters. So N came back with an older copy
// of its data, from before the removal: a node R had left before it,
// whose units a transfer gave to another member (counted there too: sold
// twice, found by a review), or a member at E whose writes since the copy
// are lost. Its counters are refused either way, and the error says
// that their units may be counted on the marked nodes, or nowhere: delete
// them, then load what the system of record says the route lacks.
//
// What it does not catch: when every node marked at E goes back to a
// copy from before E (two losses), an older mark reads as the newest and
// a node holding it counts as marked; the check is then what it was
// before the marks.

// removedKey is the key of route's removal mark on a node.
func removedKey(route string) string { return removedKeyPrefix + route }

// markRemoved marks each of route's members ms (route as c.From has it;
// c.To does not) with the removal's epoch (apply_readd.go). A run that
// stops midway (crash point "removal-mark", after each mark) leaves the
// apply migrating, and its rerun marks them all again: no apply adds the
// route back until this one is stable.
func (a *migrator) markRemoved(ctx context.Context, route string, ms []router.Member) error {
	epoch := strconv.FormatInt(a.c.Epoch, 10)
	for _, m := range ms {
		n, err := a.node(m.Name)
		if err != nil {
			return err
		}
		if err := n.Client().Set(ctx, removedKey(route), epoch, 0).Err(); err != nil {
			return fmt.Errorf("%w: node %s: marking route %q removed: %v", ErrUnavailable, n.Name(), route, err)
		}
		if a.inv.crash(ctx, "removal-mark") {
			return errCrashed
		}
	}
	return nil
}

// removalMarks reads route's removal mark on each named node: its epoch,
// 0 where there is none.
func (a *migrator) removalMarks(ctx context.Context, route string, names []string) (map[string]int64, error) {
	marks := make(map[string]int64, len(names))
	for _, name := range names {
		n, err := a.node(name)
		if err != nil {
			return nil, err
		}
		v, err := n.Client().Get(ctx, removedKey(route)).Result()
		switch {
		case errors.Is(err, redis.Nil):
			continue
		case err != nil:
			return nil, fmt.Errorf("%w: node %s: reading route %q's removal mark: %v", ErrUnavailable, name, route, err)
		}
		e, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil || e <= 0 {
			return nil, fmt.Errorf("%w: node %s: %s holds %q, not an epoch", ErrCorrupt, name, removedKey(route), v)
		}
		marks[name] = e
	}
	return marks, nil
}

// addedRoute refuses the apply (an error wrapping topology.ErrInvalid)
// when route, which c.From does not have, left counters from an earlier
// epoch that c.To's route must not serve: stray ones, where the new route
// would not find them (a stock hash on a node that is not one of its
// members: its units stranded, no instance takes, loads or moves them;
// a user's quota counter on a node that is not that user's quota home in
// the new route: the user could buy the limit again), and stale ones,
// on a node without the newest removal mark of the route while another
// node has it (apply_readd.go). An apply that removes a route leaves its
// counters on its nodes (moveCounters), and only a membership change
// moves them, which an added route does not have. Counters where the new
// route reads them (the route added back over the members and weights
// it had) on a node marked by the removal are kept as they are. Every
// node of both topologies is read.
func (a *migrator) addedRoute(ctx context.Context, c topology.Change, route string) error {
	ms := c.To.Routes[route]
	ring, err := router.NewRing(ms)
	if err != nil {
		return err
	}
	nodes := topology.Union(c.From.Nodes(), c.To.Nodes())
	marks, err := a.removalMarks(ctx, route, nodes)
	if err != nil {
		return err
	}
	newest := int64(0)
	for _, e := range marks {
		newest = max(newest, e)
	}
	member := membersOf(ms)
	var stray, stale []string
	for _, name := range nodes {
		n, err := a.node(name)
		if err != nil {
			return err
		}
		if newest > 0 && marks[name] != newest {
			keys, err := a.routeCounters(ctx, n, route)
			if err != nil {
				return err
			}
			if len(keys) > 0 {
				stale = append(stale, fmt.Sprintf("node %s holds %s and %s", name, sample(keys, 3), markSays(marks[name])))
			}
			continue
		}
		keys, err := a.strayCounters(ctx, n, route, member[name], ring)
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			stray = append(stray, fmt.Sprintf("node %s holds %s", name, sample(keys, 3)))
		}
	}
	return addedRouteRefusal(route, newest, stray, stale)
}

// markSays describes a node's removal mark that is not the newest.
func markSays(e int64) string {
	if e == 0 {
		return "no mark of the route's removal"
	}
	return fmt.Sprintf("the mark of an earlier removal, at epoch %d", e)
}

// addedRouteRefusal is addedRoute's error for the counters it found, nil
// when there are none.
func addedRouteRefusal(route string, newest int64, stray, stale []string) error {
	var why []string
	if len(stale) > 0 {
		why = append(why, fmt.Sprintf("counters of it on nodes that did not hold them when an apply removed it at epoch %d (%s) came back with an older copy of the node's data: "+
			"their units may be counted on the nodes that did, or on none; settle their pending parts, delete them, then load what the system of record says the route lacks",
			newest, strings.Join(stale, "; ")))
	}
	if len(stray) > 0 {
		why = append(why, fmt.Sprintf("counters of it left when an apply removed it are where the new route would not find them (%s): "+
			"their units would be stranded and their users could buy past the per-user limit again; add the route back over the nodes and weights it had, "+
			"then change its members in a later apply (which moves its counters), or delete those keys if the route's stock and quotas are to be forgotten",
			strings.Join(stray, "; ")))
	}
	if len(why) == 0 {
		return nil
	}
	return fmt.Errorf("%w: route %q is added, but %s", topology.ErrInvalid, route, strings.Join(why, "; and "))
}

// routeCounters returns every counter of route on n: its stock hashes and
// its users' quota counters.
func (a *migrator) routeCounters(ctx context.Context, n *node.Node, route string) ([]string, error) {
	stock, err := scan(ctx, n, stockKeyPrefix+route+":*")
	if err != nil {
		return nil, err
	}
	quota, err := scan(ctx, n, quotaKeyPrefix+route+":*")
	if err != nil {
		return nil, err
	}
	return append(stock, quota...), nil
}

// strayCounters returns route's counters on n that the route with the
// members of ring would not find: every stock hash when n is not a member
// (isMember), and every quota counter whose user's home is another node.
func (a *migrator) strayCounters(ctx context.Context, n *node.Node, route string, isMember bool, ring *router.Ring) ([]string, error) {
	var out []string
	if !isMember {
		keys, err := scan(ctx, n, stockKeyPrefix+route+":*")
		if err != nil {
			return nil, err
		}
		out = append(out, keys...)
	}
	keys, err := scan(ctx, n, quotaKeyPrefix+route+":*")
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		// an unreadable key is left alone, as moveQuotas leaves it
		if _, user, ok := parseQuotaKey(route, k); ok && ring.Name(ring.Home("user:"+user)) != n.Name() {
			out = append(out, k)
		}
	}
	return out, nil
}

// sample is keys (sorted) as a list, the first max of them named and the
// rest counted.
func sample(keys []string, max int) string {
	if len(keys) <= max {
		return strings.Join(keys, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(keys[:max], ", "), len(keys)-max)
}
