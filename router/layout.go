package router

import (
	"fmt"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/node"
)

// Layout is the placement a configuration implies, computed from the
// configuration alone: no connection, no node state. It answers "where does
// this key live when every node is up and no route is drained" (what
// `shardis route` prints). It is immutable and safe for concurrent use.
type Layout struct {
	cfg   *config.Config
	rings map[node.RouteKey]*Ring
}

// ConfigRing builds the ring of the named nodes of cfg, each with its
// configured weight. The rings shardis derives from a configuration
// (route sets, the offline layout) are built here, and the inventory's
// order homes with NewRing over the same (name, weight) pairs, so two
// processes with the same configuration place keys alike.
func ConfigRing(cfg *config.Config, names []string) (*Ring, error) {
	ms := make([]Member, len(names))
	for i, name := range names {
		ms[i] = Member{Name: name, Weight: cfg.Nodes[name].Weight}
	}
	return NewRing(ms)
}

// NewLayout validates cfg and builds the ring of every (server, route).
func NewLayout(cfg *config.Config) (*Layout, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	l := &Layout{cfg: cfg, rings: map[node.RouteKey]*Ring{}}
	for sname, srv := range cfg.Servers {
		for rname, members := range srv.Routes {
			ring, err := ConfigRing(cfg, members)
			if err != nil {
				return nil, fmt.Errorf("router: %s/%s: %w", sname, rname, err)
			}
			l.rings[node.RouteKey{Server: sname, Route: rname}] = ring
		}
	}
	return l, nil
}

// Home returns the name of a key's home node in (server, route), or an
// error wrapping [ErrUnknownRoute].
func (l *Layout) Home(server, route, key string) (string, error) {
	ring := l.rings[node.RouteKey{Server: server, Route: route}]
	if ring == nil {
		if _, ok := l.cfg.Servers[server]; !ok {
			return "", fmt.Errorf("%w: server %q is not configured", ErrUnknownRoute, server)
		}
		return "", fmt.Errorf("%w: server %q has no route %q", ErrUnknownRoute, server, route)
	}
	return ring.Name(ring.Home(key)), nil
}
