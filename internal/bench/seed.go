package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/shardis/shardis/node"
)

// The seed baseline reproduces the shape of the Java seed's stock
// deduction (OrderServiceImpl.deductStock): per item, one EVAL that sends
// the whole script text (no SHA), tried on the route's nodes one after
// another until one deducts; items one after another; when an item cannot
// be met, one rollback EVAL per deducted item, one after another. The
// scripts keep the seed's data layout (a "sku" hash of "units:offset"
// strings, a "queueOffset" hash, "sku_redo_log:N" sorted sets and the
// node's "metadata" redis_id) and its steps, with its bugs fixed: the redo
// entry gets the new offset (the seed wrote the old one), the rollback
// writes "units:offset" back (the seed dropped the colon) and removes the
// redo entry it compensates. They are the seed's, not shardis's scripts:
// no identity stamp, no part records, no order record, no deadline.

// seedDeductScript is KJ_SKU_STOCK_DISTRIBUTED, corrected. KEYS[1] sku id,
// KEYS[2] redo queue; ARGV[1] units, ARGV[2] order item id. Returns
// "redisId:queue:offset", or "" when the node lacks the units.
const seedDeductScript = `-- Check the SKU's units; do not deduct when short.
-- Take the next offset of the SKU's redo-log queue (a hash field, +1),
-- write the order item into the queue's sorted set at that offset,
-- then write the SKU back as "units:offset".
-- Returns redisId:queue:offset, which identifies this deduction.
local skuNumNeed = tonumber(ARGV[1]) or 0
local skuId = KEYS[1]
local skuRedoLogQueue = KEYS[2]
local orderItemId = ARGV[2]
-- the node's id
local redisId = redis.call('hget', 'metadata', 'redis_id')
if not redisId or redisId == '' then
  return ''
end
-- units left; not enough: no deduction
local numStr = redis.call('hget', 'sku', skuId)
if not numStr then
  return ''
end
local num, lastOffset = string.match(numStr, '^(%-?%d+):(%d+)$')
num = tonumber(num) or 0
if num < skuNumNeed then
  return ''
end
-- next offset of the redo-log queue
local offset = redis.call('hincrby', 'queueOffset', skuRedoLogQueue, 1)
-- write the redo log
redis.call('zadd', skuRedoLogQueue, offset, orderItemId)
-- update the SKU
redis.call('hset', 'sku', skuId, (num - skuNumNeed) .. ':' .. offset)
-- uniquely identifies this deduction
return tostring(redisId) .. ':' .. skuRedoLogQueue .. ':' .. offset
`

// seedRollbackScript is ROLLBACK_ORDER_DISTRIBUTED, corrected. KEYS[1] sku
// id, KEYS[2] redo queue; ARGV[1] units, ARGV[2] order item id.
const seedRollbackScript = `-- Give the units of one deduction back and drop its redo-log entry.
local skuId = KEYS[1]
local skuNum = tonumber(ARGV[1]) or 0
local numStr = redis.call('hget', 'sku', skuId)
local num, offset = string.match(numStr or '', '^(%-?%d+):(%d+)$')
num = tonumber(num) or 0
offset = offset or '0'
-- update the SKU
redis.call('hset', 'sku', skuId, (num + skuNum) .. ':' .. offset)
redis.call('zrem', KEYS[2], ARGV[2])
return 0
`

// errSeedShort is returned by a seed order refused by the deduction
// script itself: every node of an item answered that it lacks the units.
var errSeedShort = errors.New("seed: insufficient stock")

// errSeedUnusable is a node of an item skipped as unusable.
var errSeedUnusable = errors.New("seed: node not usable")

// SeedItem is one line of a seed order: a SKU on the nodes of its route,
// tried in configuration order.
type SeedItem struct {
	Nodes []*node.Node // the route's nodes, tried in this order
	SKU   string       // the seed's SKU id (its stock key)
	Qty   int64        // units to deduct
}

// seedQueue is the seed's redo-log queue of a numeric SKU id (sku % 50).
func seedQueue(skuNum int) string { return "sku_redo_log:" + strconv.Itoa(skuNum%50) }

type seedTaken struct {
	n      *node.Node
	item   SeedItem
	itemID string
}

