package pgsync

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/topology"
)

// CancelReason is why a part was cancelled: stock_movements.reason of a
// cancelled row. A part record holds only its state (the settle script
// writes "cancelled" for every cause); the cause is the decision recorded
// on its order's record, on the order's home node (inventory.OrderRecord:
// status, token, reason), which the sync reads when it writes the
// cancelled state.
type CancelReason string

// The reasons. A cancelled row whose order record could not be read (a
// node down or slow, or the topology not stable) has none (NULL), as has
// every row that is not cancelled. A record found on no node, every node
// read, reads as [ReasonRefused] (cancelReasons); a reservation's record
// outlives its parts by inventory.retention, so only a sync that lags
// further behind than that reads a reservation's cancelled part so.
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
	// Such a part read cancelled before it landed has no row (doc.go,
	// "Refused attempts"); a row has this reason only when the part landed
	// while pending and was given back later.
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
		case inventory.ReasonExpired:
			return ReasonExpired, true
		case inventory.ReasonCancelled:
			return ReasonCancelled, true
		case inventory.ReasonTombstone:
			// cancelled while it was never reserved (order.lua: a
			// Cancel of a failed record, or of an attempt before its
			// commit): the attempt gave its parts back
			return ReasonRefused, true
		}
	case inventory.OrderFailed, inventory.OrderReserving, inventory.OrderStaging:
		return ReasonRefused, true // the attempt gave its parts back
	}
	return "", false
}

