package explore

import (
	"reflect"
	"testing"

	"github.com/shardis/shardis/inventory"
)

// diffLoss exposes the orders whose record or parts the roll back
// changed, and only those, with their record when its value changed; a
// moved record that comes back live is resurrected, not exposed, when
// the order was live on another node before the roll back (its install
// landed), else exposed like any lost record ("uninstalled"). A record
// that comes back unchanged on a node behind an apply under way (flip,
// away from its home in the topology the apply moves from) is not
// exposed: the apply's rerun puts it back if it retires it
// (topology.Driver.Retire).
func TestDiffLoss(t *testing.T) {
	rec := func(id string, st inventory.OrderState, moved string) *inventory.OrderRecord {
		return &inventory.OrderRecord{ID: id, Status: st, Token: "T", Moved: moved}
	}
	part := func(order string, st inventory.PartState) *inventory.PartRecord {
		return &inventory.PartRecord{ID: order + "|T|0", Order: order, State: st, Qty: 1}
	}
	pre := &nodeState{name: "n2", topo: map[string]string{"token": "3:t0", "phase": "migrating"},
		orders: map[string]*inventory.OrderRecord{
			"same": rec("same", inventory.OrderReserved, ""), "gone": rec("gone", inventory.OrderReserved, ""),
			"back": rec("back", inventory.OrderReserved, "2:fp"), "older": rec("older", inventory.OrderConfirmed, ""),
			"left": rec("left", inventory.OrderReserved, "2:fp"), "flip": rec("flip", inventory.OrderReserved, ""),
		},
		parts:     map[string]*inventory.PartRecord{"settled": part("settled", inventory.PartConfirmed), "kept": part("kept", inventory.PartPending)},
		movedLive: map[string]bool{"back": true, "left": true},
	}
	pre.orders["uninstalled"] = rec("uninstalled", inventory.OrderReserved, "2:fp")
	post := &nodeState{name: "n2", topo: map[string]string{"token": "2:t1"},
		orders: map[string]*inventory.OrderRecord{
			"same": rec("same", inventory.OrderReserved, ""), "back": rec("back", inventory.OrderReserved, ""),
			"older": rec("older", inventory.OrderReserved, ""), "new": rec("new", inventory.OrderStaging, ""),
			"flip": rec("flip", inventory.OrderReserved, ""),
		},
		parts: map[string]*inventory.PartRecord{"settled": part("settled", inventory.PartPending), "kept": part("kept", inventory.PartPending)},
	}
	d := diffLoss(pre, post)
	if want := map[string]bool{"gone": true, "older": true, "new": true, "settled": true, "uninstalled": true}; !reflect.DeepEqual(d.exposed, want) {
		t.Errorf("exposed = %v, want %v", d.exposed, want)
	}
	if want := map[string]bool{"gone": true, "older": true, "new": true, "uninstalled": true}; !reflect.DeepEqual(d.records, want) {
		t.Errorf("records = %v, want %v (a lost part exposes no record)", d.records, want)
	}
	if want := map[string]bool{"back": true}; !reflect.DeepEqual(d.resurrected, want) {
		t.Errorf("resurrected = %v, want %v", d.resurrected, want)
	}
}

// promisedAcross exposes the orders whose live record promises a part on
// a lost node at an incarnation other than its current one.
func TestPromisedAcross(t *testing.T) {
	rec := func(id, node, inc, moved string) *inventory.OrderRecord {
		return &inventory.OrderRecord{ID: id, Status: inventory.OrderReserved, Moved: moved,
			Parts: []inventory.OrderPart{{ID: id + "|T|0", Node: node, Incarnation: inc}}}
	}
	st := &worldState{nodes: map[string]*nodeState{
		"n1": {orders: map[string]*inventory.OrderRecord{
			"before": rec("before", "n2", "old", ""), "after": rec("after", "n2", "new", ""),
			"unknown": rec("unknown", "n2", "", ""), "elsewhere": rec("elsewhere", "n3", "old", ""),
			"dead": rec("dead", "n2", "old", "2:fp"),
		}},
	}}
	exposed := map[string]bool{}
	promisedAcross(st, []string{"n2"}, map[string]string{"n2": "new"}, exposed)
	if want := map[string]bool{"before": true}; !reflect.DeepEqual(exposed, want) {
		t.Errorf("exposed = %v, want %v", exposed, want)
	}
}