// SeedOrder deducts every item the seed's way and rolls back on failure.
// skuQueue maps a SKU id to its redo queue. Like the seed, it tries an
// item's next node when one fails for any reason; the order's error
// tells the reasons apart: it wraps errSeedShort only when every node of
// the item answered the script's "short" (a refusal), and otherwise the
// nodes' EVAL errors (and errSeedUnusable for a node skipped), which are
// failures, not refusals.
func SeedOrder(ctx context.Context, orderID string, items []SeedItem, skuQueue func(string) string) error {
	taken := make([]seedTaken, 0, len(items))
	for i, it := range items {
		itemID := orderID + ":" + strconv.Itoa(i)
		ok := false
		var failed []error // nodes that did not answer "short"
		for _, n := range it.Nodes {
			if !n.Usable() { // the wrapper's beforeExecute status check
				failed = append(failed, fmt.Errorf("%w: %s", errSeedUnusable, n.Name()))
				continue
			}
			res, err := n.Client().Eval(ctx, seedDeductScript, []string{it.SKU, skuQueue(it.SKU)}, it.Qty, itemID).Text()
			if err != nil {
				failed = append(failed, fmt.Errorf("seed: EVAL on node %s: %w", n.Name(), err))
				continue
			}
			if res == "" {
				continue
			}
			taken = append(taken, seedTaken{n: n, item: it, itemID: itemID})
			ok = true
			break
		}
		if !ok {
			var errs []error
			for _, t := range taken {
				errs = append(errs, t.n.Client().Eval(ctx, seedRollbackScript,
					[]string{t.item.SKU, skuQueue(t.item.SKU)}, t.item.Qty, t.itemID).Err())
			}
			why := fmt.Errorf("%w: item %d (%s)", errSeedShort, i, it.SKU)
			if len(failed) > 0 {
				why = fmt.Errorf("seed: item %d (%s) not deducted: %w", i, it.SKU, errors.Join(failed...))
			}
			return errors.Join(why, errors.Join(errs...))
		}
	}
	return nil
}

// loadSeedStock writes the seed's metadata and a SKU's units on a node.
func loadSeedStock(ctx context.Context, n *node.Node, sku string, units int64) error {
	c := n.Client()
	if err := c.HSet(ctx, "metadata", "redis_id", n.Name()).Err(); err != nil {
		return err
	}
	return c.HSet(ctx, "sku", sku, strconv.FormatInt(units, 10)+":0").Err()
}

// checkSeed verifies the seed baseline on fresh nodes: a 3-item order over
// three nodes deducts and logs each item; an order whose last item is
// short gives the first two back and removes their redo entries.
func checkSeed(ctx context.Context, nodes []*node.Node) error {
	q := func(string) string { return "sku_redo_log:check" }
	for i, n := range nodes {
		if err := loadSeedStock(ctx, n, "chk"+strconv.Itoa(i), 5); err != nil {
			return err
		}
	}
	items := func(last int64) []SeedItem {
		return []SeedItem{
			{Nodes: nodes[0:1], SKU: "chk0", Qty: 2},
			{Nodes: nodes[1:2], SKU: "chk1", Qty: 2},
			{Nodes: nodes[2:3], SKU: "chk2", Qty: last},
		}
	}
	if err := SeedOrder(ctx, "chk-ok", items(2), q); err != nil {
		return fmt.Errorf("seed check: %w", err)
	}
	if err := SeedOrder(ctx, "chk-short", items(4), q); !errors.Is(err, errSeedShort) {
		return fmt.Errorf("seed check: short order: got %v, want insufficient stock", err)
	}
	for i, n := range nodes {
		v, err := n.Client().HGet(ctx, "sku", "chk"+strconv.Itoa(i)).Result()
		if err != nil {
			return err
		}
		entries, err := n.Client().ZRangeWithScores(ctx, "sku_redo_log:check", 0, -1).Result()
		if err != nil {
			return err
		}
		want := "3:2" // deducted twice (offsets 1, 2), the second given back
		if i == 2 {
			want = "3:1" // the short item was never deducted
		}
		if v != want || len(entries) != 1 || entries[0].Member != "chk-ok:"+strconv.Itoa(i) || entries[0].Score != 1 {
			return fmt.Errorf("seed check: node %s holds sku=%q redo=%v after one good and one rolled-back order; want %s and [chk-ok:%d@1]",
				n.Name(), v, entries, want, i)
		}
	}
	return nil
}
