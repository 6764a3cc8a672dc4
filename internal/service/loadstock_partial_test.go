package service

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/shardis/shardis/inventory"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
)

// A LoadStock that one node of the route failed after the others added
// their share answers aborted, naming the nodes that added it and saying
// that a retry adds again; the stock holds what was added, once. Before,
// it answered unavailable: gRPC's code for "retry the same call with
// backoff", the one retry policies retry by themselves; LoadStock is not
// idempotent (inventory.LoadStock: "retrying after an error may add
// twice"), and the retry it invited loaded 30 units as 50.
func TestPartialLoadStockIsAbortedNotUnavailable(t *testing.T) {
	s, srvs, _ := startOverNodes(t, time.Minute) // n1 stays UP until a command fails on it
	inv := shardisv1connect.NewInventoryServiceClient(http.DefaultClient, "http://"+s.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	srvs[0].Kill()
	_, err := inv.LoadStock(ctx, connect.NewRequest(&v1.LoadStockRequest{RouteKey: "all", SkuId: "cap", Quantity: 30}))
	if err == nil {
		t.Fatal("a load over a killed node the service still thinks UP succeeded")
	}
	if code := connect.CodeOf(err); code != connect.CodeAborted {
		t.Errorf("a partly applied LoadStock: code %v (%v), want aborted", code, err)
	}
	msg := err.Error()
	for _, want := range []string{`sku "cap" (route "all")`, "n1 (share 10)", "20 of 30 units were added, on n2 (10), n3 (10)",
		"a retry of the same call adds them again"} {
		if !strings.Contains(msg, want) {
			t.Errorf("a partly applied LoadStock: message %q does not say %q", msg, want)
		}
	}
	st, err := inv.GetStock(ctx, connect.NewRequest(&v1.GetStockRequest{RouteKey: "all", SkuId: "cap"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Msg.GetStock().GetLoaded(); got != 20 {
		t.Errorf("loaded %d on the reachable nodes after the partly applied load, want 20", got)
	}
}

// A LoadStock over a corrupt stock hash on every node of the route adds
// nothing and fails alike each time: it answers internal, as Reserve and
// GetStock of the same SKU do (README's code table: corrupt values are
// internal), and does not say the same call may be retried. Before, it
// answered unavailable "no unit was added: the same call may be retried",
// which retry policies retry forever.
func TestLoadStockOverCorruptStockIsInternal(t *testing.T) {
	s, srvs, _ := startOverNodes(t, 0)
	inv := shardisv1connect.NewInventoryServiceClient(http.DefaultClient, "http://"+s.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := inv.LoadStock(ctx, connect.NewRequest(&v1.LoadStockRequest{RouteKey: "all", SkuId: "cap", Quantity: 30})); err != nil {
		t.Fatal(err)
	}
	for _, srv := range srvs {
		if err := srv.Client(t).HSet(ctx, inventory.StockKey("all", "cap"), "available", "garbage").Err(); err != nil {
			t.Fatal(err)
		}
	}
	for try := range 2 {
		_, err := inv.LoadStock(ctx, connect.NewRequest(&v1.LoadStockRequest{RouteKey: "all", SkuId: "cap", Quantity: 30}))
		if code := connect.CodeOf(err); code != connect.CodeInternal {
			t.Errorf("LoadStock #%d over corrupt stock: code %v (%v), want internal", try, code, err)
		}
		if err != nil && (strings.Contains(err.Error(), "may be retried") || !strings.Contains(err.Error(), "SHARDIS_CORRUPT")) {
			t.Errorf("LoadStock #%d over corrupt stock: %q should name the corrupt value and not invite a retry", try, err)
		}
	}
	_, err := inv.GetStock(ctx, connect.NewRequest(&v1.GetStockRequest{RouteKey: "all", SkuId: "cap"}))
	if code := connect.CodeOf(err); code != connect.CodeInternal {
		t.Errorf("GetStock over corrupt stock: code %v (%v), want internal (as LoadStock)", code, err)
	}
}
