package explore

import (
	"strings"
	"testing"

	"github.com/shardis/shardis/inventory"
)

// TestExpiredOrderPartsFollowTheSystemOfRecord: once the set-aside actor
// expired an order's record, each settled part of the record's attempt
// must hold the decision the system of record kept (confirmed exactly
// when the order was paid), whoever settled it; parts of other attempts
// and pending parts are left to the other checks.
func TestExpiredOrderPartsFollowTheSystemOfRecord(t *testing.T) {
	for _, c := range []struct {
		name      string
		confirmed bool
		state     inventory.PartState
		token     string
		want      bool
	}{
		{"paid, part confirmed", true, inventory.PartConfirmed, "T", false},
		{"paid, part cancelled (sold again)", true, inventory.PartCancelled, "T", true},
		{"unpaid, part cancelled", false, inventory.PartCancelled, "T", false},
		{"unpaid, part confirmed (withheld)", false, inventory.PartConfirmed, "T", true},
		{"another attempt's part", true, inventory.PartCancelled, "U", false},
		{"still pending", true, inventory.PartPending, "T", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := &worldState{nodes: map[string]*nodeState{}}
			for _, name := range allNodes {
				st.nodes[name] = &nodeState{name: name, parts: map[string]*inventory.PartRecord{}}
			}
			id := "o1|" + c.token + "|0"
			st.nodes["n1"].parts[id] = &inventory.PartRecord{ID: id, Order: "o1", Token: c.token, State: c.state, Qty: 1}
			obs := newObserved()
			obs.expired["o1"] = expiredOrder{token: "T", confirmed: c.confirmed}
			var v violations
			checkExpired(&v, st, obs)
			got := len(v.list) > 0
			if got != c.want || (got && !strings.HasPrefix(v.list[0], "expired-decision")) {
				t.Fatalf("violations %v, want one: %v", v.list, c.want)
			}
		})
	}
}
