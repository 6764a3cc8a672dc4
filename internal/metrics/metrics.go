// Package metrics exposes shardis's Prometheus metrics. Counters the
// libraries keep themselves (inventory and reconciler stats, node state)
// are read at scrape time; latencies are observed through router hooks.
package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/rollback"
	"github.com/shardis/shardis/router"
	"github.com/shardis/shardis/topology"
)

// Metrics owns a registry with every shardis metric. Create it before the
// router (its hooks go into router.Options), then Bind the rest.
type Metrics struct {
	// Registry holds every collector; serve it with promhttp.HandlerFor.
	Registry *prometheus.Registry

	commandSeconds  *prometheus.HistogramVec
	commandFailures *prometheus.CounterVec
	probeFailures   *prometheus.CounterVec
	probeSeconds    *prometheus.HistogramVec
	stateChanges    *prometheus.CounterVec
	rpc             *rpcMetrics

	mu  sync.Mutex // guards the bound sources
	r   *router.Router
	inv *inventory.Inventory
	rec *rollback.Reconciler
}

// New returns Metrics with a fresh registry (Go and process collectors
// included).
func New() *Metrics {
	m := &Metrics{Registry: prometheus.NewRegistry()}
	m.commandSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "shardis_command_duration_seconds",
		Help:    "Duration of Redis commands and pipelines that reached a node.",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
	}, []string{"node"})
	m.commandFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shardis_command_failures_total",
		Help: "Commands that failed because of the node (network, timeout, LOADING/BUSY).",
	}, []string{"node"})
	m.probeFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shardis_probe_failures_total",
		Help: "Health probes that failed.",
	}, []string{"node"})
	m.probeSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "shardis_probe_duration_seconds",
		Help:    "Duration of health probes.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
	}, []string{"node"})
	m.stateChanges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shardis_node_state_changes_total",
		Help: "Node state changes, by new state.",
	}, []string{"node", "state"})
	m.rpc = newRPCMetrics(m.Registry)
	m.Registry.MustRegister(m.commandSeconds, m.commandFailures, m.probeFailures, m.probeSeconds, m.stateChanges,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), (*collector)(m))
	return m
}

// ObserveCommand is a router.Options.ObserveCommand hook.
func (m *Metrics) ObserveCommand(nodeName string, d time.Duration, failure bool) {
	m.commandSeconds.WithLabelValues(nodeName).Observe(d.Seconds())
	if failure {
		m.commandFailures.WithLabelValues(nodeName).Inc()
	}
}

// OnProbe is a router.Options.OnProbe hook.
func (m *Metrics) OnProbe(nodeName string, d time.Duration, err error) {
	m.probeSeconds.WithLabelValues(nodeName).Observe(d.Seconds())
	if err != nil {
		m.probeFailures.WithLabelValues(nodeName).Inc()
	}
}

// OnStateChange counts a node state change.
func (m *Metrics) OnStateChange(nodeName string, up bool) {
	state := "down"
	if up {
		state = "up"
	}
	m.stateChanges.WithLabelValues(nodeName, state).Inc()
}

// Bind sets the sources read at scrape time. Any may be nil. The failure
// counters of every node of r are created at 0, so an alert on their rate
// works before the first failure.
func (m *Metrics) Bind(r *router.Router, inv *inventory.Inventory, rec *rollback.Reconciler) {
	if r != nil {
		for _, n := range r.Nodes() {
			m.commandFailures.WithLabelValues(n.Name())
			m.probeFailures.WithLabelValues(n.Name())
			m.stateChanges.WithLabelValues(n.Name(), "up")
			m.stateChanges.WithLabelValues(n.Name(), "down")
		}
	}
	m.mu.Lock()
	m.r, m.inv, m.rec = r, inv, rec
	m.mu.Unlock()
}

// collector reads library state at scrape time.
type collector Metrics