// frozenFinal reports whether a record copy frozen at a topology move
// (rec.Moved) still tells the fate of attempt token's parts: it names that
// attempt and has decided it for good (failed or cancelled, which nothing
// moves back for that token). Any other copy may be behind the live
// record: a reserving attempt commits at the new home, a failed record is
// taken over there by a later attempt of the order id.
func frozenFinal(rec inventory.OrderRecord, token string) bool {
	return rec.Token == token && (rec.Status == inventory.OrderFailed || rec.Status == inventory.OrderCancelled)
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

// cancelledPart is a cancelled part whose reason cancelReasons reads:
// its order, and when it was taken by its node's clock (zero: unknown,
// a row already landed whose reason only labels it).
type cancelledPart struct {
	order string
	at    time.Time
}

// acceptMargin is how long before a part was taken (by its node's clock)
// a node's stamp (by the clock of the process that accepted it) must be
// for the node's data to be known to hold whatever the part's attempt
// wrote there: a generous bound on the skew between the two clocks.
const acceptMargin = time.Minute

// cancelReasons reads the order record of each cancelled part (parts:
// part id → its order and when it was taken) from every usable node (the record is on its home
// node; a copy a topology change moved away is marked moved, and a record
// on a node that is not one of the order's homes is a leftover: either is
// read only when no live one is found, and holds the record's data frozen,
// so it gives a reason only when it has decided the part's attempt for
// good, frozenFinal) and returns each part's reason. A part whose order
// has no record on any node (orderRecords' allRead) is ReasonRefused: its
// attempt's record was withdrawn (a one-round attempt refused after
// taking) or never written, so it never was a reservation (a
// reservation's record outlives its parts, inventory.retention), unless
// a node that may be the order's home was accepted with data it went back
// to (`shardis node accept`) less than acceptMargin before the part was
// taken, or after: the record may have been lost with that node's
// data (a reservation cancelled by its user, its part's row then left
// out: found by a review), and the part has no reason. A part whose
// record is not found while a node could not be read has none: the
// landing goes on without it.
func (s *Syncer) cancelReasons(ctx context.Context, parts map[string]cancelledPart) map[string]CancelReason {
	out := map[string]CancelReason{}
	if len(parts) == 0 {
		return out
	}
	orders := map[string]bool{}
	for _, p := range parts {
		orders[p.order] = true
	}
	ctx, cancel := context.WithTimeout(ctx, reasonTimeout)
	defer cancel()
	recs, allRead := s.orderRecords(ctx, orders)
	var stamps map[string]time.Time // read once, when a part needs them
	for id, p := range parts {
		o := p.order
		rec, found := recs[o]
		switch {
		case found:
			tok := partToken(o, id)
			if rec.frozen && !frozenFinal(rec.OrderRecord, tok) {
				// a copy frozen at a move (or a leftover), read while the
				// live record could not be: the order may have gone on
				// since (a later attempt took a failed record over, an
				// attempt committed): no reason
				continue
			}
			if r, ok := reasonOf(rec.OrderRecord, tok); ok {
				out[id] = r
			}
		case allRead:
			if stamps == nil {
				stamps = s.stampTimes(ctx)
			}
			if !s.homeStampedSince(ctx, stamps, o, p.at.Add(-acceptMargin)) {
				out[id] = ReasonRefused
			}
		}
	}
	return out
}

// stampTimes reads when each usable inventory node was last accepted
// with its data (node.StampKey's stamped_at where its generation, gen, is
// above 0: `shardis node accept` raised it; a node never accepted holds
// every write made since its first stamp, and reads as the zero time); a
// node it cannot read, or whose accept has no such time, is missing.
func (s *Syncer) stampTimes(ctx context.Context) map[string]time.Time {
	out := map[string]time.Time{}
	for _, n := range s.inv.Nodes() {
		if !n.Usable() {
			continue
		}
		v, err := n.Client().HMGet(ctx, node.StampKey, "stamped_at", "gen").Result()
		if err != nil || len(v) != 2 {
			continue
		}
		if gen, _ := v[1].(string); gen == "" || gen == "0" {
			out[n.Name()] = time.Time{}
			continue
		}
		at, _ := v[0].(string)
		if ms, err := strconv.ParseInt(at, 10, 64); err == nil {
			out[n.Name()] = time.UnixMilli(ms)
		}
	}
	return out
}

// homeStampedSince reports whether a node that may hold order's live
// record (every node when its homes are unknown) was accepted at or after
// since, or its accept time is unknown (stamps from stampTimes): the
// order's record may have been lost with the data the node went back to.
// A zero since (the part's time unknown) reports false.
func (s *Syncer) homeStampedSince(ctx context.Context, stamps map[string]time.Time, order string, since time.Time) bool {
	if since.IsZero() || since.Year() < 1971 {
		return false
	}
	homes, ok := s.inv.OrderHomes(ctx, order)
	if !ok {
		homes = nil
		for _, n := range s.inv.Nodes() {
			homes = append(homes, n.Name())
		}
	}
	for _, h := range homes {
		at, known := stamps[h]
		if !known || !at.Before(since) {
			return true
		}
	}
	return false
}

// orderRecords reads the records of orders from every usable inventory
// node: the live one, else a copy marked moved or a leftover away from the
// order's homes (Inventory.OrderHomes: a record a restore or a rejoining
// node brought back onto a node that no longer homes the order, frozen
// where it was left, read as a moved copy). allRead reports that an
// order missing from recs has no record anywhere: this instance acts at
// the nodes' topology, which is stable (no record is still on a node a
// change moved it from, possibly one this configuration no longer names),
// and every inventory node was usable and answered every read.
func (s *Syncer) orderRecords(ctx context.Context, orders map[string]bool) (recs map[string]readRecord, allRead bool) {
	recs = map[string]readRecord{}
	moved := map[string]readRecord{}
	st := s.inv.TopologyStatus(ctx)
	allRead = st.Ready && st.Phase == topology.PhaseStable
	homes := map[string][]string{} // order → nodes its live record may be on
	for o := range orders {
		if h, ok := s.inv.OrderHomes(ctx, o); ok {
			homes[o] = h
		}
	}
	for _, n := range s.inv.Nodes() {
		if !n.Usable() {
			allRead = false
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
			if err != nil {
				allRead = false
				continue
			}
			if len(f) == 0 {
				continue
			}
			rec, err := inventory.DecodeOrder(o, f)
			switch {
			case err != nil:
				allRead = false
			case rec.Moved == "" && atHome(homes, o, n.Name()):
				recs[o] = readRecord{OrderRecord: rec}
			default:
				moved[o] = readRecord{OrderRecord: rec, frozen: true}
			}
		}
	}
	for o, rec := range moved {
		if _, found := recs[o]; !found {
			recs[o] = rec
		}
	}
	return recs, allRead
}

// readRecord is an order record as orderRecords found it: frozen when it
// is a copy a move marked or a leftover away from the order's homes, whose
// data may be behind the order's live record.
type readRecord struct {
	inventory.OrderRecord
	frozen bool
}

// atHome reports whether node may hold order's live record (homes from
// orderRecords; an order whose homes are unknown may be on any node).
func atHome(homes map[string][]string, order, node string) bool {
	h, known := homes[order]
	return !known || slices.Contains(h, node)
}

// skipRefused reports whether entry e stays out of the database (doc.go,
// "Refused attempts"): its part was given back by a Reserve attempt that
// never became a reservation (cancelled, ReasonRefused), and it is read so
// before it ever landed.
func skipRefused(e inventory.RedoEntry, reasons map[string]CancelReason) bool {
	return e.State == string(inventory.PartCancelled) && reasons[e.PartID] == ReasonRefused
}

// reasonText is the column value of a reason ("" → NULL).
func reasonText(r CancelReason) pgtype.Text {
	return pgtype.Text{String: string(r), Valid: r != ""}
}
