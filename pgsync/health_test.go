package pgsync

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestHealthIgnoresOutcomesOfOperationsFromBeforeAChange: the syncer's
// operations end in any order, so a success of an operation that started
// before the outage was seen does not end it, and a failure of one that
// started before the recovery does not begin another; the same outcomes of
// operations started after the change do, a success only from probeDown
// into the outage on.
func TestHealthIgnoresOutcomesOfOperationsFromBeforeAChange(t *testing.T) {
	gauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: "up"})
	h := newDBHealth(slog.New(slog.DiscardHandler), gauge)
	unreachable := errors.New("dial tcp: connection refused")
	state := func(want bool, when string) {
		t.Helper()
		if h.up() != want || (sumOf(gauge) == 1) != want {
			t.Fatalf("%s: up %v, gauge %v; want up %v", when, h.up(), sumOf(gauge), want)
		}
	}
	early := time.Now()
	time.Sleep(time.Millisecond)
	h.observe(unreachable, time.Now())
	state(false, "after a failure")
	h.observe(nil, early)
	state(false, "after a success of an operation started before the outage")
	h.observe(nil, h.changed.Add(probeDown-time.Millisecond))
	state(false, "after a success of an operation started less than probeDown into the outage (a session a shutting-down server has not terminated yet)")
	h.observe(nil, h.changed.Add(probeDown))
	state(true, "after a success of an operation started probeDown into the outage")
	h.observe(unreachable, early)
	state(true, "after a failure of an operation started before the recovery")
	h.observe(unreachable, time.Now())
	state(false, "after a failure of an operation started after the recovery")
	if h.fails != 1 {
		t.Errorf("failures counted in the second outage: %d, want 1", h.fails)
	}
}
