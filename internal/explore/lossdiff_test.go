package explore

import (
	"reflect"
	"testing"

	"github.com/shardis/shardis/inventory"
)

// diffLoss exposes the orders whose record or parts the roll back
// changed, and only those, with their record when it changed (its value,
// or, the node back behind an apply under way, whether the resume retires
// it); a moved record that comes back live is resurrected, not exposed.
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
		parts: map[string]*inventory.PartRecord{"settled": part("settled", inventory.PartConfirmed), "kept": part("kept", inventory.PartPending)},
	}
	post := &nodeState{name: "n2", topo: map[string]string{"token": "2:t1"},
		orders: map[string]*inventory.OrderRecord{
			"same": rec("same", inventory.OrderReserved, ""), "back": rec("back", inventory.OrderReserved, ""),
			"older": rec("older", inventory.OrderReserved, ""), "new": rec("new", inventory.OrderStaging, ""),
			"flip": rec("flip", inventory.OrderReserved, ""),
		},
		parts: map[string]*inventory.PartRecord{"settled": part("settled", inventory.PartPending), "kept": part("kept", inventory.PartPending)},
	}
	// every order is homed on n2 in the topology the node migrates from
	// but flip, homed on n4 there: the node came back behind an apply
	// under way, whose resume retires flip's unchanged record
	fromHome := func(topo map[string]string, id string) string {
		if id == "flip" {
			return "n4"
		}
		return "n2"
	}
	d := diffLoss(pre, post, fromHome)
	if want := map[string]bool{"gone": true, "older": true, "new": true, "settled": true, "flip": true}; !reflect.DeepEqual(d.exposed, want) {
		t.Errorf("exposed = %v, want %v", d.exposed, want)
	}
	if want := map[string]bool{"gone": true, "older": true, "new": true, "flip": true}; !reflect.DeepEqual(d.records, want) {
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

// resumeRetires holds for a node that was migrating and came back at an
// older epoch, and only then.
func TestResumeRetires(t *testing.T) {
	for _, c := range []struct {
		pre, post map[string]string
		want      bool
	}{
		{map[string]string{"token": "3:a", "phase": "migrating"}, map[string]string{"token": "2:b"}, true},
		{map[string]string{"token": "3:a", "phase": "migrating"}, map[string]string{"token": "1:a"}, true},
		{map[string]string{"token": "3:a", "phase": "stable"}, map[string]string{"token": "2:b"}, false},
		{map[string]string{"token": "2:b", "phase": "migrating"}, map[string]string{"token": "2:b"}, false},
		{map[string]string{"token": "3:a", "phase": "migrating"}, map[string]string{}, false},
	} {
		if got := resumeRetires(c.pre, c.post); got != c.want {
			t.Errorf("resumeRetires(%v, %v) = %v, want %v", c.pre, c.post, got, c.want)
		}
	}
}
