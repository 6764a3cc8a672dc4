package bench

import (
	"slices"
	"testing"
)

// TestInvRoundOrder holds the inventory rounds' order to its contract:
// every variant of the report's table runs once per round, and each pair
// whose ratio a target names (VsFloor, the minted row over the seed's hot
// row, the sold-out row over the seed's) runs side by side, in both orders
// over two rounds.
func TestInvRoundOrder(t *testing.T) {
	if got, want := slices.Sorted(slices.Values(invRoundOrder)), slices.Sorted(slices.Values(invTableOrder)); !slices.Equal(got, want) {
		t.Fatalf("the round order and the table's hold different variants:\n%q\n%q", got, want)
	}
	pairs := [][2]string{{VarHot1Minted, VarSeedHot1}, {VarSoldOut, VarSeedSoldOut}}
	for _, p := range VsFloor {
		pairs = append(pairs, [2]string{p.Shardis, p.Floor})
	}
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
