package bench

import (
	"strings"
	"testing"
	"time"
)

// Every target a summary holds shows in the report's targets table: the
// issue's floor, minted-id and RPC targets by rows of their own, the two
// 3-item round-trip rows that share one key both, and a key no row names
// by the key itself, once.
func TestTargetsTableShowsEveryTarget(t *testing.T) {
	s := Summary{Targets: map[string]bool{
		"inventory_3item_vs_floor>=0.8":          false,
		"inventory_hot_sku_vs_floor>=0.8":        true,
		"inventory_hot_sku_minted_vs_floor>=0.8": false,
		"inventory_hot_sku_minted_vs_seed>=1.5":  true,
		"rpc_vs_library>=0.7":                    false,
		"rpc_server_cpu_us_1item<=2x_library":    false,
		"a_new_target>=1":                        true,
		"reserve_round_trips_3item==1":           true,
	}}
	s.Inventory3ItemVsFloor, s.InventoryHotVsFloor, s.InventoryHotMintedVsFloor = 0.685, 0.803, 0.787
	s.InventoryHotMintedVsSeed, s.RPCVsLibrary = 1.612, 0.212
	s.RPCServerCPUUs, s.LibraryCPUUs = 249.4, 30.8
	rt := &RoundTripResult{Shapes: []RoundTripShape{{Name: RTShape3, Median: 1, Max: 1, Orders: 501}, {Name: RTShapeStaged, Median: 1, Max: 2, Orders: 501}}}
	table := TargetsTable(&Results{Inventory: &InvResult{RoundTrips: rt}}, s)
	for _, want := range []string{
		"| 3-item orders ≥ 0.8 × its floor row (orders/s, paired per round) | 0.685 | **missed** |",
		"| hot SKU on one node, ids the caller made up, ≥ 0.8 × its floor row (orders/s, paired per round) | 0.803 | met |",
		"| hot SKU on one node, ids minted by `NewOrderID`, ≥ 0.8 × its floor row (orders/s, paired per round) | 0.787 | **missed** |",
		"| hot SKU on one node, ids minted by `NewOrderID` ≥ 1.5 × the seed baseline | 1.612 | met |",
		"≥ 0.7 × the library (orders/s) | 0.212 | **missed** |",
		"| 249.4 µs against 30.8 µs | **missed** |",
		"| `a_new_target>=1` | see the summary line | met |",
		"| a 3-item reserve takes 1 sequential round trip | median 1, max 1 (501 orders, counted) | met |",
		"| a 3-item reserve on three one-node routes takes 1 sequential round trip | median 1, max 2 (501 orders, counted) | met |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("targets table lacks %q:\n%s", want, table)
		}
	}
	if rows := strings.Count(table, "\n") - 2; rows != len(s.Targets)+1 {
		t.Errorf("%d rows for %d targets, one of them in two rows:\n%s", rows, len(s.Targets), table)
	}
}

// A missed minted-over-seed target is explained by the floor next to the
// stock measured beside it: out of reach when that floor itself stays
// under 1.5× the seed.
func TestMintedSeedMissReading(t *testing.T) {
	s := Summary{Targets: map[string]bool{"inventory_hot_sku_minted_vs_seed>=1.5": false},
		InventoryHotMintedVsSeed: 1.113, InventoryHotFloorLocalVsSeed: 1.384, InventoryHotMintedVsFloor: 0.803}
	got := mintedSeedMiss(s)
	for _, want := range []string{"(1.113, target 1.5)", "ran at 1.384× the seed's EVAL", "shardis at 0.803 of that floor", "asks shardis for 1.08× its floor"} {
		if !strings.Contains(got, want) {
			t.Errorf("reading lacks %q: %s", want, got)
		}
	}
	s.InventoryHotFloorLocalVsSeed = 2.29
	if got := mintedSeedMiss(s); !strings.Contains(got, "shardis's own work per order") {
		t.Errorf("floor at 2.29× the seed: %s", got)
	}
	s.Targets["inventory_hot_sku_minted_vs_seed>=1.5"] = true
	if got := mintedSeedMiss(s); got != "" {
		t.Errorf("met target explained: %s", got)
	}
}

// A floor target's row shows, beside the median of its paired rounds,
// the lowest and the highest of them: how far the same pair moved within
// the run.
func TestTargetsTableShowsFloorRoundSpread(t *testing.T) {
	ir := &InvResult{Series: map[string]*Series{}}
	for v, ops := range map[string][]int64{VarInv3: {600, 750, 900}, VarFloor3: {1000, 1000, 1000}} {
		s := &Series{Name: v}
		for _, n := range ops {
			s.Add(Sample{Ops: n, Elapsed: time.Second})
		}
		ir.Series[v] = s
	}
	s := Summary{Targets: map[string]bool{"inventory_3item_vs_floor>=0.8": false, "inventory_hot_sku_vs_floor>=0.8": true}}
	s.Inventory3ItemVsFloor, s.InventoryHotVsFloor = ir.Over(VarInv3, VarFloor3), 0.9
	table := TargetsTable(&Results{Inventory: ir}, s)
	if want := "| 3-item orders ≥ 0.8 × its floor row (orders/s, paired per round) | 0.750 (its 3 rounds: 0.600 to 0.900) | **missed** |"; !strings.Contains(table, want) {
		t.Errorf("targets table lacks %q:\n%s", want, table)
	}
	// the hot row's series are not in this run: its median alone
	if want := "ids the caller made up, ≥ 0.8 × its floor row (orders/s, paired per round) | 0.900 | met |"; !strings.Contains(table, want) {
		t.Errorf("targets table lacks %q:\n%s", want, table)
	}
}
