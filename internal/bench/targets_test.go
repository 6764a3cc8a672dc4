package bench

import (
	"strings"
	"testing"
)

// Every target a summary holds shows in the report's targets table, once:
// the floor, minted-id and RPC targets by their own rows, and a
// key no row names by the key itself.
func TestTargetsTableShowsEveryTarget(t *testing.T) {
	s := Summary{Targets: map[string]bool{
		"inventory_3item_vs_floor>=0.8":          false,
		"inventory_hot_sku_vs_floor>=0.8":        true,
		"inventory_hot_sku_minted_vs_floor>=0.8": false,
		"inventory_hot_sku_minted_vs_seed>=1.5":  true,
		"rpc_vs_library>=0.7":                    false,
		"rpc_server_cpu_us_1item<=2x_library":    false,
		"a_new_target>=1":                        true,
	}}
	s.Inventory3ItemVsFloor, s.InventoryHotVsFloor, s.InventoryHotMintedVsFloor = 0.685, 0.803, 0.787
	s.InventoryHotMintedVsSeed, s.RPCVsLibrary = 1.612, 0.212
	s.RPCServerCPUUs, s.LibraryCPUUs = 249.4, 30.8
	table := TargetsTable(&Results{}, s)
	for _, want := range []string{
		"| 3-item orders ≥ 0.8 × its floor row (orders/s, paired per round) | 0.685 | **missed** |",
		"| hot SKU on one node, ids the caller made up, ≥ 0.8 × its floor row (orders/s, paired per round) | 0.803 | met |",
		"| hot SKU on one node, ids minted by `NewOrderID`, ≥ 0.8 × its floor row (orders/s, paired per round) | 0.787 | **missed** |",
		"| hot SKU on one node, ids minted by `NewOrderID` ≥ 1.5 × the seed baseline | 1.612 | met |",
		"≥ 0.7 × the library (orders/s) | 0.212 | **missed** |",
		"| 249.4 µs against 30.8 µs | **missed** |",
		"| `a_new_target>=1` | see the summary line | met |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("targets table lacks %q:\n%s", want, table)
		}
	}
	if rows := strings.Count(table, "\n") - 2; rows != len(s.Targets) {
		t.Errorf("%d rows for %d targets:\n%s", rows, len(s.Targets), table)
	}
}
