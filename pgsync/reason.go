package pgsync

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/inventory"
)

// CancelReason is why a part was cancelled: stock_movements.reason of a
// cancelled row. A part record holds only its state (the settle script
// writes "cancelled" for every cause); the cause is the decision recorded
// on its order's record, on the order's home node (inventory.OrderRecord:
// status, token, reason), which the sync reads when it writes the
// cancelled state.
type CancelReason string

// The reasons. A cancelled row whose order record could not be read (its
// home node down, or the record gone after inventory.retention) has none
// (NULL), as has every row that is not cancelled.
const (
	// ReasonCancelled: the order was cancelled (Cancel) by the same
	// attempt that took the part.
	ReasonCancelled CancelReason = "cancelled"
	// ReasonExpired: the reservation ran past its deadline (TTL): the
	// reconciler, or a Confirm that came too late, cancelled the order.
	ReasonExpired CancelReason = "expired"
	// ReasonRefused: the Reserve attempt that took the part never became
	// a reservation (it failed, e.g. it raced others for the last units,
	// or a later attempt took the order over): the part was given back.
	ReasonRefused CancelReason = "refused"
)

// reasonOf decides a cancelled part's reason from its order's record
// (ok false: no record found). token is the attempt that took the part.
func reasonOf(rec inventory.OrderRecord, token string) (CancelReason, bool) {
	if rec.Token != token {
		return ReasonRefused, true // another attempt holds the order
	}
	switch rec.Status {
	case inventory.OrderCancelled:
		switch rec.Reason {
		case string(ReasonExpired):
			return ReasonExpired, true
		case string(ReasonCancelled):
			return ReasonCancelled, true
		}
	case inventory.OrderFailed, inventory.OrderReserving, inventory.OrderStaging:
		return ReasonRefused, true // the attempt gave its parts back
	}
	return "", false
}

// partToken returns the attempt token in a part id (order|token|…), ""
// when id does not follow order.
func partToken(order, id string) string {
	rest, ok := strings.CutPrefix(id, order+"|")
	if !ok {
		return ""
	}
	tok, _, _ := strings.Cut(rest, "|")
	return tok
}

// reasonTimeout bounds the reading of order records for one batch: a
// reason is worth a short wait, never a stalled landing.
const reasonTimeout = 2 * time.Second

// cancelReasons reads the order record of each cancelled part (parts:
// part id → order id) from every usable node (the record is on its home
// node; a copy a topology change moved away is marked moved and skipped)
// and returns each part's reason. A part whose record is not found, or
// not readable, has none: the landing goes on without it.
func (s *Syncer) cancelReasons(ctx context.Context, parts map[string]string) map[string]CancelReason {
	out := map[string]CancelReason{}
	if len(parts) == 0 {
		return out
	}
	orders := map[string]bool{}
	for _, o := range parts {
		orders[o] = true
	}
	ctx, cancel := context.WithTimeout(ctx, reasonTimeout)
	defer cancel()
	recs := map[string]inventory.OrderRecord{}
	for _, n := range s.inv.Nodes() {
		if !n.Usable() {
			continue
		}
		cmds := map[string]*inventory.OrderRead{}
		_, _ = n.Client().Pipelined(ctx, func(p redis.Pipeliner) error {
			for o := range orders {
				if _, found := recs[o]; !found {
					cmds[o] = inventory.ReadOrder(ctx, p, o) // either layout
				}
			}
			return nil
		})
		for o, c := range cmds {
			f, err := c.Fields()
			if err != nil || len(f) == 0 {
				continue
			}
			if rec, err := inventory.DecodeOrder(o, f); err == nil && rec.Moved == "" {
				recs[o] = rec
			}
		}
	}
	for id, o := range parts {
		if rec, found := recs[o]; found {
			if r, ok := reasonOf(rec, partToken(o, id)); ok {
				out[id] = r
			}
		}
	}
	return out
}

// reasonText is the column value of a reason ("" → NULL).
func reasonText(r CancelReason) pgtype.Text {
	return pgtype.Text{String: string(r), Valid: r != ""}
}
