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

// drawRejoin draws nothing from the schedule's source when the rejoin's
// chance is 0 or negative (every seed then draws what it drew before
// the rejoin was added: the same plan), and draws the rejoin, its picks
// and its quantity when it is 1.
func TestDrawRejoinOffDrawsNothing(t *testing.T) {
	for seed := int64(195000); seed < 195020; seed++ {
		plain, off := NewScheduler(seed, DefaultProbs, nil), NewScheduler(seed, DefaultProbs, nil)
		for _, p := range []float64{0, -1} {
			if got := drawRejoin(off, p); got.on {
				t.Fatalf("seed %d, chance %g: drew a rejoin %+v", seed, p, got)
			}
		}
		for i := 0; i < 8; i++ { // what the plan draws next: the same as without the rejoin
			if a, b := plain.Intn(1000), off.Intn(1000); a != b {
				t.Fatalf("seed %d: draw %d after a rejoin of chance 0 is %d, %d without it", seed, i, b, a)
			}
		}
		on := NewScheduler(seed, DefaultProbs, nil)
		got := drawRejoin(on, 1)
		if !got.on || got.picks < 0 || got.picks >= 40 || got.qty < 2 || got.qty > 9 {
			t.Fatalf("seed %d, chance 1: %+v", seed, got)
		}
	}
}
