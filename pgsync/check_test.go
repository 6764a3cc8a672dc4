package pgsync_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/pgsync"
)

// mismatches compares the database with the nodes and says what differs:
// every stock part every node holds must be one row with the node's
// state, quantity, SKU, route, order, queue and offset, under the node's
// current incarnation (unless it is in oldIncarnations: a row of an
// incarnation the node left); no row may name a part the node does not
// hold, except rows of old incarnations; the database's confirmed and
// pending totals per SKU over the nodes' current incarnations must equal
// the nodes' confirmed and reserved counters; and every position must be at its queue's head. skus lists the
// (route, sku) pairs to total.
func (e *env) mismatches(ctx context.Context, skus [][2]string, oldIncarnations map[string]bool) ([]string, error) {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	type total struct{ confirmed, pending int64 }
	totals := map[[2]string]*total{} // rows of the nodes' current incarnations and of the parts they hold
	recs := map[string]*inventory.OrderRecord{}
	for _, s := range skus {
		totals[s] = &total{}
	}
	for _, name := range e.names {
		n, err := e.stack.Router.Node(name)
		if err != nil {
			return nil, err
		}
		inc := n.Incarnation()
		parts, err := e.nodeParts(ctx, name)
		if err != nil {
			return nil, err
		}
		rows, err := e.dbRows(ctx, name)
		if err != nil {
			return nil, err
		}
		for id, p := range parts {
			r, ok := rows[id]
			switch {
			case !ok && p.state == string(inventory.PartCancelled) && e.refusedAttempt(ctx, recs, p.order, id):
				// given back by an attempt that never became a reservation:
				// left out (doc.go, "Refused attempts")
			case !ok:
				add("%s: part %s (queue %s offset %d, %s) has no row", name, id, p.queue, p.offset, p.state)
			case r.inc != inc && !oldIncarnations[r.inc]:
				add("%s: part %s landed under incarnation %s, node is at %s", name, id, r.inc, inc)
			case r.state != p.state || r.qty != p.qty || r.sku != p.sku || r.route != p.route || r.order != p.order ||
				strconv.Itoa(int(r.queue)) != p.queue || r.offset != p.offset && r.inc == inc:
				add("%s: part %s: row %+v, node %+v", name, id, r, p)
			}
		}
		for id, r := range rows {
			// a part the node hands out again under a later incarnation
			// keeps the row of its first landing
			_, held := parts[id]
			if t := totals[[2]string{r.route, r.sku}]; t != nil && (r.inc == inc || held) {
				switch r.state {
				case "confirmed":
					t.confirmed += r.qty
				case "pending":
					t.pending += r.qty
				}
			}
			if _, ok := parts[id]; !ok && !oldIncarnations[r.inc] {
				add("%s: row of part %s (%+v) names a part the node does not hold", name, id, r)
			}
		}
		fields, err := e.raw[name].HGetAll(ctx, inventory.RedoOffsetsKey).Result()
		if err != nil {
			return nil, err
		}
		heads, err := inventory.RedoHeads(name, fields)
		if err != nil {
			return nil, err
		}
		prow, _ := e.pool.Query(ctx, `SELECT queue, redo_offset FROM sync_positions WHERE node = $1 AND incarnation = $2`, name, inc)
		pos := map[string]int64{}
		var q int32
		var off int64
		if _, err := pgx.ForEachRow(prow, []any{&q, &off}, func() error {
			pos[inventory.RedoLogKey(int(q))] = off
			return nil
		}); err != nil {
			return nil, err
		}
		for key, head := range heads {
			if pos[key] != head {
				add("%s: %s head %d, landed position %d", name, key, head, pos[key])
			}
		}
	}
	for _, rs := range skus {
		lvl, err := e.inv.GetStock(ctx, rs[0], rs[1])
		if err != nil {
			return nil, err
		}
		confirmed, pending := totals[rs].confirmed, totals[rs].pending
		if confirmed != lvl.Confirmed || pending != lvl.Reserved {
			add("%s/%s: database confirmed %d pending %d, nodes confirmed %d reserved %d",
				rs[0], rs[1], confirmed, pending, lvl.Confirmed, lvl.Reserved)
		}
	}
	if len(out) > 20 {
		out = append(out[:20], fmt.Sprintf("… and %d more", len(out)-20))
	}
	return out, nil
}

// refusedAttempt reports whether part id of order was taken by a Reserve
// attempt that never became a reservation, by the order's record on the
// nodes (the live one, else a copy marked moved): none anywhere, or one
// that says so (pgsync.ReasonOf). recs caches the records read during one
// pass (an order's parts share it; a pass over a load's refused attempts
// read every node once per part and ran past its 10 s on a busy machine).
func (e *env) refusedAttempt(ctx context.Context, recs map[string]*inventory.OrderRecord, order, id string) bool {
	live, read := recs[order]
	if !read {
		live = e.orderOnNodes(ctx, order)
		recs[order] = live
	}
	if live == nil {
		return true
	}
	r, ok := pgsync.ReasonOf(*live, pgsync.PartToken(order, id))
	return ok && r == pgsync.ReasonRefused
}

// orderOnNodes reads order's record on every node at once: the live one,
// else a copy marked moved, else nil.
func (e *env) orderOnNodes(ctx context.Context, order string) *inventory.OrderRecord {
	var (
		mu          sync.Mutex
		wg          sync.WaitGroup
		live, moved *inventory.OrderRecord
	)
	for _, c := range e.raw {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := inventory.ReadOrder(ctx, c, order).Fields()
			if err != nil || len(f) == 0 {
				return
			}
			rec, err := inventory.DecodeOrder(order, f)
			if err != nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if rec.Moved == "" {
				live = &rec
			} else {
				moved = &rec
			}
		}()
	}
	wg.Wait()
	if live == nil {
		return moved
	}
	return live
}

// waitConsistent polls mismatches until there are none, and fails the
// test with the last ones after timeout.
func (e *env) waitConsistent(timeout time.Duration, skus [][2]string, old map[string]bool) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	var last []string
	var err error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		last, err = e.mismatches(ctx, skus, old)
		cancel()
		if err == nil && len(last) == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		e.t.Fatalf("database not consistent with the nodes within %v: %v", timeout, err)
	}
	e.t.Fatalf("database not consistent with the nodes within %v:\n  %s", timeout, strings.Join(last, "\n  "))
}
