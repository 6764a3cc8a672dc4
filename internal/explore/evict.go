package explore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/shardis/shardis/inventory"
)

// The record-loss actor (with the operator actor: operator.go).

// evictPlan is the record-loss actor's draws (with the operator actor,
// in half its schedules): its node, the picks before its step, and which
// of the node's pending part records it deletes (pick, modulo their
// number, in id order; two when both is set).
type evictPlan struct {
	node       string
	wait, pick int
	both       bool
}

// drawEvict draws a record-loss actor's plan.
func drawEvict(s *Scheduler) evictPlan {
	return evictPlan{node: nodesT0[s.Intn(len(nodesT0))], wait: s.Intn(40), pick: s.Intn(1000), both: s.Chance(0.3)}
}

// evict is the record-loss actor: after plan.wait picks, one scheduled
// step deletes one (or two) of the pending part records on plan.node
// while its pending index still lists them, as an eviction or a lost key
// does (README, "A stuck part whose own record is gone"): no counter
// changes, the part's units stay reserved (or counted in its user's
// count), and once due the reconciler sets the part aside for the
// operator, whose SettleStuckLost gives the record's values from the
// system of record (observed.synced holds the rows it synced). Its
// orders are exposed as a data loss's (see the file comment).
func (w *World) evict(o *observed, s *Scheduler, who string, plan evictPlan) func(ctx context.Context) {
	return func(ctx context.Context) {
		s.Pass(ctx, who, plan.wait)
		var rows map[string]inventory.StuckUnits
		err := s.Step(ctx, "evict part records on "+plan.node, func() error {
			var err error
			rows, err = w.evictParts(ctx, plan)
			return err
		})
		var gone []string
		for _, id := range slices.Sorted(maps.Keys(rows)) {
			gone = append(gone, tokenRE.ReplaceAllString(id, "|T|"))
		}
		o.note(who, fmt.Sprintf("delete pending part records %v on %s", gone, plan.node), err)
		o.mu.Lock()
		o.evicted = append(o.evicted, gone...)
		for id, u := range rows {
			o.evictedOrders[orderOfPart(id)] = true
			o.synced[plan.node+" "+id] = u
		}
		o.mu.Unlock()
	}
}

// evictParts deletes plan's pending part records (stock or quota parts:
// an inline part lives in its order's record) and returns, by part id,
// what each held (the row the system of record had synced of it before:
// its route, SKU, units and, for a quota part, user).
func (w *World) evictParts(ctx context.Context, plan evictPlan) (map[string]inventory.StuckUnits, error) {
	c := w.direct[plan.node]
	keys, err := c.Keys(ctx, "inv:*").Result()
	if err != nil {
		return nil, err
	}
	recs := map[string]inventory.PartRecord{}
	var ids []string
	for _, k := range keys {
		kind, id := inventory.ParseKey(k)
		if kind != inventory.KeyPart {
			continue
		}
		f, err := inventory.ReadPart(ctx, c, id).Fields()
		if err != nil {
			continue
		}
		p, err := inventory.DecodePart(id, f)
		if err == nil && p.State == inventory.PartPending && !p.Tombstone {
			recs[id] = p
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	// in the order of the ids with their tokens replaced: the same on
	// every run of the seed
	slices.SortFunc(ids, func(a, b string) int {
		return strings.Compare(tokenRE.ReplaceAllString(a, "|T|"), tokenRE.ReplaceAllString(b, "|T|"))
	})
	pick := []string{ids[plan.pick%len(ids)]}
	if plan.both && len(ids) > 1 {
		pick = append(pick, ids[(plan.pick+1)%len(ids)])
	}
	rows := map[string]inventory.StuckUnits{}
	for _, id := range pick {
		p := recs[id]
		u := inventory.StuckUnits{SKU: p.SKU, Quantity: p.Qty}
		if p.Kind == inventory.PartQuota {
			u.Route, _, u.User, err = inventory.ParseQuotaKey(p.Counter)
		} else {
			u.Route, _, err = inventory.ParseStockKey(p.Counter)
		}
		if err != nil {
			return rows, err
		}
		if err := c.Del(ctx, inventory.PartKey(id)).Err(); err != nil {
			return rows, err
		}
		rows[id] = u
	}
	return rows, nil
}
