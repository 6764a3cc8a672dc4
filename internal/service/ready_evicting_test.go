package service

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
)

// A route whose nodes are all up but evict keys (maxmemory-policy
// allkeys-lru) cannot serve: the inventory refuses such nodes, so
// /readyz answers 503 naming the policy, and grpc.health.v1 Check
// NOT_SERVING. Before, readiness counted any node.Usable node, so /readyz
// said 200 "ready" while every LoadStock on the route answered
// unavailable "no usable node: n1: maxmemory-policy allkeys-lru evicts
// keys".
func TestReadyzCountsOnlyNodesTheInventoryUses(t *testing.T) {
	srvs := redistest.StartN(t, 3, redistest.Options{Args: []string{"--maxmemory-policy", "allkeys-lru"}})
	s, _ := startServiceOn(t, srvs, func(*config.Config) {})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	inv := shardisv1connect.NewInventoryServiceClient(http.DefaultClient, "http://"+s.Addr())
	_, err := inv.LoadStock(ctx, connect.NewRequest(&v1.LoadStockRequest{RouteKey: "all", SkuId: "cap", Quantity: 30}))
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "evicts keys") {
		t.Fatalf("LoadStock over evicting nodes: %v, want unavailable naming the eviction policy", err)
	}
	res, err := http.Get("http://" + s.Addr() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/readyz over evicting nodes: %d %q, want 503", res.StatusCode, body)
	}
	for _, want := range []string{"route inventory/all has no usable node", "n1 maxmemory-policy allkeys-lru evicts keys", "n3 maxmemory-policy"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/readyz body %q does not say %q", body, want)
		}
	}
	hc := grpchealth.NewClient(http.DefaultClient, "http://"+s.Addr())
	got, err := hc.Check(ctx, &grpchealth.CheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != grpchealth.StatusNotServing {
		t.Errorf("health Check over evicting nodes: %v, want NOT_SERVING", got.Status)
	}
}

// One node that does not evict is enough: the route is ready, and the
// load lands there.
func TestReadyzWithOneNonEvictingNode(t *testing.T) {
	srvs := redistest.StartN(t, 2, redistest.Options{Args: []string{"--maxmemory-policy", "allkeys-lru"}})
	srvs = append(srvs, redistest.Start(t, redistest.Options{}))
	s, _ := startServiceOn(t, srvs, func(*config.Config) {})
	res, err := http.Get("http://" + s.Addr() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("/readyz with n3 not evicting: %d %q, want 200", res.StatusCode, body)
	}
}
