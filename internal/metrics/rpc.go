package metrics

import (
	"context"
	"errors"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardis/shardis/inventory"
)

// RPC metrics: every call by procedure and code, its latency, and the
// outcome of Confirm and Cancel.

// settleOutcomes are the outcome labels of shardis_order_settles_total.
var settleOutcomes = []string{"confirmed", "cancelled", "expired", "already_confirmed", "already_cancelled",
	"not_found", "in_progress", "unavailable", "invalid", "data_loss", "error"}

type rpcMetrics struct {
	requests *prometheus.CounterVec
	seconds  *prometheus.HistogramVec
	settles  *prometheus.CounterVec
}

func newRPCMetrics(reg prometheus.Registerer) *rpcMetrics {
	m := &rpcMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardis_rpc_requests_total",
			Help: "RPC calls by procedure (Service/Method) and Connect code.",
		}, []string{"procedure", "code"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "shardis_rpc_duration_seconds",
			Help:    "Duration of RPC calls by procedure.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"procedure"}),
		settles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardis_order_settles_total",
			Help: "Confirm and Cancel calls by op (confirm, cancel) and outcome.",
		}, []string{"op", "outcome"}),
	}
	reg.MustRegister(m.requests, m.seconds, m.settles)
	for _, op := range []string{"confirm", "cancel"} {
		for _, o := range settleOutcomes {
			m.settles.WithLabelValues(op, o)
		}
	}
	return m
}

// RPCInterceptor counts every call by procedure and code, observes its
// latency, and records the outcome of Confirm and Cancel.
func (m *Metrics) RPCInterceptor() connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			start := time.Now()
			res, err := next(ctx, req)
			m.ObserveRPC(req.Spec().Procedure, err, time.Since(start))
			return res, err
		}
	})
}

// ObserveRPC records one answered call of procedure ("/shardis.v1.
// InventoryService/Reserve") that took d and ended with err (nil: ok; a
// *connect.Error or an error [connect.CodeOf] reads): its count by code,
// its latency, and the outcome of a Confirm or Cancel. RPCInterceptor
// calls it for Connect, gRPC and gRPC-Web calls on the service port; the
// grpc-go port (service.grpc_listen) calls it directly.
func (m *Metrics) ObserveRPC(procedure string, err error, d time.Duration) {
	proc := strings.TrimPrefix(procedure, "/shardis.v1.")
	code := "ok"
	if err != nil {
		code = connect.CodeOf(err).String()
	}
	m.rpc.requests.WithLabelValues(proc, code).Inc()
	m.rpc.seconds.WithLabelValues(proc).Observe(d.Seconds())
	switch proc {
	case "InventoryService/Confirm":
		m.rpc.settles.WithLabelValues("confirm", settleOutcome(err, "confirmed")).Inc()
	case "InventoryService/Cancel":
		m.rpc.settles.WithLabelValues("cancel", settleOutcome(err, "cancelled")).Inc()
	}
}

// CountRPC counts one request the RPC layer answered before the
// interceptors saw it (a wrong Content-Type, an oversized or undecodable
// body), by procedure ("InventoryService/Reserve", or "unknown") and code
// name; RPCInterceptor counts every other.
func (m *Metrics) CountRPC(procedure, code string) {
	m.rpc.requests.WithLabelValues(procedure, code).Inc()
}

func settleOutcome(err error, ok string) string {
	switch {
	case err == nil:
		return ok
	case errors.Is(err, inventory.ErrDataLoss):
		return "data_loss"
	case errors.Is(err, inventory.ErrExpired):
		return "expired"
	case errors.Is(err, inventory.ErrConfirmed):
		return "already_confirmed"
	case errors.Is(err, inventory.ErrCancelled):
		return "already_cancelled"
	case errors.Is(err, inventory.ErrNotFound):
		return "not_found"
	case errors.Is(err, inventory.ErrInProgress):
		return "in_progress"
	case errors.Is(err, inventory.ErrInvalid):
		return "invalid"
	case errors.Is(err, inventory.ErrUnavailable):
		return "unavailable"
	}
	return "error"
}
