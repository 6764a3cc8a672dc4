package inventory

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
	"github.com/shardis/shardis/topology"
)

// Serving the applied topology (see "The rule" in the topology package's doc).
//
// What an instance acts on (its view) is built from the topology record
// of the nodes, never from its own configuration: the order homes, each
// route's set of nodes and weights, and the epoch token all come from the
// newest record. The configuration gives the node clients (addresses,
// credentials) and is what `shardis topology apply` would apply. So during
// a rolling deploy that changes the topology (instance B starts with a
// configuration that adds n4 for a new route x before anyone has run the
// apply), B serves and reconciles exactly what the instances of the
// applied configuration serve, at the same token, with the same
// placement; it reports the difference ("pending topology change: config
// epoch differs: +n4 (route x)") in TopologyStatus.Pending, and the
// service shows it in `/readyz` (still ready), the metric
// shardis_topology_config_pending and one log line. Requests for a route
// only the configuration has are refused with [ErrNotApplied]. Once the
// apply lands, the nodes refuse B's old token, and B's next reread (every
// resyncEvery while a change is pending, and on any refusal) moves it to
// the new topology.
//
// Start: a configuration that cannot serve the applied topology (the
// record names a node that is not a node of the configuration's inventory
// server, so the instance has no address for it or would not treat its
// data as critical) is refused by [New] with a [*MissingNodeError]. A
// running instance whose nodes move to such a topology stops acting (not
// ready, the same error) until it is restarted with a configuration that
// names the node.
//
// Placement and token travel together. A view holds the placement and
// the token it was read with; a request pins one view for its whole
// duration (pin), so every home and set it computes and every script it
// runs use the same one. Scripts carry that token, and the prelude
// refuses it on a node at another epoch (lua.go): a request placed under
// an old topology can never act at a newer token. When a script is
// refused, run rereads the nodes and retries only at the same token (a
// node that just got its record); at another token the placement may have
// moved, so the request fails with [ErrTopology], having changed nothing
// at the new epoch, and the caller's retry is placed under the new view.

// placement is where things live under one applied topology: the part of
// a view that is derived from the nodes' record.
type placement struct {
	applied   topology.Topology
	appliedFP string
	// members are the applied topology's nodes, sorted by name, indexed
	// like homes.names.
	members []*node.Node
	homes   *Homes
	routes  map[string]*router.Set
	// pending describes what this instance's configuration would change
	// ("" when it is the applied topology).
	pending string
}

// MissingNodeError is the reason an instance cannot serve the applied
// topology: the record names a node that this instance's configuration
// does not give to the inventory server. [New] returns it (wrapped); a
// running instance reports it as not ready. It unwraps to [ErrUnavailable]
// and [ErrTopology].
type MissingNodeError struct {
	// Node is the node the configuration lacks.
	Node string
	// Server is the configuration's inventory server key.
	Server string
	// Epoch is the epoch of the topology record on the nodes.
	Epoch int64
	// Applied is the topology that record holds as applied.
	Applied topology.Topology
}

// Error names the missing node, the applied topology and the fix (a
// configuration that gives the node to the server, with its address).
func (e *MissingNodeError) Error() string {
	return fmt.Sprintf("%v: %v: the topology applied on the nodes (epoch %d: %s) needs node %s, which this configuration does not name as a node of server %q: restart with a configuration that gives %s (with its address) to server %q",
		ErrUnavailable, ErrTopology, e.Epoch, e.Applied, e.Node, e.Server, e.Node, e.Server)
}

// Unwrap returns [ErrUnavailable] and [ErrTopology].
func (e *MissingNodeError) Unwrap() []error { return []error{ErrUnavailable, ErrTopology} }

