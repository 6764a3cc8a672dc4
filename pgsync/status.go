package pgsync

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardis/shardis/inventory"
)

// NodeStatus is the sync's view of one node: its current incarnation as
// the node reports it, the queues with anything in them, and every
// incarnation the database holds rows of.
type NodeStatus struct {
	// Node is the node's configured name.
	Node string `json:"node"`
	// Incarnation is the node's current stamp incarnation as the node
	// reports it; "" when it could not be read (see Err).
	Incarnation string `json:"incarnation"`
	// Generation is the node's current stamp generation (its acceptance
	// generation) as the node reports it.
	Generation int64 `json:"generation"`
	// Err says why the node or the database could not be read ("" when
	// they could).
	Err string `json:"error,omitempty"`
	// Lag is the sum of the queues' lag (entries not landed yet).
	Lag int64 `json:"lag"`
	// Pending is the sum of the queues' landed parts still pending.
	Pending int64 `json:"pending"`
	// Queues lists the current incarnation's queues with anything in
	// them (a head, a landed position or pending parts), by queue number.
	Queues []QueueStatus `json:"queues"`
	// Incarnations lists what the database landed of each incarnation,
	// oldest first.
	Incarnations []IncarnationStatus `json:"incarnations"`
	// Gaps lists the redo-log ranges of the node that were trimmed
	// before they landed (table sync_gaps), oldest first: entries the
	// database will never have. Empty when nothing was lost.
	Gaps []GapStatus `json:"gaps,omitempty"`
}

// GapStatus is one range of a queue's redo log trimmed before it landed:
// offsets First..Last of the incarnation, Missing of them never landed
// (no row; for a node accepted with its data, past what its earlier
// incarnations landed too).
type GapStatus struct {
	Incarnation string    `json:"incarnation"` // the node incarnation the offsets belong to
	Queue       int       `json:"queue"`       // the redo-log queue number
	First       int64     `json:"first"`       // the first offset of the trimmed range
	Last        int64     `json:"last"`        // the last offset of the trimmed range (inclusive)
	Missing     int64     `json:"missing"`     // how many offsets of First..Last never landed
	FoundAt     time.Time `json:"found_at"`    // when the sync recorded the gap (database clock)
}

// QueueStatus is one queue of a node's current incarnation.
type QueueStatus struct {
	// Queue is the redo-log queue number.
	Queue int `json:"queue"`
	// Head is the last offset the queue handed out; 0 when none.
	Head int64 `json:"head"`
	// Acked is the offset the node holds as acknowledged.
	Acked int64 `json:"acked"`
	// Landed is the committed position: the offset of the last entry the
	// database landed (table sync_positions); 0 when none.
	Landed int64 `json:"landed"`
	// Lag is Head - Landed: entries not landed yet.
	Lag int64 `json:"lag"`
	// Pending counts landed parts still pending (re-checked until settled).
	Pending int64 `json:"pending"`
	// Rewound is set when the queue went back under the landed position
	// (the sync pauses it).
	Rewound bool `json:"rewound,omitempty"`
	// Problem, for a queue with lag, says why the entry right past the
	// landed position cannot be landed: its part record is on the node
	// but cannot be read (inventory.RedoProblem: offset, part, key, why).
	// The sync lands the queue up to it and waits there until the record
	// is repaired. "" when that entry can be read.
	Problem string `json:"problem,omitempty"`
}

// IncarnationStatus is what the database holds of one incarnation.
type IncarnationStatus struct {
	Incarnation string    `json:"incarnation"` // the node's stamp incarnation
	Generation  int64     `json:"generation"`  // the stamp generation the sync first read it at
	FirstSeen   time.Time `json:"first_seen"`  // when the sync first recorded it (database clock)
	Rows        int64     `json:"rows"`        // stock_movements rows landed of it
	Pending     int64     `json:"pending"`     // of those rows, the ones still pending
}

// Status reads, for every node of inv, the redo log's heads from the node
// (every queue it holds, also those past inv's inventory.redo_queues,
// which the sync lands too) and the positions and rows from the database. A node or a database that
// cannot be read gives a NodeStatus with Err set; Status fails only when
// ctx does.
func Status(ctx context.Context, inv *inventory.Inventory, pool *pgxpool.Pool) ([]NodeStatus, error) {
	var out []NodeStatus
	for _, n := range inv.Nodes() {
		st := NodeStatus{Node: n.Name()}
		if err := nodeStatus(ctx, inv, pool, &st); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			st.Err = err.Error()
		}
		out = append(out, st)
	}
	return out, nil
}

