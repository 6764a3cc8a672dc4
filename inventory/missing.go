package inventory

import (
	"context"
	"fmt"

	"github.com/shardis/shardis/node"
)

// A SKU's stock hash deleted on a node (DEL by hand, a bad FLUSHDB filter)
// while parts there still hold units of it cannot be told from a SKU never
// loaded there by its counters alone: both read as zero. The parts tell
// them apart: each stock part records its stock hash (field `counter`).
//
//   - Settling such a part is refused before any write (settleScript:
//     SHARDIS_NOSTOCK, [ErrStockMissing]); the reconciler sets the part
//     aside once it is due, with a reason naming the missing hash, instead
//     of failing on it every pass.
//   - GetStock counts, on a node whose hash is missing, the pending parts
//     that reference it (stockRefsScript) and reports them in that node's
//     [NodeStock] instead of "reachable, loaded 0, no error".
//
// The count reads the node's stuck index (parts set aside: few), and its
// pending index only when another node of the route holds the SKU's hash
// (the SKU exists; a SKU no node holds is either unknown or deleted
// everywhere, and GetStock of unknown SKUs must stay cheap). Each index is
// read up to refsScanLimit entries, so a count is a lower bound on a node
// with more parts than that; a part whose record cannot be read (corrupt)
// is not counted either.

// refsScanLimit is the most entries of one index stockRefsScript reads.
const refsScanLimit = 10000

// stockRefsScript counts pending parts on a node that hold units of a
// stock hash that does not exist there.
//
// KEYS: 1 stamp, 2 stock hash, 3 pending index, 4 stuck index. ARGV: 4
// "1" to read the pending index too, 5 the most entries read per index.
// Returns {count, truncated}: 0 parts when the hash exists (again);
// truncated is 1 when an index held more entries than were read.
var stockRefsScript = newScript("stock-refs", false, luaFile("stock_refs.lua"))

// missingStock returns the error GetStock reports for node n, whose stock
// hash of route/sku does not exist: nil when no pending part references
// the hash, else one wrapping [ErrStockMissing] with the count. scanPending
// says whether the pending index is read too (see the file comment).
func (inv *Inventory) missingStock(ctx context.Context, n *node.Node, route, sku string, scanPending bool) (int64, error) {
	key := stockKey(route, sku)
	flag := "0"
	if scanPending {
		flag = "1"
	}
	raw, err := inv.run(ctx, n, stockRefsScript, []string{key, PendingKey, keyStuck}, flag, refsScanLimit)
	if err != nil {
		return 0, err
	}
	v, err := asInt64s(n, stockRefsScript, raw)
	if err == nil && len(v) != 2 {
		err = malformed(n, stockRefsScript, raw, "a list of 2 integers {parts counted, truncated 0/1}")
	}
	if err != nil || v[0] == 0 {
		return 0, err
	}
	atLeast := ""
	if v[1] == 1 {
		atLeast = "at least "
	}
	return v[0], fmt.Errorf("%w: node %s: SKU %q's stock hash %q is missing while %s%d pending part(s) reference it "+
		"(restore the hash's counters, then `shardis parts retry --sku %q`)",
		ErrStockMissing, n.Name(), sku, key, atLeast, v[0], sku)
}

// flagMissing sets Err and MissingParts of every reachable node in nodes
// (read by GetStock: ns[i] is nodes[i], exists[i] whether its stock hash
// exists) whose stock hash is missing while pending parts reference it.
// A node that fails the count keeps its counters and gets the error.
func (inv *Inventory) flagMissing(ctx context.Context, nodes []*node.Node, route, sku string, exists []bool, ns []NodeStock) {
	elsewhere := false
	for _, e := range exists {
		elsewhere = elsewhere || e
	}
	atOnce(len(nodes), func(i int) {
		if !exists[i] && ns[i].Reachable {
			ns[i].MissingParts, ns[i].Err = inv.missingStock(ctx, nodes[i], route, sku, elsewhere)
		}
	})
}
