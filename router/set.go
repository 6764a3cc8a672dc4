package router

import (
	"fmt"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/node"
)

// Set is the node set of one (server, route) pair: a consistent-hash ring
// over its nodes and the server's node-down policy. It is immutable and
// safe for concurrent use; node state and route flags are read live.
type Set struct {
	key      node.RouteKey
	failFast bool
	ring     *Ring
	nodes    []*node.Node     // indexed like the ring's members
	flags    []node.RouteFlag // flags[i]: nodes[i]'s live flag for key
}

func newSet(key node.RouteKey, policy string, members []string, cfg *config.Config, nodes map[string]*node.Node) (*Set, error) {
	ns := make([]*node.Node, len(members))
	flags := make([]node.RouteFlag, len(members))
	for i, name := range members {
		ns[i] = nodes[name]
		flags[i] = ns[i].RouteFlag(key)
	}
	ring, err := ConfigRing(cfg, members)
	if err != nil {
		return nil, fmt.Errorf("router: %s: %w", key, err)
	}
	return &Set{key: key, failFast: policy != config.OnNodeDownNext, ring: ring, nodes: ns, flags: flags}, nil
}

// SetOf builds the node set of (server, route) over the given members
// and weights instead of the configuration's: the inventory serves the
// topology applied on its nodes, which may differ from this router's
// configuration during a rolling deploy (the topology package). Every
// member must be a node of the router ([ErrUnknownNode] otherwise), and
// the server must be configured ([ErrUnknownRoute]). A member whose
// configuration does not put it in the route has no route flag: the set
// treats it as drained (Pick and Spread skip it) until the configuration
// names it there. The ring places keys as any ring over the same
// (name, weight) pairs.
func (r *Router) SetOf(server, route string, members []Member) (*Set, error) {
	srv, ok := r.cfg.Servers[server]
	if !ok {
		return nil, fmt.Errorf("%w: server %q is not configured", ErrUnknownRoute, server)
	}
	key := node.RouteKey{Server: server, Route: route}
	ns := make([]*node.Node, len(members))
	flags := make([]node.RouteFlag, len(members))
	for i, m := range members {
		n := r.nodes[m.Name]
		if n == nil {
			return nil, fmt.Errorf("router: %s: %w: %q", key, ErrUnknownNode, m.Name)
		}
		ns[i], flags[i] = n, n.RouteFlag(key)
	}
	ring, err := NewRing(members)
	if err != nil {
		return nil, fmt.Errorf("router: %s: %w", key, err)
	}
	return &Set{key: key, failFast: srv.OnNodeDown != config.OnNodeDownNext, ring: ring, nodes: ns, flags: flags}, nil
}

// Key returns the set's (server, route) pair.
func (s *Set) Key() node.RouteKey { return s.key }

// Contains reports whether n is a member of the set.
func (s *Set) Contains(n *node.Node) bool {
	for _, m := range s.nodes {
		if m == n {
			return true
		}
	}
	return false
}

// Nodes returns the set's nodes in configuration order. Do not modify the
// slice.
func (s *Set) Nodes() []*node.Node { return s.nodes }

// Ring returns the set's ring.
func (s *Set) Ring() *Ring { return s.ring }

// Pick returns the node a key goes to now: the first node of the key's ring
// walk that is enabled for the route (drained nodes are skipped) and
// usable (UP, breaker not open). With policy "fail" only the first enabled
// node is considered: if it is not usable the error wraps [ErrUnavailable]
// and the node's own error ([node.ErrDown] or [node.ErrBreakerOpen]). With
// "next" the walk goes on. Pick does not allocate unless it fails.
func (s *Set) Pick(key string) (*node.Node, error) {
	w := s.ring.Walk(key)
	var home *node.Node
	for i, ok := w.Next(); ok; i, ok = w.Next() {
		if !s.flags[i].Enabled() {
			continue
		}
		n := s.nodes[i]
		if n.Usable() {
			return n, nil
		}
		if home == nil {
			home = n
		}
		if s.failFast {
			break
		}
	}
	return nil, s.unavailable(key, home)
}

func (s *Set) unavailable(key string, home *node.Node) error {
	if home == nil {
		return fmt.Errorf("%w: %s key %q: every node has the route drained", ErrUnavailable, s.key, key)
	}
	reason := node.ErrDown
	if home.State() == node.StateUp {
		reason = node.ErrBreakerOpen
	}
	if s.failFast {
		return fmt.Errorf("%w: %s key %q: home node %s: %w (policy fail)", ErrUnavailable, s.key, key, home.Name(), reason)
	}
	return fmt.Errorf("%w: %s key %q: no usable node, first was %s: %w", ErrUnavailable, s.key, key, home.Name(), reason)
}

// Candidates returns every node of the set in the key's preference order
// (the ring walk), whatever their state. It is the failover order; Spread
// filters it for data spread over every node (the inventory's stock).
func (s *Set) Candidates(key string) []*node.Node {
	idx := s.ring.Candidates(key)
	out := make([]*node.Node, len(idx))
	for i, j := range idx {
		out[i] = s.nodes[j]
	}
	return out
}

// SpreadsFirst reports whether Spread(key, first, accept) starts with
// first, whatever the key: first is an enabled node of the set that accept
// admits (nil admits every enabled node). Unlike Spread it walks no ring
// and allocates nothing.
func (s *Set) SpreadsFirst(first *node.Node, accept func(*node.Node) bool) bool {
	for i, n := range s.nodes {
		if n == first {
			return s.flags[i].Enabled() && (accept == nil || accept(n))
		}
	}
	return false
}

// Spread returns the nodes of the set that may serve key for data spread
// over every node of the route (each node holds a share, like the
// inventory's stock), in the order to try them: the enabled nodes that
// accept admits (nil admits every enabled node), first at the front when
// it is one of them, then the others in Candidates(key) order. The set's
// node-down policy does not apply: any node holding a share serves, so a
// down node is skipped, never waited for. It allocates the result.
func (s *Set) Spread(key string, first *node.Node, accept func(*node.Node) bool) []*node.Node {
	return s.AppendSpread(make([]*node.Node, 0, len(s.nodes)), key, first, accept)
}

// AppendSpread is Spread appending its nodes to dst (which it may grow)
// and returning the result: with a caller's array, it allocates nothing.
// Neither key nor dst's nodes are kept.
func (s *Set) AppendSpread(dst []*node.Node, key string, first *node.Node, accept func(*node.Node) bool) []*node.Node {
	out, base := dst, len(dst)
	w := s.ring.Walk(key)
	for i, ok := w.Next(); ok; i, ok = w.Next() {
		n := s.nodes[i]
		if !s.flags[i].Enabled() || (accept != nil && !accept(n)) {
			continue
		}
		if n == first {
			out = append(out, nil)
			copy(out[base+1:], out[base:])
			out[base] = n
			continue
		}
		out = append(out, n)
	}
	return out
}