func nodeStatus(ctx context.Context, inv *inventory.Inventory, pool *pgxpool.Pool, st *NodeStatus) error {
	rows, _ := pool.Query(ctx, `SELECT i.incarnation, i.generation, i.first_seen,
  (SELECT count(*) FROM stock_movements m WHERE m.node = i.node AND m.incarnation = i.incarnation),
  (SELECT count(*) FROM stock_movements m WHERE m.node = i.node AND m.incarnation = i.incarnation AND m.state = 'pending')
FROM sync_incarnations i WHERE i.node = $1 ORDER BY i.first_seen`, st.Node)
	var err error
	st.Incarnations, err = pgx.CollectRows(rows, pgx.RowToStructByPos[IncarnationStatus])
	if err != nil {
		return err
	}
	rows, _ = pool.Query(ctx, `SELECT incarnation, queue, first_offset, last_offset, missing, found_at
FROM sync_gaps WHERE node = $1 ORDER BY found_at, queue, first_offset`, st.Node)
	if st.Gaps, err = pgx.CollectRows(rows, pgx.RowToStructByPos[GapStatus]); err != nil {
		return err
	}
	b, err := inv.ReadRedoBatch(ctx, st.Node, "", nil, 1, 0)
	if err != nil {
		return err
	}
	st.Incarnation, st.Generation = b.Incarnation, b.Generation
	landed := map[int]cursor{}
	pending := map[int]int64{}
	rows, _ = pool.Query(ctx, `SELECT queue, redo_offset, part_id FROM sync_positions WHERE node = $1 AND incarnation = $2`,
		st.Node, st.Incarnation)
	var q int32
	var c cursor
	if _, err := pgx.ForEachRow(rows, []any{&q, &c.off, &c.part}, func() error {
		landed[int(q)] = c
		return nil
	}); err != nil {
		return err
	}
	rows, _ = pool.Query(ctx, `SELECT queue, count(*) FROM stock_movements
WHERE node = $1 AND incarnation = $2 AND state = 'pending' GROUP BY queue`, st.Node, st.Incarnation)
	var cnt int64
	if _, err := pgx.ForEachRow(rows, []any{&q, &cnt}, func() error {
		pending[int(q)] = cnt
		return nil
	}); err != nil {
		return err
	}
	// every queue the node holds (those of a larger redo_queues too,
	// which the sync lands: queues.go) and every one landed
	n, err := inv.RedoQueuesHeld(ctx, st.Node)
	if err != nil {
		return err
	}
	n = max(n, inv.RedoQueues())
	for q := range landed {
		n = max(n, q+1)
	}
	cursors := make([]inventory.RedoCursor, n)
	for i := range cursors {
		cursors[i] = inventory.RedoCursor{Queue: i, After: landed[i].off, PartID: landed[i].part}
	}
	b, err = inv.ReadRedoBatch(ctx, st.Node, st.Incarnation, cursors, 1, 0)
	if err != nil {
		return err
	}
	for _, r := range b.Queues {
		qs := QueueStatus{Queue: r.Queue, Head: r.Head, Acked: r.Acked, Landed: landed[r.Queue].off,
			Pending: pending[r.Queue], Rewound: r.Rewound}
		qs.Lag = max(qs.Head-qs.Landed, 0)
		if qs.Head == 0 && qs.Landed == 0 && qs.Pending == 0 {
			continue
		}
		if qs.Lag > 0 && !qs.Rewound {
			// advisory: a read that fails (a replica catching up with
			// durability replica, a node gone since) leaves it empty
			// rather than failing the node's status; the landing itself
			// logs and counts the problem (unreadable.go)
			qs.Problem = queueProblem(ctx, inv, st.Node, st.Incarnation, cursors[r.Queue])
		}
		st.Lag += qs.Lag
		st.Pending += qs.Pending
		st.Queues = append(st.Queues, qs)
	}
	return nil
}

// queueProblem reads the entry of node past cursor c (incarnation inc)
// and returns why its part record cannot be read: "" when it can, when
// the node is at another incarnation now, or when the read failed.
func queueProblem(ctx context.Context, inv *inventory.Inventory, node, inc string, c inventory.RedoCursor) string {
	b, err := inv.ReadRedoBatch(ctx, node, inc, []inventory.RedoCursor{c}, 1, 0)
	if err != nil || len(b.Queues) == 0 || b.Queues[0].Problem == nil {
		return ""
	}
	return b.Queues[0].Problem.String()
}
