package topology

import (
	"encoding/json"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/router"
)

// A topology as a value: the members of each route, their fingerprint,
// and how two topologies differ (doc.go has the epochs that change it).

// Topology is the inventory server's membership: the nodes of each route
// with their weights. It decides where order records and per-user quota
// counters live. The zero value has no routes.
type Topology struct {
	// Routes maps a route key to its members, sorted by name.
	Routes map[string][]router.Member `json:"routes"`
}

// Of returns the topology cfg's inventory server implies.
func Of(cfg *config.Config) Topology {
	t := Topology{Routes: map[string][]router.Member{}}
	for route, members := range cfg.Servers[cfg.Inventory.Server].Routes {
		ms := make([]router.Member, 0, len(members))
		for _, m := range members {
			ms = append(ms, router.Member{Name: m, Weight: cfg.Nodes[m].Weight})
		}
		sort.Slice(ms, func(i, j int) bool { return ms[i].Name < ms[j].Name })
		t.Routes[route] = ms
	}
	return t
}

// Fingerprint returns a stable 64-bit hash of the topology, in hex.
func (t Topology) Fingerprint() string {
	b, _ := json.Marshal(t) // map keys are sorted by encoding/json
	return strconv.FormatUint(xxhash.Sum64(b), 16)
}

// Nodes returns the names of every member of every route, sorted, unique.
func (t Topology) Nodes() []string {
	seen := map[string]bool{}
	var out []string
	for _, ms := range t.Routes {
		for _, m := range ms {
			if !seen[m.Name] {
				seen[m.Name] = true
				out = append(out, m.Name)
			}
		}
	}
	sort.Strings(out)
	return out
}

// Weights returns each member's weight: its weight in the first route,
// in name order, that lists it (configurations give one weight per node,
// the same in every route).
func (t Topology) Weights() map[string]int {
	routes := make([]string, 0, len(t.Routes))
	for r := range t.Routes {
		routes = append(routes, r)
	}
	sort.Strings(routes)
	w := map[string]int{}
	for _, r := range routes {
		for _, m := range t.Routes[r] {
			if _, ok := w[m.Name]; !ok {
				w[m.Name] = m.Weight
			}
		}
	}
	return w
}

// String describes t for messages, e.g. "clothes=[n1 n2] food=[n3]".
func (t Topology) String() string {
	routes := make([]string, 0, len(t.Routes))
	for r := range t.Routes {
		routes = append(routes, r)
	}
	sort.Strings(routes)
	var b strings.Builder
	for i, r := range routes {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(r + "=[")
		for j, m := range t.Routes[r] {
			if j > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(m.Name)
			if m.Weight != 1 {
				b.WriteString("*" + strconv.Itoa(m.Weight))
			}
		}
		b.WriteByte(']')
	}
	return b.String()
}

// Diff describes what moving from the applied topology a to the
// configured one c changes, node by node: "+n4 (route x)" for a node that
// joins, "-n3 (route r)" for one that leaves, "n1 +route x", "n1 -route r"
// and "n1 weight 1→2" for a member that stays.
func Diff(a, c Topology) string {
	type member struct {
		routes []string
		weight int
	}
	index := func(t Topology) map[string]*member {
		out := map[string]*member{}
		for route, ms := range t.Routes {
			for _, m := range ms {
				if out[m.Name] == nil {
					out[m.Name] = &member{weight: m.Weight}
				}
				out[m.Name].routes = append(out[m.Name].routes, route)
			}
		}
		for _, m := range out {
			sort.Strings(m.routes)
		}
		return out
	}
	am, cm := index(a), index(c)
	routeList := func(rs []string) string { return "route " + strings.Join(rs, ", route ") }
	var out []string
	for _, name := range Union(a.Nodes(), c.Nodes()) {
		was, now := am[name], cm[name]
		switch {
		case was == nil:
			out = append(out, "+"+name+" ("+routeList(now.routes)+")")
		case now == nil:
			out = append(out, "-"+name+" ("+routeList(was.routes)+")")
		default:
			for _, r := range now.routes {
				if !slices.Contains(was.routes, r) {
					out = append(out, name+" +route "+r)
				}
			}
			for _, r := range was.routes {
				if !slices.Contains(now.routes, r) {
					out = append(out, name+" -route "+r)
				}
			}
			if max(was.weight, 1) != max(now.weight, 1) {
				out = append(out, name+" weight "+strconv.Itoa(was.weight)+"→"+strconv.Itoa(now.weight))
			}
		}
	}
	if len(out) == 0 {
		return "same members, other routes" // unreachable for different fingerprints
	}
	return strings.Join(out, "; ")
}

// Union returns the sorted union of two name lists, each name once.
func Union(a, b []string) []string {
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
