package inventory

import (
	"errors"
	"strings"
	"testing"
)

// A LoadStock that a node refused for good, over real nodes, keeps the
// refusal's class and does not say a retry may help: a corrupt counter
// (SHARDIS_CORRUPT) wraps ErrCorrupt, a stock that would pass 2^53
// (SHARDIS_RANGE) ErrInvalid, neither ErrUnavailable; each, retried, fails
// alike. Before, both wrapped ErrUnavailable alone and said "no unit was
// added: the same call may be retried".
func TestLoadStockRefusedForGoodKeepsItsClass(t *testing.T) {
	t.Parallel()
	e := newStagedEnv(t) // routes a, b, c on n1, n2, n3, each holding sku s
	for _, c := range []struct {
		route, node, available string
		want                   error
	}{
		{"a", "n1", "garbage", ErrCorrupt},
		{"b", "n2", "9007199254740000", ErrInvalid},
	} {
		if err := e.clients[c.node].HSet(e.ctx, stockKey(c.route, "s"), "available", c.available).Err(); err != nil {
			t.Fatal(err)
		}
		for try := range 2 {
			_, err := e.inv.LoadStock(e.ctx, c.route, "s", 5, -1)
			if !errors.Is(err, c.want) || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrPartlyApplied) {
				t.Errorf("route %s, try %d: LoadStock over available %q = %v; want %v, not ErrUnavailable or ErrPartlyApplied",
					c.route, try, c.available, err, c.want)
			}
			if err != nil && (strings.Contains(err.Error(), "may be retried") || !strings.Contains(err.Error(), "no unit was added")) {
				t.Errorf("route %s: %q should say no unit was added, and not that a retry may help", c.route, err)
			}
		}
	}
}
