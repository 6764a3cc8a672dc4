package inventory

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A part that cannot be settled (its SKU's counters are corrupt or were
// deleted, its order record is unreadable, a script fails on it every
// time) is set aside: the reconciler moves it from the node's pending index
// (inv:pending) to the node's stuck index (inv:stuck, with the reason in
// inv:stuck:why), so it never holds up other parts and every instance sees
// it. Its stock stays reserved until an operator repairs the data and
// retries it ([Inventory.RetryStuck], `shardis parts retry`), which puts
// it back in the pending index, due now. Nothing retries a stuck part by
// itself: the error that set it aside does not go away without a repair.

// StuckPart is a part set aside on a node.
type StuckPart struct {
	Node    string
	PartID  string
	OrderID string
	SKU     string
	// Quantity is the units the part holds (reserved on its node).
	Quantity int64
	// State is the part's state now ("pending" unless an order decision
	// settled it since), or "missing" when its record is gone.
	State string
	// Since is when the part was set aside, by the node's clock.
	Since time.Time
	// Reason is the error that set it aside.
	Reason string
}

// Unsettleable reports whether err, returned while settling a part, will
// come back on every retry until someone repairs data: a corrupt value or
// malformed reply ([ErrCorrupt]), a deleted stock hash ([ErrStockMissing]),
// or a script that failed on the node (a Lua runtime error, an unknown
// operation). Unreachable nodes, timeouts, other error replies (a node
// loading its data, busy, out of memory, at its client limit) and identity
// or epoch refusals are transient: false.
func Unsettleable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrCorrupt) || errors.Is(err, ErrStockMissing) {
		return true
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := rerr.Error()
	return strings.HasPrefix(msg, "ERR user_script") || strings.HasPrefix(msg, "ERR Error running script") ||
		strings.HasPrefix(msg, "SHARDIS_BADOP")
}

// SetAside moves an expired part out of its node's pending index into the
// node's stuck index with reason (see [StuckPart]). It reports whether it
// moved the part (false: the part was no longer indexed as pending, e.g.
// another instance set it aside first).
func (inv *Inventory) SetAside(ctx context.Context, p PendingPart, reason string) (bool, error) {
	n, err := inv.r.Node(p.Node)
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	v, err := inv.pendingAdjust(ctx, n, "stuck", p.PartID, reason)
	if err != nil {
		return false, err
	}
	moved, err := asInt64(n, pendingAdjustScript, v)
	return moved == 1, err
}

// RetryStuck moves a stuck part of node back into its pending index, due
// now, so the next reconciler pass settles it (or sets it aside again with
// the error it still meets). It reports whether the part was stuck.
func (inv *Inventory) RetryStuck(ctx context.Context, nodeName, partID string) (bool, error) {
	if partID == "" {
		return false, fmt.Errorf("%w: part_id is empty", ErrInvalid)
	}
	n, err := inv.r.Node(nodeName)
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	v, err := inv.pendingAdjust(ctx, n, "retry", partID)
	if err != nil {
		return false, err
	}
	moved, err := asInt64(n, pendingAdjustScript, v)
	return moved == 1, err
}

// StuckParts returns up to limit (1..10000) parts set aside on node, the
// oldest first.
func (inv *Inventory) StuckParts(ctx context.Context, nodeName string, limit int) ([]StuckPart, error) {
	if limit <= 0 || limit > 10000 {
		return nil, fmt.Errorf("%w: limit %d, want 1..10000", ErrInvalid, limit)
	}
	n, err := inv.r.Node(nodeName)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	ids, err := n.Client().ZRangeWithScores(ctx, keyStuck, 0, int64(limit-1)).Result()
	if err != nil {
		return nil, nodeErr(n, err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	pipe := n.Client().Pipeline()
	why := make([]*redis.StringCmd, len(ids))
	rec := make([]*redis.SliceCmd, len(ids))
	for i, z := range ids {
		id, _ := z.Member.(string)
		why[i] = pipe.HGet(ctx, keyStuckWhy, id)
		rec[i] = pipe.HMGet(ctx, partKey(id), "state", "order", "sku", "qty")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, nodeErr(n, err)
	}
	out := make([]StuckPart, len(ids))
	for i, z := range ids {
		sp := StuckPart{Node: n.Name(), Since: time.UnixMilli(int64(z.Score)), State: "missing"}
		sp.PartID, _ = z.Member.(string)
		sp.Reason = why[i].Val()
		if f := rec[i].Val(); len(f) == 4 {
			if st, ok := f[0].(string); ok {
				sp.State = st
			}
			sp.OrderID, _ = f[1].(string)
			sp.SKU, _ = f[2].(string)
			if q, ok := f[3].(string); ok {
				_, _ = fmt.Sscan(q, &sp.Quantity)
			}
		}
		out[i] = sp
	}
	return out, nil
}

// StuckCount returns how many parts are set aside on node.
func (inv *Inventory) StuckCount(ctx context.Context, nodeName string) (int64, error) {
	n, err := inv.r.Node(nodeName)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	v, err := n.Client().ZCard(ctx, keyStuck).Result()
	if err != nil {
		return 0, nodeErr(n, err)
	}
	return v, nil
}
