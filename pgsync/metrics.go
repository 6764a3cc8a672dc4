package pgsync

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Metrics are the sync's Prometheus metrics. Every per-node counter of
// the configured nodes exists from the start, at 0, so rate alerts work
// before the first event (the gauges of a node's generation, landing
// delay and queue lag appear with their first value).
type Metrics struct {
	landed       *prometheus.CounterVec
	settled      *prometheus.CounterVec
	lag          *prometheus.GaugeVec
	delay        *prometheus.HistogramVec
	errors       *prometheus.CounterVec
	dbUp         prometheus.Gauge
	incarnations *prometheus.CounterVec
	generation   *prometheus.GaugeVec
	trimmed      *prometheus.CounterVec
	rewound      *prometheus.GaugeVec
	unsettled    *prometheus.GaugeVec
	lost         *prometheus.CounterVec
	skipped      *prometheus.CounterVec
	conflicts    *prometheus.CounterVec
	walks        *prometheus.CounterVec
	unreadable   *prometheus.GaugeVec
	// unreadableParts is set by each node's settle goroutine alone
	unreadableParts *prometheus.GaugeVec

	mu          sync.Mutex
	rewoundQ    map[string]map[int]bool // node → queues paused because they went back
	unreadableQ map[string]map[int]bool // node → queues stopped at an unreadable part record
}

// Error stages of shardis_sync_errors_total.
const (
	stageRedis  = "redis"  // reading the redo log or part states
	stageDB     = "db"     // PostgreSQL
	stageAck    = "ack"    // acknowledging in Redis after a commit
	stageSettle = "settle" // re-checking pending parts
)

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered, e.g. in tests that run several syncers).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{rewoundQ: map[string]map[int]bool{}, unreadableQ: map[string]map[int]bool{}}
	m.landed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shardis_sync_landed_parts_total",
		Help: "Redo-log entries landed in PostgreSQL (counted at the commit; acknowledged to the node after it), by node.",
	}, []string{"node"})
	m.settled = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shardis_sync_settled_parts_total",
		Help: "Landed pending parts updated to their settled state (confirmed, cancelled, lost, expired), by node and state.",
	}, []string{"node", "state"})
	m.lag = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "shardis_sync_lag_entries",
		Help: "Redo-log entries of the queue not landed yet: the queue's head minus the committed position (current incarnation).",
	}, []string{"node", "queue"})
	m.delay = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "shardis_sync_landing_delay_seconds",
		Help:    "Time from a deduction (node clock) to the commit of its row.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	}, []string{"node"})
	m.errors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shardis_sync_errors_total",
		Help: "Failed steps by node and stage (redis, db, ack, settle); each is retried from the committed position.",
	}, []string{"node", "stage"})
	m.dbUp = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "shardis_sync_database_up",
		Help: "1 while PostgreSQL answers (every statement of the sync and a ping every second), 0 while it does not (the sync is paused).",
	})
	m.incarnations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shardis_sync_new_incarnations_total",
		Help: "Incarnations of the node first seen after an earlier one (the node lost data and was accepted): a new position was started.",
	}, []string{"node"})
	m.generation = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "shardis_sync_node_generation",
		Help: "Acceptance generation of the node's current incarnation, as the sync reads it.",
	}, []string{"node"})
	m.trimmed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shardis_sync_trimmed_unlanded_entries_total",
		Help: "Redo-log entries trimmed before the sync read them (inventory.redo_max_age, or another consumer's acknowledgement): never landed.",
	}, []string{"node"})
	m.rewound = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "shardis_sync_rewound_queues",
		Help: "Queues of the node paused because the node went back under the committed position without a new incarnation.",
	}, []string{"node"})
	m.unsettled = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "shardis_sync_unsettled_parts",
		Help: "Landed parts still pending, as of the last walk over all of them (every settle_walk_interval).",
	}, []string{"node"})
	m.lost = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shardis_sync_lost_parts_total",
		Help: "Landed pending parts whose node no longer holds them under a new incarnation (state lost).",
	}, []string{"node"})
	m.conflicts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shardis_sync_conflicting_parts_total",
		Help: "Settled parts whose node, at a later incarnation (it went back to an older copy and was accepted), handed them out in another state: the database keeps its settled state.",
	}, []string{"node"})
	m.skipped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shardis_sync_skipped_refused_parts_total",
		Help: "Redo-log entries left out of PostgreSQL because their part was given back by a Reserve attempt that never became a reservation (read cancelled, reason refused, before it landed), by node.",
	}, []string{"node"})
	m.walks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shardis_sync_settle_walks_total",
		Help: "Walks over every landed pending part of the node, re-reading each on the node: at start, after a gap in the node's settled log or a new incarnation, and every settle_walk_interval (between walks only the parts the settled log names are re-read).",
	}, []string{"node"})
	m.unreadable = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "shardis_sync_unreadable_queues",
		Help: "Queues of the node landed up to an entry whose part record cannot be read (corrupt, or gone while the node lists the part pending or set aside), and waiting there until it is repaired.",
	}, []string{"node"})
	m.unreadableParts = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "shardis_sync_unreadable_parts",
		Help: "Landed pending parts of the node whose record cannot be read (corrupt, or gone while the node lists the part pending or set aside): their rows stay pending until it is repaired.",
	}, []string{"node"})
	if reg != nil {
		reg.MustRegister(m.landed, m.settled, m.lag, m.delay, m.errors, m.dbUp, m.incarnations, m.generation,
			m.trimmed, m.rewound, m.unsettled, m.lost, m.skipped, m.conflicts, m.walks, m.unreadable, m.unreadableParts)
	}
	return m
}

