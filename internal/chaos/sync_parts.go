package chaos

import (
	"context"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardis/shardis/inventory"
)

// The per-part comparison of the system of record (Options.Sync): once
// the sync caught up, every stock part a node still holds in a final
// state (confirmed, cancelled) has the row the sync's contract gives it
// (pgsync's package comment): one row per (node, part id), its state and
// quantity the part's. Parts a node no longer holds (trimmed past
// inventory.retention, or lost) are not compared, nor quota parts and
// tombstones, which have no redo-log entry and so no row.
//
//   - a confirmed part has a row;
//   - a cancelled part has one unless the sync left it out as a refused
//     attempt's (pgsync, "Refused attempts"): its order's record names
//     another attempt, says the attempt failed or is still deciding, is a
//     Cancel's tombstone, or is on no node (refusedAttempt);
//   - the row's state and quantity are the part's. On a node accepted
//     after a rollback, a row landed from an earlier incarnation of the
//     node may keep a state its lost writes gave it (a settled row stays
//     as it is when the node hands the part out again): excused there,
//     and only there.

// syncRow is one stock_movements row as checkSyncedParts reads it.
type syncRow struct {
	incarnation string
	state       string
	qty         int64
}

// readSyncRows reads every stock_movements row: node → part id → row.
func readSyncRows(ctx context.Context, pool *pgxpool.Pool) (map[string]map[string]syncRow, error) {
	rows, err := pool.Query(ctx, `SELECT node, part_id, incarnation, state, quantity FROM stock_movements`)
	if err != nil {
		return nil, fmt.Errorf("chaos: reading stock_movements rows: %w", err)
	}
	defer rows.Close()
	out := map[string]map[string]syncRow{}
	for rows.Next() {
		var node, part string
		var r syncRow
		if err := rows.Scan(&node, &part, &r.incarnation, &r.state, &r.qty); err != nil {
			return nil, fmt.Errorf("chaos: reading stock_movements rows: %w", err)
		}
		if out[node] == nil {
			out[node] = map[string]syncRow{}
		}
		out[node][part] = r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("chaos: reading stock_movements rows: %w", err)
	}
	return out, nil
}

// checkSyncedParts holds every final stock part of every node against its
// row in rows (node → part id → row), as the file comment says.
func checkSyncedParts(rep *Report, st *state, rows map[string]map[string]syncRow) {
	recs := liveRecords(st)
	for _, name := range st.names {
		ns := st.nodes[name]
		ids := make([]string, 0, len(ns.parts))
		for id := range ns.parts {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			p := ns.parts[id]
			if p.Kind != inventory.PartStock || p.Tombstone || p.State == inventory.PartPending {
				continue
			}
			checkSyncedPart(rep, ns, p, rows[name], recs[p.Order])
		}
	}
}

// checkSyncedPart holds final stock part p of node ns against its row in
// rows (the node's rows by part id); rec is its order's live record (nil:
// none).
func checkSyncedPart(rep *Report, ns *nodeState, p *inventory.PartRecord, rows map[string]syncRow, rec *inventory.OrderRecord) {
	row, ok := rows[p.ID]
	switch {
	case !ok && (p.State == inventory.PartConfirmed || !refusedAttempt(rec, p.Token)):
		rep.violate("sync-part", "node %s: part %s of order %s is %s (qty %d), no row in stock_movements", ns.name, p.ID, p.Order, p.State, p.Qty)
	case !ok:
	case row.state != string(p.State) || row.qty != p.Qty:
		rep.violateOnLostNode(ns.name, row.incarnation != ns.incarnation, "sync-part",
			"node %s: part %s of order %s is %s (qty %d, incarnation %s), its row %s (qty %d, incarnation %s)",
			ns.name, p.ID, p.Order, p.State, p.Qty, ns.incarnation, row.state, row.qty, row.incarnation)
	}
}

// refusedAttempt reports whether the sync leaves a cancelled part of
// attempt token out (pgsync's reasonOf giving ReasonRefused) when its
// order's live record is rec (nil: on no node).
func refusedAttempt(rec *inventory.OrderRecord, token string) bool {
	if rec == nil || rec.Token != token {
		return true
	}
	switch rec.Status {
	case inventory.OrderFailed, inventory.OrderReserving, inventory.OrderStaging:
		return true
	case inventory.OrderCancelled:
		return rec.Reason == inventory.ReasonTombstone
	}
	return false
}

// liveRecords returns every order's record that no topology change moved
// away, by order id (the first node's, by name, if several hold one:
// checkOrder reports that).
func liveRecords(st *state) map[string]*inventory.OrderRecord {
	recs := map[string]*inventory.OrderRecord{}
	for _, name := range st.names {
		for id, r := range st.nodes[name].orders {
			if r.Moved == "" && recs[id] == nil {
				recs[id] = r
			}
		}
	}
	return recs
}
