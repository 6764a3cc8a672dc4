package bench

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardis/shardis/internal/pgproc"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/pgsync"
)

// SyncResult is the sync section: `shardis sync` (package pgsync, shipped
// settings) landing the redo log in a local PostgreSQL (fsync on) while
// the inventory reserves at its full rate, then draining a backlog.
type SyncResult struct {
	Conc int // concurrent goroutines of the reserve load (Plan.Conc)
	// Window is how long the reserve load ran with the sync running.
	Window time.Duration
	// ReserveOps is that load's 1-item reserves per second (each one
	// part).
	ReserveOps float64
	// Parts is the parts the load handed out in the window.
	Parts int64
	// Drain is how long after the load stopped the last part landed.
	Drain time.Duration
	// LandedPerSec is Parts over Window plus Drain.
	LandedPerSec float64
	// Lag is from a deduction (node clock) to its landing transaction
	// (PostgreSQL clock, same machine), over every part of the window.
	LagP50, LagP99, LagMax time.Duration
	// CPUPerPart is the sync process's CPU (user + system) per part
	// landed in the live run, from start to the last part landed.
	CPUPerPart time.Duration
	// RunsP99 is every live run's p99 lag, in the order they ran, when
	// the plan ran more than one (Plan.SyncRuns): the fields above are
	// the run with the median of them.
	RunsP99 []time.Duration
	// BacklogParts were reserved with no sync running.
	BacklogParts int64
	// BacklogPerSec is how fast (parts/s) a sync started afterwards
	// landed them: its capacity.
	BacklogPerSec float64
	// KeepsUp: the sync drained within a second of the load stopping and
	// its p99 lag stayed under a second.
	KeepsUp bool
}

// syncSKUs is how many SKUs the sync section's orders pick from.
const syncSKUs = 16

// RunSync measures the sync section over c's nodes with a PostgreSQL of
// its own.
func RunSync(ctx context.Context, c *Cluster, p Plan, progress func(string)) (*SyncResult, error) {
	pg, err := pgproc.Start(pgproc.Options{Durable: true, KillWithParent: true})
	if err != nil {
		return nil, err
	}
	defer pg.Close()
	if err := pg.CreateDatabase(ctx, "shardis"); err != nil {
		return nil, err
	}
	pool, err := pgxpool.New(ctx, pg.DSN("shardis"))
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if _, _, err := pgsync.Migrate(ctx, pool); err != nil {
		return nil, err
	}
	items := make([][]inventory.Item, syncSKUs)
	for k := range items {
		items[k] = []inventory.Item{{Route: routeAll, SKU: "sync-" + strconv.Itoa(k), Quantity: 1}}
	}
	reserve := func(w *Worker) error {
		_, err := c.Inv.Reserve(ctx, orderID(w, 'y'), items[w.Rng.IntN(syncSKUs)], "", 0)
		return err
	}
	fresh := func() error {
		return retrySetup(c.Router.Nodes(), func() error {
			if err := c.Reset(ctx); err != nil {
				return err
			}
			if _, err := pool.Exec(ctx, "TRUNCATE stock_movements, sync_positions, sync_incarnations, sync_gaps"); err != nil {
				return err
			}
			for _, it := range items {
				if _, err := c.Inv.LoadStock(ctx, routeAll, it[0].SKU, inventory.MaxQuantity, 0); err != nil {
					return err
				}
			}
			return nil
		})
	}
	startSync := func() (*childProc, error) { return startSyncProc(c.Addrs, pg.DSN("shardis"), p.SyncProfile) }
	load := NewLoad(p.Conc, 7)

	// Live: the sync runs while the inventory reserves at full rate. A
	// tail lag is one run's: it moves from run to run (a full run read
	// 1,056 ms where four runs of the section alone read 646-722 ms), so
	// the plan may run it several times and report the median one.
	runs := max(p.SyncRuns, 1)
	var lives []*SyncResult
	for range runs {
		if err := fresh(); err != nil {
			return nil, err
		}
		live, err := syncLive(ctx, c, pool, p, load, reserve, startSync)
		if err != nil {
			return live, err
		}
		progress(fmt.Sprintf("sync: %.0f reserves/s for %v, %d parts landed at %.0f/s, drained %v after the load, lag p50 %v p99 %v",
			live.ReserveOps, p.SyncFor, live.Parts, live.LandedPerSec, live.Drain.Round(time.Millisecond), live.LagP50, live.LagP99))
		lives = append(lives, live)
	}
	res := medianLive(lives)

	// Backlog: parts reserved with no sync, then landed as fast as it can.
	if err := fresh(); err != nil {
		return res, err
	}
	load.Run(p.SyncBacklog, reserve)
	t0 := time.Now()
	s, err := startSync()
	if err != nil {
		return res, err
	}
	res.BacklogParts, err = waitLanded(ctx, c, pool, 60*time.Second)
	took := time.Since(t0)
	s.Stop()
	if err != nil {
		return res, err
	}
	res.BacklogPerSec = float64(res.BacklogParts) / took.Seconds()
	progress(fmt.Sprintf("sync: a backlog of %d parts landed in %v (%.0f parts/s)", res.BacklogParts, took.Round(time.Millisecond), res.BacklogPerSec))
	return res, nil
}

