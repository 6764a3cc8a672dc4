package explore

import "testing"

// Config.seed runs Seed, Seed+1, … or, when Seeds is set, Seeds in order.
func TestConfigSeed(t *testing.T) {
	c := Config{Seed: 40}
	if got := []int64{c.seed(0), c.seed(2)}; got[0] != 40 || got[1] != 42 {
		t.Errorf("Seed 40: seeds %v, want [40 42]", got)
	}
	c.Seeds = []int64{7, 3, 9}
	if got := []int64{c.seed(0), c.seed(1), c.seed(2)}; got[0] != 7 || got[1] != 3 || got[2] != 9 {
		t.Errorf("Seeds [7 3 9]: seeds %v", got)
	}
}
