package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/shardis/shardis/config"

	"github.com/shardis/shardis/internal/pgproc"
	"github.com/shardis/shardis/internal/stack"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/pgsync"
)

// The system of record (Options.Sync): a PostgreSQL server and a
// `shardis sync` instance (stack.OpenSync, its configuration the run's,
// every node named, the spare included) land the redo log while the
// clients and the nemesis run. After healing, once the sync reports no
// lag and no pending row on any node, the database is held against the
// nodes:
//
//   - sync-caught-up: every node's redo log landed and no row is pending
//     (every part settled on the nodes is settled in the database); a
//     status that could not be read (after retries with longer timeouts)
//     or that lists no node is a violation too, never a pass;
//   - sync-confirmed: per node and SKU, the confirmed rows' quantities add
//     up to the node's confirmed counter (no sale missing, none twice);
//     on a node accepted after a rollback, the database holding more
//     confirmed units than the node is excused (it keeps the sales the
//     node lost, as it should), never the database holding fewer (sales
//     the node acknowledged that never landed);
//   - sync-part: once it caught up, every stock part a node holds
//     confirmed or cancelled has the row the sync's contract gives it,
//     with the part's state and quantity (sync_parts.go);
//   - sync-seen-confirmed: an order a client saw confirmed has confirmed
//     rows for all its items' quantities; sync-seen-cancelled and
//     sync-never-confirmed: one a client saw cancelled, or that no client
//     ever confirmed, has none.

// syncDB is the database name of a run's sync.
const syncDB = "shardis"

// syncCatchUp bounds the wait for the sync after healing.
const syncCatchUp = 60 * time.Second

// recordSync is a run's system of record: the server and the sync.
type recordSync struct {
	pg  *pgproc.Server
	log *slog.Logger

	mu sync.Mutex // guards st: restart replaces it
	st *stack.Sync

	// quiesced: what quiesce saw (check reads it instead of waiting again)
	quiesced  bool
	caught    []pgsync.NodeStatus
	caughtAll bool
	caughtErr error // the last status read's error, if it failed
}

// startSync starts PostgreSQL and a sync instance over the run's
// configuration, and starts the sync.
func startSync(c *cluster, log *slog.Logger, out io.Writer) (*recordSync, error) {
	pg, err := pgproc.Start(pgproc.Options{Password: "chaos", KillWithParent: true})
	if err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := pg.CreateDatabase(ctx, syncDB); err != nil {
		_ = pg.Close()
		return nil, fmt.Errorf("chaos: %w", err)
	}
	s := &recordSync{pg: pg, log: log}
	if s.st, err = s.open(ctx, c.config()); err != nil {
		_ = pg.Close()
		return nil, err
	}
	fmt.Fprintf(out, "  sync: PostgreSQL %s, database %s, shardis sync restarted with every topology change\n", pg.Addr(), syncDB)
	return s, nil
}

// open starts a sync instance over configuration run.
func (s *recordSync) open(ctx context.Context, run *config.Config) (*stack.Sync, error) {
	cfg := *run
	cfg.Sync.DSN = s.pg.DSN(syncDB)
	cfg.Sync.Listen = ""
	st, err := stack.OpenSync(ctx, &cfg, stack.SyncOptions{Logger: s.log, Migrate: true})
	if err != nil {
		return nil, fmt.Errorf("chaos: sync: %w", err)
	}
	st.Syncer.Start()
	return st, nil
}

// restart replaces the sync instance with one over run, as an operator
// restarts `shardis sync` with a topology change's configuration.
func (s *recordSync) restart(run *config.Config) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := s.open(ctx, run)
	if err != nil {
		s.st = nil
		return err
	}
	s.st = st
	return nil
}

