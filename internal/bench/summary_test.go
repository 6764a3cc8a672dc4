package bench

import (
	"encoding/json"
	"math"
	"testing"
	"time"
)

// TestSummaryVsFloor checks that each shardis row over its floor row
// reaches the JSON line under its key, with its target, and that a run
// without floor rows leaves the keys out.
func TestSummaryVsFloor(t *testing.T) {
	ops := map[string]int64{
		VarInv3: 400, VarFloor3: 1000,
		VarHot1: 300, VarHotFloor: 1000,
		VarHot1Minted: 900, VarHotFloorLocal: 1000,
		VarSeedHot1: 500, VarSeed3: 1000,
		VarInv1: 1000, VarHot3: 1000,
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

	delete(ir.Series, VarFloor3)
	b, _ = json.Marshal(Summarize(&Results{Inventory: ir}))
	got = nil
	_ = json.Unmarshal(b, &got)
	if _, ok := got["inventory_3item_vs_floor"]; ok {
		t.Errorf("inventory_3item_vs_floor present without a floor row: %s", b)
	}
}