// syncLive runs the reserve load for p.SyncFor with a sync started by
// startSync, waits until every part landed, and measures it.
func syncLive(ctx context.Context, c *Cluster, pool *pgxpool.Pool, p Plan, load *Load, reserve Op, startSync func() (*childProc, error)) (*SyncResult, error) {
	res := &SyncResult{Conc: p.Conc, Window: p.SyncFor}
	s, err := startSync()
	if err != nil {
		return res, err
	}
	sample := load.Run(p.SyncFor, reserve)
	stopped := time.Now()
	res.ReserveOps = sample.OpsPerSec()
	heads, err := waitLanded(ctx, c, pool, 30*time.Second)
	res.Drain = time.Since(stopped)
	cpu := ticks(procTicks(s.Pid()))
	s.Stop()
	if err != nil {
		return res, err
	}
	res.Parts = heads
	if heads > 0 {
		res.CPUPerPart = cpu / time.Duration(heads)
	}
	res.LandedPerSec = float64(heads) / (sample.Elapsed + res.Drain).Seconds()
	var p50, p99, pmax float64
	if err := pool.QueryRow(ctx, `SELECT
  coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM landed_at - reserved_at)), 0),
  coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM landed_at - reserved_at)), 0),
  coalesce(max(extract(epoch FROM landed_at - reserved_at)), 0)::float8
FROM stock_movements`).Scan(&p50, &p99, &pmax); err != nil {
		return res, err
	}
	res.LagP50, res.LagP99, res.LagMax = secs(p50), secs(p99), secs(pmax)
	res.KeepsUp = res.Drain <= time.Second && res.LagP99 <= time.Second
	return res, nil
}

// medianLive is the live run with the median p99 lag (the upper one of
// an even count), with every run's p99 in RunsP99 when there are several.
func medianLive(lives []*SyncResult) *SyncResult {
	byLag := slices.Clone(lives)
	slices.SortStableFunc(byLag, func(a, b *SyncResult) int { return cmp.Compare(a.LagP99, b.LagP99) })
	res := *byLag[len(byLag)/2]
	if len(lives) > 1 {
		for _, l := range lives {
			res.RunsP99 = append(res.RunsP99, l.LagP99)
		}
	}
	return &res
}

func secs(s float64) time.Duration {
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond)
}

// waitLanded waits until the committed positions add up to the nodes' redo
// heads, and returns that total (every part handed out).
func waitLanded(ctx context.Context, c *Cluster, pool *pgxpool.Pool, limit time.Duration) (int64, error) {
	deadline := time.Now().Add(limit)
	for {
		var heads int64
		for _, a := range c.Admin {
			fields, err := a.HGetAll(ctx, inventory.RedoOffsetsKey).Result()
			if err != nil {
				return 0, err
			}
			hs, err := inventory.RedoHeads(a.Options().Addr, fields)
			if err != nil {
				return 0, err
			}
			for _, n := range hs {
				heads += n
			}
		}
		var landed int64
		if err := pool.QueryRow(ctx, "SELECT coalesce(sum(redo_offset), 0)::bigint FROM sync_positions").Scan(&landed); err != nil {
			return 0, err
		}
		if landed == heads {
			return heads, nil
		}
		if time.Now().After(deadline) {
			return heads, fmt.Errorf("sync: %d of %d parts landed after %v", landed, heads, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// syncRunsNote says how the live figures were chosen when the live run
// was made more than once ("" otherwise).
func syncRunsNote(sr *SyncResult) string {
	if len(sr.RunsP99) < 2 {
		return ""
	}
	return fmt.Sprintf(" The live run was made %d times, each from empty nodes and tables; the table gives the one with the median p99 lag.", len(sr.RunsP99))
}

// SyncTable renders the sync section.
func SyncTable(sr *SyncResult) string {
	var b strings.Builder
	b.WriteString("| | |\n| --- | --- |\n")
	fmt.Fprintf(&b, "| reserve rate while the sync ran (1-item orders = parts/s) | %s |\n", fmtOps(sr.ReserveOps))
	fmt.Fprintf(&b, "| parts landed per second (window + drain) | %s |\n", fmtOps(sr.LandedPerSec))
	fmt.Fprintf(&b, "| drained after the load stopped | %s |\n", fmtMs(sr.Drain))
	if sr.CPUPerPart > 0 {
		fmt.Fprintf(&b, "| the sync process's CPU per part landed | %.1f µs |\n", float64(sr.CPUPerPart)/float64(time.Microsecond))
	}
	fmt.Fprintf(&b, "| end-to-end lag p50 / p99 / max | %s / %s / %s |\n", fmtMs(sr.LagP50), fmtMs(sr.LagP99), fmtMs(sr.LagMax))
	if len(sr.RunsP99) > 1 {
		ps := make([]string, len(sr.RunsP99))
		for i, d := range sr.RunsP99 {
			ps[i] = fmtMs(d)
		}
		fmt.Fprintf(&b, "| live runs (the median one above), p99 lag of each | %d: %s |\n", len(sr.RunsP99), strings.Join(ps, ", "))
	}
	fmt.Fprintf(&b, "| backlog of %s parts landed at | %s parts/s |\n", fmtOps(float64(sr.BacklogParts)), fmtOps(sr.BacklogPerSec))
	fmt.Fprintf(&b, "| keeps up (drain ≤ 1 s, lag p99 ≤ 1 s) | %v |\n", sr.KeepsUp)
	return b.String()
}