// current returns the sync instance, nil after a failed restart.
func (s *recordSync) current() *stack.Sync {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

// close stops the sync and the server.
func (s *recordSync) close() error {
	if st := s.current(); st != nil {
		st.Close()
	}
	return s.pg.Close()
}

// status reads the sync status of every node (pgsync.Status) within
// timeout.
func (s *recordSync) status(timeout time.Duration) ([]pgsync.NodeStatus, error) {
	st := s.current()
	if st == nil {
		return nil, errors.New("chaos: the sync did not restart")
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return pgsync.Status(ctx, st.Inventory, st.Pool)
}

// Status reads start with statusTimeout; each failed one doubles it, up
// to statusTimeoutMax (a loaded machine, a database busy landing).
const (
	statusTimeout    = 5 * time.Second
	statusTimeoutMax = 30 * time.Second
)

// caughtUp reports whether a node's sync status shows its redo log
// landed with no row pending.
func caughtUp(n pgsync.NodeStatus) bool { return n.Err == "" && n.Lag == 0 && n.Pending == 0 }

// waitStatus reads the sync status every 250 ms until done says so of it
// or timeout passes (a read under way when it passes is let finish); it
// returns the last statuses, whether done said so, and the last read's
// error (nil statuses then).
func (s *recordSync) waitStatus(timeout time.Duration, done func([]pgsync.NodeStatus) bool) ([]pgsync.NodeStatus, bool, error) {
	deadline := time.Now().Add(timeout)
	readTimeout := statusTimeout
	for {
		sts, err := s.status(readTimeout)
		if err == nil && done(sts) {
			return sts, true, nil
		}
		if err != nil {
			readTimeout = min(2*readTimeout, statusTimeoutMax)
		}
		if time.Now().After(deadline) {
			return sts, false, err
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// waitNode waits up to timeout until node is caught up.
func (s *recordSync) waitNode(node string, timeout time.Duration) bool {
	_, ok, _ := s.waitStatus(timeout, func(sts []pgsync.NodeStatus) bool {
		for _, n := range sts {
			if n.Node == node && caughtUp(n) {
				return true
			}
		}
		return false
	})
	return ok
}

// waitCaughtUp waits up to syncCatchUp until every node is caught up; it
// returns the last statuses, whether they were, and the last read's error.
func (s *recordSync) waitCaughtUp() ([]pgsync.NodeStatus, bool, error) {
	return s.waitStatus(syncCatchUp, func(sts []pgsync.NodeStatus) bool {
		for _, n := range sts {
			if !caughtUp(n) {
				return false
			}
		}
		return len(sts) > 0
	})
}

// quiesce waits until the sync caught up (or syncCatchUp passes), then
// stops its workers, keeping its database pool and its inventory for
// check: from then on nothing acknowledges the redo logs, so the service's
// reconciler, which trims what is acknowledged, soon has nothing left to
// trim, and the nodes' queues and acknowledged offsets read after it agree
// (seed 421: the sync, still landing what a node's rollback had
// un-acknowledged, let 200 entries be trimmed between the service's read
// and the nodes'; checkRedoRead allows for a trim of what was acknowledged
// before, seed 447).
func (s *recordSync) quiesce() {
	s.caught, s.caughtAll, s.caughtErr = s.waitCaughtUp()
	s.quiesced = true
	if st := s.current(); st != nil {
		st.Syncer.Close()
	}
}

// syncSums are the database's rows of one node and stock key.
type syncSums struct{ confirmed int64 }

// check holds the database against the nodes' state st and the orders
// the clients saw (the package comment above).
func (s *recordSync) check(rep *Report, st *state, orders []*order) error {
	sts, err := s.caught, s.caughtErr
	if !s.quiesced {
		sts, _, err = s.waitCaughtUp()
	}
	caught := checkCaughtUp(rep, sts, err)
	syn := s.current()
	if syn == nil {
		rep.violate("sync-caught-up", "the sync did not restart after a topology change")
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := syn.Pool.Query(ctx, `SELECT node, route, sku, state, sum(quantity), count(*)
		FROM stock_movements GROUP BY node, route, sku, state`)
	if err != nil {
		return fmt.Errorf("chaos: reading stock_movements: %w", err)
	}
	sums := map[string]map[string]*syncSums{} // node → stock key → sums
	var total int64
	for rows.Next() {
		var nd, route, sku, state string
		var qty, n int64
		if err := rows.Scan(&nd, &route, &sku, &state, &qty, &n); err != nil {
			rows.Close()
			return fmt.Errorf("chaos: reading stock_movements: %w", err)
		}
		total += n
		if sums[nd] == nil {
			sums[nd] = map[string]*syncSums{}
		}
		key := inventory.StockKey(route, sku)
		if sums[nd][key] == nil {
			sums[nd][key] = &syncSums{}
		}
		if state == string(inventory.PartConfirmed) {
			sums[nd][key].confirmed += qty
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("chaos: reading stock_movements: %w", err)
	}
	rep.note("sync: %d rows in stock_movements", total)
	checkSyncedStock(rep, st, sums)
	if caught {
		parts, err := readSyncRows(ctx, syn.Pool)
		if err != nil {
			return err
		}
		checkSyncedParts(rep, st, parts)
	} else {
		rep.note("sync: rows not compared part by part: the sync did not catch up (sync-caught-up)")
	}
	return checkSeenConfirmed(ctx, syn, rep, orders)
}

// checkCaughtUp holds the sync's last status read after healing (sts, or
// the read's error err) against sync-caught-up: every node it lists is
// caught up. A read that failed, or that lists no node, says nothing of
// the database: a violation as well. It reports whether the status shows
// every node caught up.
func checkCaughtUp(rep *Report, sts []pgsync.NodeStatus, err error) bool {
	switch {
	case err != nil:
		rep.violate("sync-caught-up", "the sync status could not be read for %v after healing: %v", syncCatchUp, err)
		return false
	case len(sts) == 0:
		rep.violate("sync-caught-up", "the sync status after healing lists no node")
		return false
	}
	all := true
	for _, n := range sts {
		if !caughtUp(n) {
			rep.violate("sync-caught-up", "node %s: lag %d, pending rows %d, error %q %v after healing",
				n.Node, n.Lag, n.Pending, n.Err, syncCatchUp)
			all = false
		}
	}
	return all
}

// checkSyncedStock compares, per node and stock key, the confirmed rows
// with the node's confirmed counter. Only more confirmed in the database
// than on the node is what a node's loss explains (violateOnLostNode).
func checkSyncedStock(rep *Report, st *state, sums map[string]map[string]*syncSums) {
	for _, name := range st.names {
		ns := st.nodes[name]
		seen := map[string]bool{}
		for key, f := range ns.stock {
			seen[key] = true
			var db syncSums
			if s := sums[name][key]; s != nil {
				db = *s
			}
			if c := atoi(f["confirmed"]); c != db.confirmed {
				rep.violateOnLostNode(name, db.confirmed > c, "sync-confirmed", "node %s: %s: confirmed %d on the node, %d in stock_movements",
					name, key, c, db.confirmed)
			}
		}
		for key, s := range sums[name] {
			if !seen[key] && s.confirmed != 0 {
				rep.violateOnLostNode(name, s.confirmed > 0, "sync-confirmed", "node %s: %s: no counter on the node, %d confirmed in stock_movements",
					name, key, s.confirmed)
			}
		}
	}
}

// checkSeenConfirmed reads the confirmed rows of every order and holds
// them against what the clients saw (checkOrderRows).
func checkSeenConfirmed(ctx context.Context, st *stack.Sync, rep *Report, orders []*order) error {
	rows, err := st.Pool.Query(ctx, `SELECT order_id, route, sku, sum(quantity) FROM stock_movements
		WHERE state = 'confirmed' GROUP BY order_id, route, sku`)
	if err != nil {
		return fmt.Errorf("chaos: reading stock_movements: %w", err)
	}
	confirmed := map[string]map[string]int64{} // order id → stock key → units
	for rows.Next() {
		var id, route, sku string
		var qty int64
		if err := rows.Scan(&id, &route, &sku, &qty); err != nil {
			rows.Close()
			return fmt.Errorf("chaos: reading stock_movements: %w", err)
		}
		if confirmed[id] == nil {
			confirmed[id] = map[string]int64{}
		}
		confirmed[id][inventory.StockKey(route, sku)] = qty
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("chaos: reading stock_movements: %w", err)
	}
	checkOrderRows(rep, orders, confirmed)
	return nil
}

// checkOrderRows holds the confirmed rows of each order (order id →
// stock key → units) against what the clients saw: an order seen
// confirmed has rows for all its items' units, one seen cancelled or
// never confirmed by a client has none.
func checkOrderRows(rep *Report, orders []*order, confirmed map[string]map[string]int64) {
	for _, o := range orders {
		o.mu.Lock()
		seenConfirmed, seenCancelled, issued := o.confirmedBy, o.cancelledBy, o.confirmIssued
		o.mu.Unlock()
		got := confirmed[o.ID]
		switch {
		case seenConfirmed != "":
			want := map[string]int64{}
			for _, it := range o.Items {
				want[inventory.StockKey(it.Route, it.SKU)] += it.Qty
			}
			for key, q := range want {
				if got[key] != q {
					rep.violate("sync-seen-confirmed", "order %s: a client saw it confirmed; %s: %d confirmed in stock_movements, ordered %d",
						o.ID, key, got[key], q)
				}
			}
		case len(got) > 0 && seenCancelled != "":
			rep.violate("sync-seen-cancelled", "order %s: a client saw %q; stock_movements holds confirmed rows %v", o.ID, seenCancelled, got)
		case len(got) > 0 && !issued:
			rep.violate("sync-never-confirmed", "order %s was never confirmed by a client; stock_movements holds confirmed rows %v", o.ID, got)
		}
	}
}
