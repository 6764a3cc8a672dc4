package inventory

import (
	"encoding/json"
	"sort"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/router"
)

// A topology as a value: the members of each route, what it implies for
// homes, and its fingerprint (topology.go has the epochs that change it).

// Topology is the inventory server's membership: the nodes of each route
// with their weights. It decides where order records and per-user quota
// counters live. The zero value has no routes.
type Topology struct {
	// Routes maps a route key to its members, sorted by name.
	Routes map[string][]router.Member `json:"routes"`
}

// TopologyOf returns the topology cfg's inventory server implies.
func TopologyOf(cfg *config.Config) Topology {
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

// weights returns each member's weight (the first route's, as
// configurations give one weight per node).
func (t Topology) weights() map[string]int {
	w := map[string]int{}
	for _, ms := range t.Routes {
		for _, m := range ms {
			w[m.Name] = m.Weight
		}
	}
	return w
}

// homes builds the order homes of t: every member, sorted by name.
func (t Topology) homes() (*Homes, error) {
	names := t.Nodes()
	w := t.weights()
	ms := make([]router.Member, len(names))
	for i, n := range names {
		ms[i] = router.Member{Name: n, Weight: w[n]}
	}
	r, err := router.NewRing(ms)
	if err != nil {
		return nil, err
	}
	return newHomes(r, names), nil
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
