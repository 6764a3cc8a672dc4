package bench

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestInvRoundOrder holds the inventory rounds' order to its contract:
// every variant of the report's table runs once per round, and each pair
// whose ratio a target names (invTargetPairs), and the sold-out row with
// its last unit reserved with the seed's (a ratio reported without a
// target), runs side by side, in both orders over two rounds.
func TestInvRoundOrder(t *testing.T) {
	if got, want := slices.Sorted(slices.Values(invRoundOrder)), slices.Sorted(slices.Values(invTableOrder)); !slices.Equal(got, want) {
		t.Fatalf("the round order and the table's hold different variants:\n%q\n%q", got, want)
	}
	pairs := append(invTargetPairs(), [2]string{VarSoldOutReserved, VarSeedSoldOut})
	for round := range 2 {
		order := roundOrder(round)
		for _, p := range pairs {
			i, j := slices.Index(order, p[0]), slices.Index(order, p[1])
			if i < 0 || j < 0 || i-j != 1 && j-i != 1 {
				t.Errorf("round %d: %q at %d and %q at %d, want them side by side", round, p[0], i, p[1], j)
			}
		}
	}
	first, second := roundOrder(0), slices.Clone(roundOrder(1))
	slices.Reverse(second)
	if !slices.Equal(first, second) {
		t.Errorf("an odd round does not run the even round's order reversed: %q then %q", first, roundOrder(1))
	}
	if invRoundOrder[0] != VarInv1 {
		t.Errorf("roundOrder changed invRoundOrder: %q", invRoundOrder)
	}
}

// invTargetPairs are the two rows of every ratio the inventory targets
// name (Summarize's targets_met keys), shardis's row first.
func invTargetPairs() [][2]string {
	pairs := [][2]string{
		{VarInv3, VarSeed3},          // inventory_3item_vs_seed
		{VarHot1, VarSeedHot1},       // inventory_hot_sku_vs_seed
		{VarHot1Minted, VarSeedHot1}, // inventory_hot_sku_minted_vs_seed
		{VarSoldOut, VarSeedSoldOut}, // inventory_soldout_vs_seed
	}
	for _, p := range VsFloor { // the *_vs_floor targets
		pairs = append(pairs, [2]string{p.Shardis, p.Floor})
	}
	return pairs
}

// TestInvTargetPairsCoverTargets: every inventory ratio target of a full
// summary has its pair in invTargetPairs, so a target added later is held
// to the round order too.
func TestInvTargetPairsCoverTargets(t *testing.T) {
	ir := &InvResult{Series: map[string]*Series{}}
	for _, v := range invTableOrder {
		ir.Series[v] = &Series{Name: v, Samples: []Sample{{Ops: 1000, Elapsed: time.Second}}}
	}
	s := Summarize(&Results{Inventory: ir})
	covered := map[string]bool{
		"inventory_3item_vs_seed>=2": true, "inventory_hot_sku_vs_seed>=2": true,
		"inventory_hot_sku_minted_vs_seed>=1.5": true, "inventory_soldout_vs_seed>=1.0": true,
	}
	for _, p := range VsFloor {
		covered[p.Key+">=0.8"] = true
	}
	for key := range s.Targets {
		if strings.HasPrefix(key, "inventory_") && !covered[key] {
			t.Errorf("target %s has no pair in invTargetPairs", key)
		}
	}
	if len(invTargetPairs()) != len(covered) {
		t.Errorf("%d pairs for %d targets", len(invTargetPairs()), len(covered))
	}
}