var (
	descNodeUp      = prometheus.NewDesc("shardis_node_up", "1 when the node is UP, 0 when DOWN.", []string{"node"}, nil)
	descEvicting    = prometheus.NewDesc("shardis_node_evicting", "1 when the node's maxmemory-policy can evict keys (not used for inventory data).", []string{"node"}, nil)
	descDurable     = prometheus.NewDesc("shardis_node_persistence_safe", "1 when the node runs AOF with appendfsync always and aof-load-truncated no, 0 otherwise or unknown.", []string{"node"}, nil)
	descBreaker     = prometheus.NewDesc("shardis_node_breaker_state", "Breaker state: 0 closed, 1 half-open, 2 open.", []string{"node"}, nil)
	descFailedProbe = prometheus.NewDesc("shardis_node_consecutive_failed_probes", "Consecutive failed probes of the node.", []string{"node"}, nil)
	descReserve     = prometheus.NewDesc("shardis_reservations_total", "Reserve calls by outcome.", []string{"outcome"}, nil)
	descRolledBack  = prometheus.NewDesc("shardis_parts_rolled_back_total", "Parts cancelled by failed Reserve calls.", nil, nil)
	descDeferred    = prometheus.NewDesc("shardis_parts_deferred_total", "Parts whose settle was deferred because their node was unreachable.", nil, nil)
	descReservePath = prometheus.NewDesc("shardis_reserve_fast_path_total",
		"Reserve calls by fast path: local (one script on the order's home node), staged (one round: staged record and parallel takes), staged_fallback (a one-round attempt rolled back, then the general path), staged_recovered (staged orders a reader committed), staged_refused (refused for good in one round: per-user limit, limited SKU without a user), refused_unwritten (refused by reads alone, nothing written), refused_fenced (refused after the reads behind a failed record, nothing else written).", []string{"path"}, nil)
	descGroupSent = prometheus.NewDesc("shardis_group_commit_script_calls_total",
		"Script calls of the grouped inventory scripts (reserve, order record, settle) sent to nodes; each carries one or more orders' calls (group commit).", nil, nil)
	descGroupCalls = prometheus.NewDesc("shardis_group_commit_calls_total",
		"Calls of the grouped inventory scripts carried by those script calls: divided by shardis_group_commit_script_calls_total, the mean group size.", nil, nil)
	descCarried = prometheus.NewDesc("shardis_carried_commits_total",
		"One-round reservations' commits applied by a write script call they rode on to the order's home node instead of a call of their own.", nil, nil)
	descPeekSent = prometheus.NewDesc("shardis_refusal_read_script_calls_total",
		"Read-only script calls sent to nodes to check orders before refusing them without a write (a sold-out SKU); each carries one or more orders' reads.", nil, nil)
	descPeekReads = prometheus.NewDesc("shardis_refusal_reads_total",
		"Orders' reads carried by those script calls: divided by shardis_refusal_read_script_calls_total, the mean batch size.", nil, nil)
	descQueue       = prometheus.NewDesc("shardis_deferred_parts", "Deferred parts waiting for their node.", nil, nil)
	descReconciled  = prometheus.NewDesc("shardis_reconciler_parts_total", "Expired parts the reconciler settled (cancelled, confirmed), set aside as stuck (set_aside) or retried once repaired (stuck_retried), by action.", []string{"action"}, nil)
	descRedoLen     = prometheus.NewDesc("shardis_redo_log_entries", "Entries in all redo-log queues of the node.", []string{"node"}, nil)
	descRedoUnacked = prometheus.NewDesc("shardis_redo_unacked_entries",
		"Redo-log entries of the node (all queues) no consumer has acknowledged (AckRedoLog): the database-sync backlog.", []string{"node"}, nil)
	descUnbalanced = prometheus.NewDesc("shardis_unbalanced_stock_counters",
		"Stock hashes on the node whose available + reserved + confirmed did not equal loaded (or held a negative or non-integer field) when the reconciler last audited its server process: 0 is the only healthy value (SECURITY.md, Persistence).", []string{"node"}, nil)
	descStuck = prometheus.NewDesc("shardis_stuck_parts",
		"Parts set aside on the node because they cannot be settled (shardis parts stuck).", []string{"node"}, nil)
	descTopoEpoch = prometheus.NewDesc("shardis_topology_epoch",
		"The inventory nodes' topology epoch as this instance last read it (0: unknown).", nil, nil)
	descTopoReady = prometheus.NewDesc("shardis_topology_ready",
		"1 when this instance acts at the nodes' topology; 0 when it cannot (a node the applied topology needs is missing from its configuration, or no node could be read and it had no ready view to keep acting on): it refuses inventory calls.", nil, nil)
	descTopoPending = prometheus.NewDesc("shardis_topology_config_pending",
		"1 when this instance's configuration differs from the topology applied on the nodes: it serves the applied one until shardis topology apply runs (the difference is in /readyz and the log).", nil, nil)
	descTopoMigrating = prometheus.NewDesc("shardis_topology_migrating",
		"1 while a topology change is still moving order records or counters (shardis topology apply not finished).", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descNodeUp, descEvicting, descDurable, descBreaker, descFailedProbe, descReserve, descReservePath, descGroupSent, descGroupCalls, descCarried, descPeekSent, descPeekReads, descRolledBack,
		descDeferred, descQueue, descReconciled, descRedoLen, descRedoUnacked, descStuck, descUnbalanced,
		descTopoEpoch, descTopoReady, descTopoMigrating, descTopoPending} {
		ch <- d
	}
}

// nodeReadTimeout bounds the reads of one node's gauges in a scrape. Each
// node has its own: with one budget for every node, a scrape on a loaded
// machine ran out of it before the last node's reads, and that node's
// gauges were missing from /metrics (TestSvcHealthMetricsUnavailable).
const nodeReadTimeout = 500 * time.Millisecond

