package bench

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

// TestSummaryVsFloor checks that each shardis row over its floor row
// reaches the JSON line under its key, with its target, as do the
// one-round and guarded floor ratios (without targets), and that a run
// without a ratio's rows leaves its key out.
func TestSummaryVsFloor(t *testing.T) {
	ops := map[string]int64{
		VarInv3: 400, VarFloor3: 1000,
		VarHot1: 300, VarHotFloor: 1000,
		VarHot1Minted: 900, VarHotFloorLocal: 1000,
		VarSeedHot1: 500, VarSeed3: 1000,
		VarInv1: 1000, VarHot3: 1000,
		VarFloor3OneRound: 800, VarHotFloorOneRound: 600,
		VarFloor3Guarded: 900, VarHotFloorGuarded: 750, VarHotFloorLocalGuarded: 1000,
	}
	ir := &InvResult{Series: map[string]*Series{}}
	for v, n := range ops {
		s := &Series{Name: v}
		for range 3 {
			s.Add(Sample{Ops: n, Elapsed: time.Second})
		}
		ir.Series[v] = s
	}
	sum := Summarize(&Results{Inventory: ir})
	b, err := json.Marshal(sum)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"inventory_3item_vs_floor":          0.4,
		"inventory_hot_sku_vs_floor":        0.3,
		"inventory_hot_sku_minted_vs_floor": 0.9,
		"inventory_hot_sku_minted_vs_seed":  1.8,
		// the one-round yardsticks: no targets
		"inventory_3item_floor_one_round_vs_floor":   0.8,
		"inventory_3item_vs_floor_one_round":         0.5,
		"inventory_hot_sku_floor_one_round_vs_floor": 0.6,
		"inventory_hot_sku_vs_floor_one_round":       0.5,
		// the guarded floor's yardsticks: no targets
		"inventory_3item_guarded_floor_vs_floor":          0.9,
		"inventory_3item_vs_guarded_floor":                0.444,
		"inventory_hot_sku_guarded_floor_vs_floor":        0.75,
		"inventory_hot_sku_vs_guarded_floor":              0.4,
		"inventory_hot_sku_minted_guarded_floor_vs_floor": 1,
		"inventory_hot_sku_minted_vs_guarded_floor":       0.9,
	}
	for k, w := range want {
		g, ok := got[k].(float64)
		if !ok || math.Abs(g-w) > 1e-9 {
			t.Errorf("%s = %v, want %v (line %s)", k, got[k], w, b)
		}
	}
	for k, met := range map[string]bool{
		"inventory_3item_vs_floor>=0.8":          false,
		"inventory_hot_sku_vs_floor>=0.8":        false,
		"inventory_hot_sku_minted_vs_floor>=0.8": true,
		"inventory_hot_sku_minted_vs_seed>=1.5":  true,
	} {
		if g, ok := sum.Targets[k]; !ok || g != met {
			t.Errorf("target %s = %v (present %v), want %v", k, g, ok, met)
		}
	}

	for k := range sum.Targets {
		if strings.Contains(k, "one_round") || strings.Contains(k, "guarded") {
			t.Errorf("a yardstick has a target: %s", k)
		}
	}

	delete(ir.Series, VarFloor3)
	delete(ir.Series, VarHotFloorOneRound)
	delete(ir.Series, VarHotFloorLocalGuarded)
	b, _ = json.Marshal(Summarize(&Results{Inventory: ir}))
	got = nil
	_ = json.Unmarshal(b, &got)
	for _, k := range []string{"inventory_3item_vs_floor", "inventory_3item_floor_one_round_vs_floor",
		"inventory_hot_sku_floor_one_round_vs_floor", "inventory_hot_sku_vs_floor_one_round",
		"inventory_3item_guarded_floor_vs_floor", "inventory_hot_sku_minted_guarded_floor_vs_floor", "inventory_hot_sku_minted_vs_guarded_floor"} {
		if _, ok := got[k]; ok {
			t.Errorf("%s present without its rows: %s", k, b)
		}
	}
	for _, k := range []string{"inventory_3item_vs_floor_one_round", "inventory_3item_vs_guarded_floor"} {
		if _, ok := got[k]; !ok {
			t.Errorf("%s missing with both its rows: %s", k, b)
		}
	}
}
