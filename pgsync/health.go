package pgsync

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
)

// Probe timing of [dbHealth]: while the database answers it is pinged
// every probeUp (the cheap periodic check that notices an outage when
// nothing needs landing), while it does not every probeDown, so landing
// resumes promptly after it comes back. A ping gets at most probeTimeout:
// a hung server (SIGSTOP, a dead host) counts as down.
const (
	probeUp      = time.Second
	probeDown    = 200 * time.Millisecond
	probeTimeout = 2 * time.Second
)

// dbHealth follows whether PostgreSQL answers, from the outcome of every
// statement the syncer runs (landing, positions, the settle pass) and of
// a periodic ping. It drives shardis_sync_database_up and [Syncer.DatabaseUp],
// logs each outage twice (when it is first seen, and when the database
// answers again, with how long it lasted), and wakes the workers waiting
// out a database failure as soon as it answers again.
//
// States: up (the last outcome was an answer) and down (the last outcome
// was a failure to reach the server, since the first failure of the
// outage). Only a success moves down → up and only an unreachable-class
// error moves up → down; an error the server itself answered (a PgError of
// any class but connection, resources, operator intervention or system
// error) is an answer: the database is reachable. An outcome counts only
// if its operation started after the last change of state: the syncer's
// operations run concurrently and end in any order, so one that began
// before an outage was seen may still succeed after (a statement on a
// connection the shutting-down server had not terminated yet), and one
// that began before a recovery may still fail after it. Counted, either
// made the state flap (an outage logged over, 5 ms after it began, while
// PostgreSQL shut down: TestSyncDatabaseOutage, under load). And an
// outage lasts at least probeDown: only an operation that started that
// long after it was seen can end it. A server shutting down terminates
// its sessions one by one, so a statement that starts after the first
// failure, on a session not terminated yet, still succeeds for a few ms
// (an outage logged over 9 ms after it began: ci431, idle).
type dbHealth struct {
	log   *slog.Logger
	gauge prometheus.Gauge

	mu      sync.Mutex
	down    bool
	changed time.Time     // when the state last changed (zero: never)
	since   time.Time     // first failure of the current outage
	fails   int           // failures seen during it
	woken   chan struct{} // closed when the database answers again
}

func newDBHealth(log *slog.Logger, gauge prometheus.Gauge) *dbHealth {
	h := &dbHealth{log: log, gauge: gauge, woken: make(chan struct{})}
	close(h.woken)
	gauge.Set(1)
	return h
}

// observe records the outcome of one database operation, which started
// at started. A cancellation (the syncer closing) says nothing about the
// database, nor does an outcome that would change the state but whose
// operation started before its last change, nor a success of one that
// started less than probeDown after an outage was seen (see the type).
func (h *dbHealth) observe(err error, started time.Time) {
	if errors.Is(err, context.Canceled) {
		return
	}
	if answered(err) {
		err = nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	stale := started.Before(h.changed)
	switch {
	case err == nil && h.down && !stale && started.Sub(h.changed) >= probeDown:
		h.down, h.changed = false, time.Now()
		h.gauge.Set(1)
		close(h.woken)
		h.log.Info("PostgreSQL answers again: landing resumes", "after", time.Since(h.since).Round(time.Millisecond), "failures", h.fails)
	case err != nil && !h.down && !stale:
		h.down, h.since, h.fails = true, time.Now(), 1
		h.changed = h.since
		h.gauge.Set(0)
		h.woken = make(chan struct{})
		h.log.Warn("PostgreSQL unreachable: landing and settling paused (nothing is acknowledged), probing it every "+probeDown.String(), "err", err)
	case err != nil:
		h.fails++
	}
}

// up reports whether the database answered the last operation.
func (h *dbHealth) up() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.down
}

// wait waits up to d, or less when the database is down and answers again
// meanwhile; it reports whether ctx is still live.
func (h *dbHealth) wait(ctx context.Context, d time.Duration) bool {
	h.mu.Lock()
	woken := h.woken
	if !h.down {
		woken = nil // up: a plain wait
	}
	h.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-woken:
	}
	return true
}

// answered reports whether err is a reply of the server itself (so the
// database is reachable), not a failure to reach it or a server that
// cannot serve (connection exception, insufficient resources, operator
// intervention such as a shutdown or "starting up", system error).
func answered(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || len(pe.Code) < 2 {
		return false
	}
	switch pe.Code[:2] {
	case "08", "53", "57", "58":
		return false
	}
	return true
}

// probeLoop pings the database until ctx is done: every probeUp while it
// answers, every probeDown while it does not.
func (s *Syncer) probeLoop(ctx context.Context) {
	for {
		d := probeUp
		if !s.health.up() {
			d = probeDown
		}
		if !sleep(ctx, d) {
			return
		}
		pctx, cancel := context.WithTimeout(ctx, min(probeTimeout, s.set.StepTimeout))
		started := time.Now()
		err := s.pool.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		s.health.observe(err, started)
	}
}
