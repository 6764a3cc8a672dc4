package service

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"

	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
	"github.com/shardis/shardis/router"
)

// Liveness and readiness.
//
// GET /healthz is liveness: 200 while the process serves HTTP at all,
// whatever the nodes do (restarting the process would not help them).
// GET /readyz is readiness: 200 when every route of the topology the
// instance serves (the one applied on the nodes) has at least one enabled
// node the inventory uses (inventory.Inventory.Unusable: up, its
// maxmemory-policy cannot evict keys, its Redis new enough for the
// configured durability) and the instance acts at the nodes' topology
// (topology.Status), 503 otherwise, with the routes that cannot
// serve, or the topology problem, named in the body. A ready instance
// whose configuration differs from the applied topology says so after
// "ready" ("ready; pending topology change: config epoch differs: +n4
// (route x)"): it stays ready, serving the applied topology, until
// `shardis topology apply` runs. The standard grpc.health.v1.Health
// service answers the same: SERVING for "" and the two shardis services
// when ready, NOT_SERVING otherwise; its Watch streams that answer and
// each change of it (healthwatch.go). Both stay unauthenticated (probes),
// like /metrics; they name routes and nodes, nothing else.

// unready returns "" when the service can serve, or why it cannot.
func (s *Server) unready() string {
	why, _ := s.readiness()
	return why
}

// readiness returns why the service cannot serve ("" when it can) and the
// pending topology change it serves around ("" when none).
func (s *Server) readiness() (unready, pending string) {
	inv := s.cfg.Inventory.Server
	if _, ok := s.cfg.Servers[inv]; !ok {
		return "inventory server " + inv + " is not configured", ""
	}
	var bad []string
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	ts := s.Inv.TopologyStatus(ctx)
	if !ts.Ready {
		bad = append(bad, "topology: "+ts.Reason)
	}
	for route, set := range s.Inv.RouteSets(ctx) {
		if why := s.routeUnusable(set); why != "" {
			bad = append(bad, fmt.Sprintf("route %s/%s has no usable node (%s)", inv, route, why))
		}
	}
	sort.Strings(bad)
	return strings.Join(bad, "; "), ts.Pending
}

// routeUnusable returns "" when a node of set is enabled for its route and
// usable by the inventory (inventory.Inventory.Unusable: up, and neither
// evicting keys nor too old for the durability), or else each node's
// state: "n1 down", "n2 drained", "n3 breaker open", or, for a node that
// is up yet refused by the inventory, the inventory's reason ("n1
// maxmemory-policy allkeys-lru evicts keys: …"). Before, a route whose
// nodes all evicted counted as ready while every inventory call on it
// answered unavailable.
func (s *Server) routeUnusable(set *router.Set) string {
	var why []string
	for _, n := range set.Nodes() {
		unusable := s.Inv.Unusable(n)
		state := "down"
		switch {
		case !n.RouteEnabled(set.Key()):
			state = "drained"
		case unusable == "":
			return ""
		case n.Usable():
			state = unusable
		case n.DownReason() == nil:
			state = "breaker open"
		}
		why = append(why, n.Name()+" "+state)
	}
	return strings.Join(why, ", ")
}

func (s *Server) serveReady(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	why, pending := s.readiness()
	switch {
	case why != "":
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "not ready: %s\n", why)
	case pending != "":
		fmt.Fprintf(w, "ready; %s\n", pending)
	default:
		fmt.Fprintln(w, "ready")
	}
}

// healthChecker answers grpc.health.v1.Health from readiness.
type healthChecker struct{ s *Server }

func (h healthChecker) Check(_ context.Context, req *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	if !healthServed(req.Service) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("unknown service %q", req.Service))
	}
	if h.s.unready() != "" {
		return &grpchealth.CheckResponse{Status: grpchealth.StatusNotServing}, nil
	}
	return &grpchealth.CheckResponse{Status: grpchealth.StatusServing}, nil
}

// mountProbes adds /healthz, /readyz, gRPC health and reflection to mux.
func (s *Server) mountProbes(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		up := 0
		nodes := s.Router.Nodes()
		for _, n := range nodes {
			if n.Usable() {
				up++
			}
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "ok: %d/%d nodes up (liveness; see /readyz for readiness)\n", up, len(nodes))
	})
	mux.HandleFunc("GET /readyz", s.serveReady)
	// service.max_body_bytes holds for every message of the port, as
	// grpc-go's MaxRecvMsgSize does on the gRPC port (frontDoor refuses a
	// body declared over it unread).
	limit := connect.WithReadMaxBytes(s.cfg.Service.MaxBodyBytes)
	mux.Handle(grpchealth.NewHandler(healthChecker{s}, limit))
	mux.Handle(s.watchHandler(limit)) // grpchealth's handler answers Watch unimplemented
	reflector := grpcreflect.NewStaticReflector(shardisv1connect.InventoryServiceName, shardisv1connect.AdminServiceName,
		grpchealth.HealthV1ServiceName)
	mux.Handle(grpcreflect.NewHandlerV1(reflector, limit))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector, limit))
}