// place builds the placement of the applied topology t at epoch over this
// instance's node clients.
func (inv *Inventory) place(t topology.Topology, epoch int64) (placement, error) {
	p := placement{applied: t, appliedFP: t.Fingerprint(), routes: map[string]*router.Set{}}
	byName := map[string]*node.Node{}
	for _, n := range inv.nodes {
		byName[n.Name()] = n
	}
	for _, name := range t.Nodes() {
		n := byName[name]
		if n == nil {
			return p, &MissingNodeError{Node: name, Server: inv.cfg.Server, Epoch: epoch, Applied: t}
		}
		p.members = append(p.members, n)
	}
	var err error
	if p.homes, err = homesOf(t); err != nil {
		return p, fmt.Errorf("applied topology: %w", err)
	}
	for route, ms := range t.Routes {
		if p.appliedFP == inv.topo.fp {
			p.routes[route] = inv.cfgSets[route] // the configuration's own sets
			continue
		}
		if p.routes[route], err = inv.r.SetOf(inv.cfg.Server, route, ms); err != nil {
			return p, fmt.Errorf("applied topology: %w", err)
		}
	}
	if p.appliedFP != inv.topo.fp {
		p.pending = "pending topology change: config epoch differs: " + topology.Diff(t, inv.topo.self)
	}
	return p, nil
}

// pinKey is the context key of a request's pinned view (one per
// Inventory, so two instances in one call chain never share a view).
type pinKey struct{ inv *Inventory }

// pin returns ctx carrying the view the request acts on, and that view:
// the one already pinned on ctx, or the current one (reread when due).
// Every placement a request computes and every script it runs read the
// view through topology(ctx), so they all use the pinned one.
func (inv *Inventory) pin(ctx context.Context) (context.Context, *view) {
	if v, ok := ctx.Value(pinKey{inv}).(*view); ok {
		return ctx, v
	}
	v := inv.topology(ctx)
	return context.WithValue(ctx, pinKey{inv}, v), v
}

// pinned returns the view pinned on ctx, if any.
func (inv *Inventory) pinned(ctx context.Context) (*view, bool) {
	v, ok := ctx.Value(pinKey{inv}).(*view)
	return v, ok
}

// Members returns the nodes of the topology this instance serves now (the
// applied one), sorted by name, rereading the nodes first when the view is
// due (as every call does); none while it cannot act. The reconciler
// passes over these: a node only this instance's configuration has holds
// nothing of the applied topology.
func (inv *Inventory) Members(ctx context.Context) []*node.Node {
	return append([]*node.Node(nil), inv.topology(ctx).members...)
}

// RouteSets returns the node sets of the routes this instance serves now
// (the applied topology's), by route key, rereading the nodes first when
// the view is due; none while it cannot act.
func (inv *Inventory) RouteSets(ctx context.Context) map[string]*router.Set {
	out := map[string]*router.Set{}
	for route, s := range inv.topology(ctx).routes {
		out[route] = s
	}
	return out
}

// Nodes returns every node of the inventory server in this instance's
// configuration, sorted by name: every node it may ever act on (the
// applied topology it serves is a subset, see [Inventory.Members]).
// The methods that take a node's name from their caller (the stuck
// parts', the redo log's, the settled log's, [Inventory.PartStates],
// [Inventory.AuditStock], [Inventory.ConvergeLimits]) take only these:
// any other name, a node the configuration gives to another server
// included, is refused with an error wrapping [ErrInvalid] and
// router.ErrUnknownNode that names it.
func (inv *Inventory) Nodes() []*node.Node { return append([]*node.Node(nil), inv.nodes...) }

// ownNode returns the node of the inventory server named name (one of
// [Inventory.Nodes]): every call that acts on a node its caller names
// resolves the name here. A name that is no node of the inventory server
// is refused with an error wrapping [ErrInvalid] and
// router.ErrUnknownNode that names it, whether the configuration does not
// name it at all or gives it to another server only (the inventory never
// runs its scripts on another server's node: they answered there as
// from a node left out of the topology, unavailable, or read nothing).
func (inv *Inventory) ownNode(name string) (*node.Node, error) {
	i, ok := slices.BinarySearchFunc(inv.nodes, name, func(n *node.Node, name string) int {
		return strings.Compare(n.Name(), name)
	})
	if ok {
		return inv.nodes[i], nil
	}
	if _, err := inv.r.Node(name); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil, fmt.Errorf("%w: %w: %q is not a node of the inventory server %q (the configuration gives it to another server)",
		ErrInvalid, router.ErrUnknownNode, name, inv.cfg.Server)
}
