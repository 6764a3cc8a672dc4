package node_test

import (
	"testing"

	"github.com/shardis/shardis/node"
)

// A RouteFlag resolved once follows later drains of its route, and only
// of its route; the flag of a route the node does not serve is never
// enabled.
func TestRouteFlagFollowsSetRouteEnabled(t *testing.T) {
	t.Parallel()
	a := node.RouteKey{Server: "product", Route: "clothes"}
	b := node.RouteKey{Server: "product", Route: "electronics"}
	n := newNode(t, node.Options{Name: "n1", Addr: deadAddr(t), Routes: []node.RouteKey{a, b}}, nil)
	fa, fb := n.RouteFlag(a), n.RouteFlag(b)
	if !fa.Enabled() || !fb.Enabled() {
		t.Fatal("flags do not start enabled")
	}
	if err := n.SetRouteEnabled(a, false); err != nil {
		t.Fatal(err)
	}
	if fa.Enabled() || !fb.Enabled() {
		t.Errorf("after draining %s: flags %v/%v, want false/true", a, fa.Enabled(), fb.Enabled())
	}
	if err := n.SetRouteEnabled(a, true); err != nil || !fa.Enabled() {
		t.Errorf("re-enabling %s: err %v flag %v", a, err, fa.Enabled())
	}
	if n.RouteFlag(node.RouteKey{Server: "product", Route: "toys"}).Enabled() || (node.RouteFlag{}).Enabled() {
		t.Error("the flag of a route the node does not serve is enabled")
	}
}