// collectNode sends node name's redo-log, unacknowledged and stuck
// gauges; one whose read fails or times out is left out of the scrape.
func collectNode(ch chan<- prometheus.Metric, inv *inventory.Inventory, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), nodeReadTimeout)
	defer cancel()
	if k, err := inv.RedoLogLen(ctx, name); err == nil {
		ch <- prometheus.MustNewConstMetric(descRedoLen, prometheus.GaugeValue, float64(k), name)
	}
	if k, err := inv.RedoUnacked(ctx, name); err == nil {
		ch <- prometheus.MustNewConstMetric(descRedoUnacked, prometheus.GaugeValue, float64(k), name)
	}
	if k, err := inv.StuckCount(ctx, name); err == nil {
		ch <- prometheus.MustNewConstMetric(descStuck, prometheus.GaugeValue, float64(k), name)
	}
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	r, inv, rec := c.r, c.inv, c.rec
	c.mu.Unlock()
	if r != nil {
		for _, st := range r.Status() {
			up := 0.0
			if st.State == node.StateUp {
				up = 1
			}
			ch <- prometheus.MustNewConstMetric(descNodeUp, prometheus.GaugeValue, up, st.Name)
			ch <- prometheus.MustNewConstMetric(descEvicting, prometheus.GaugeValue, b2f(st.Settings.Evicts()), st.Name)
			ch <- prometheus.MustNewConstMetric(descDurable, prometheus.GaugeValue, b2f(st.Settings.Safe()), st.Name)
			ch <- prometheus.MustNewConstMetric(descBreaker, prometheus.GaugeValue, breakerValue(st.Breaker), st.Name)
			ch <- prometheus.MustNewConstMetric(descFailedProbe, prometheus.GaugeValue, float64(st.FailedProbes), st.Name)
		}
	}
	if inv != nil {
		s := inv.Stats()
		for outcome, n := range s.Reservations {
			ch <- prometheus.MustNewConstMetric(descReserve, prometheus.CounterValue, float64(n), outcome)
		}
		ch <- prometheus.MustNewConstMetric(descRolledBack, prometheus.CounterValue, float64(s.PartsRolledBack))
		ch <- prometheus.MustNewConstMetric(descDeferred, prometheus.CounterValue, float64(s.PartsDeferred))
		for path, n := range map[string]int64{"local": s.LocalReservations, "staged": s.StagedReservations,
			"staged_fallback": s.StagedFallbacks, "staged_recovered": s.StagedRecovered, "staged_refused": s.StagedRefusals,
			"refused_unwritten": s.RefusedUnwritten, "refused_fenced": s.RefusedFenced} {
			ch <- prometheus.MustNewConstMetric(descReservePath, prometheus.CounterValue, float64(n), path)
		}
		ch <- prometheus.MustNewConstMetric(descGroupSent, prometheus.CounterValue, float64(s.GroupScriptCalls))
		ch <- prometheus.MustNewConstMetric(descGroupCalls, prometheus.CounterValue, float64(s.GroupedCalls))
		ch <- prometheus.MustNewConstMetric(descCarried, prometheus.CounterValue, float64(s.CarriedCommits))
		ch <- prometheus.MustNewConstMetric(descPeekSent, prometheus.CounterValue, float64(s.RefusalReadScripts))
		ch <- prometheus.MustNewConstMetric(descPeekReads, prometheus.CounterValue, float64(s.RefusalReads))
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		ts := inv.TopologyStatus(ctx)
		ch <- prometheus.MustNewConstMetric(descTopoEpoch, prometheus.GaugeValue, float64(ts.Epoch))
		ch <- prometheus.MustNewConstMetric(descTopoReady, prometheus.GaugeValue, b2f(ts.Ready))
		ch <- prometheus.MustNewConstMetric(descTopoMigrating, prometheus.GaugeValue, b2f(ts.Ready && ts.Phase == topology.PhaseMigrating))
		ch <- prometheus.MustNewConstMetric(descTopoPending, prometheus.GaugeValue, b2f(ts.Ready && ts.Pending != ""))
		for _, n := range inv.Nodes() {
			if n.Usable() {
				collectNode(ch, inv, n.Name())
			}
		}
	}
	if rec != nil {
		s := rec.Stats()
		ch <- prometheus.MustNewConstMetric(descReconciled, prometheus.CounterValue, float64(s.Cancelled), "cancelled")
		ch <- prometheus.MustNewConstMetric(descReconciled, prometheus.CounterValue, float64(s.Confirmed), "confirmed")
		ch <- prometheus.MustNewConstMetric(descReconciled, prometheus.CounterValue, float64(s.SetAside), "set_aside")
		ch <- prometheus.MustNewConstMetric(descReconciled, prometheus.CounterValue, float64(s.Retried), "stuck_retried")
		ch <- prometheus.MustNewConstMetric(descQueue, prometheus.GaugeValue, float64(s.QueueLength))
		for name, bad := range rec.Unbalanced() {
			ch <- prometheus.MustNewConstMetric(descUnbalanced, prometheus.GaugeValue, float64(bad), name)
		}
	}
}

func breakerValue(s string) float64 {
	switch s {
	case "open":
		return 2
	case "half-open":
		return 1
	}
	return 0
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
