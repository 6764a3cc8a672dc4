package topology

import (
	"errors"
	"strings"
	"testing"
)

// TestNoRecordRefusalNamesFrom: an apply without From whose new nodes hold
// no record while the inventory runs on other nodes (n1, n2 at epoch 1,
// the new topology on n3, n4 only) is refused, naming the nodes read and
// --from as the way when the inventory runs elsewhere. Before, the
// refusal said only "start `shardis serve` once with the current
// configuration, or pass --from"; an operator who started serve gave n3
// and n4 an epoch of their own, the next apply reported it applied, and
// the stock stayed on n1 and n2 (found by a review).
func TestNoRecordRefusalNamesFrom(t *testing.T) {
	f := newFake()
	f.at(1, two, nil, PhaseStable, "n1", "n2")
	other := topo(map[string][]string{"r": {"n3", "n4"}})
	_, err := apply(t, f, Options{To: other})
	if !errors.Is(err, ErrInvalid) || len(f.writes) != 0 {
		t.Fatalf("apply = %v, writes %v; want ErrInvalid, nothing written", err, f.writes)
	}
	for _, want := range []string{"none of n3, n4 has one", "if the inventory runs on other nodes now, pass --from", "an epoch of their own"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
}