// init creates the series of one node at 0.
func (m *Metrics) initNode(node string) {
	m.landed.WithLabelValues(node)
	for _, st := range []string{"confirmed", "cancelled", "lost", "expired"} {
		m.settled.WithLabelValues(node, st)
	}
	for _, st := range []string{stageRedis, stageDB, stageAck, stageSettle} {
		m.errors.WithLabelValues(node, st)
	}
	m.incarnations.WithLabelValues(node)
	m.trimmed.WithLabelValues(node)
	m.rewound.WithLabelValues(node)
	m.unsettled.WithLabelValues(node)
	m.lost.WithLabelValues(node)
	m.skipped.WithLabelValues(node)
	m.conflicts.WithLabelValues(node)
	m.walks.WithLabelValues(node)
	m.unreadable.WithLabelValues(node)
	m.unreadableParts.WithLabelValues(node)
}

func (m *Metrics) setLag(node string, queue int, lag int64) {
	m.lag.WithLabelValues(node, strconv.Itoa(queue)).Set(float64(max(lag, 0)))
}

// setRewound records whether a queue is paused as rewound and updates the
// node's count.
func (m *Metrics) setRewound(node string, queue int, on bool) {
	m.flagQueue(m.rewoundQ, m.rewound, node, queue, on)
}

// setUnreadable records whether a queue is stopped at an entry whose part
// record cannot be read and updates the node's count.
func (m *Metrics) setUnreadable(node string, queue int, on bool) {
	m.flagQueue(m.unreadableQ, m.unreadable, node, queue, on)
}

// flagQueue records in set whether a queue of node is flagged and sets
// gauge to the node's count.
func (m *Metrics) flagQueue(set map[string]map[int]bool, gauge *prometheus.GaugeVec, node string, queue int, on bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	qs := set[node]
	if qs == nil {
		qs = map[int]bool{}
		set[node] = qs
	}
	if on {
		qs[queue] = true
	} else {
		delete(qs, queue)
	}
	gauge.WithLabelValues(node).Set(float64(len(qs)))
}

// clearQueues forgets a node's paused and stopped queues (a new
// incarnation).
func (m *Metrics) clearQueues(node string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.rewoundQ, node)
	m.rewound.WithLabelValues(node).Set(0)
	delete(m.unreadableQ, node)
	m.unreadable.WithLabelValues(node).Set(0)
}

// Landed returns how many entries were landed, over every node.
func (m *Metrics) Landed() float64 { return sumOf(m.landed) }

// Settled returns how many landed pending parts were updated to a settled
// state, over every node and state.
func (m *Metrics) Settled() float64 { return sumOf(m.settled) }

// DatabaseUp returns shardis_sync_database_up: 1 while PostgreSQL
// answers, 0 while it does not.
func (m *Metrics) DatabaseUp() float64 { return sumOf(m.dbUp) }

// Rewound returns how many queues of node are paused as gone back.
func (m *Metrics) Rewound(node string) float64 {
	return sumOf(m.rewound.MustCurryWith(prometheus.Labels{"node": node}))
}

// UnreadableQueues returns how many queues of node are stopped at an
// entry whose part record cannot be read (shardis_sync_unreadable_queues).
func (m *Metrics) UnreadableQueues(node string) float64 {
	return sumOf(m.unreadable.MustCurryWith(prometheus.Labels{"node": node}))
}

// UnreadableParts returns how many landed pending parts of node have a
// record that cannot be read, as last re-read
// (shardis_sync_unreadable_parts).
func (m *Metrics) UnreadableParts(node string) float64 {
	return sumOf(m.unreadableParts.MustCurryWith(prometheus.Labels{"node": node}))
}

// NewIncarnations returns how many new incarnations of node were seen.
func (m *Metrics) NewIncarnations(node string) float64 {
	return sumOf(m.incarnations.MustCurryWith(prometheus.Labels{"node": node}))
}

// Trimmed returns how many entries were trimmed before they landed, over
// every node.
func (m *Metrics) Trimmed() float64 { return sumOf(m.trimmed) }

// SkippedRefused returns how many entries were left out as parts of
// refused attempts, over every node.
func (m *Metrics) SkippedRefused() float64 { return sumOf(m.skipped) }

// Lost returns how many landed pending parts were found lost, over every
// node.
func (m *Metrics) Lost() float64 { return sumOf(m.lost) }

// Conflicts returns how many settled parts a later incarnation of their
// node handed out in another state, over every node
// (shardis_sync_conflicting_parts_total).
func (m *Metrics) Conflicts() float64 { return sumOf(m.conflicts) }

// sumOf adds up the counters and gauges c collects.
func sumOf(c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric, 16)
	go func() { c.Collect(ch); close(ch) }()
	var total float64
	for mt := range ch {
		var d dto.Metric
		if mt.Write(&d) != nil {
			continue
		}
		total += d.GetCounter().GetValue() + d.GetGauge().GetValue()
	}
	return total
}

// Walks returns how many walks over every landed pending part were
// completed, over every node (shardis_sync_settle_walks_total).
func (m *Metrics) Walks() float64 { return sumOf(m.walks) }
