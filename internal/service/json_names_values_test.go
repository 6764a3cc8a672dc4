package service

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	v1 "github.com/shardis/shardis/proto/shardis/v1"
	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
)

// A JSON client reads the SKU it sent, whatever it is: "Quoted text (a
// value the client sent) is never rewritten" (errors.go), and the
// library quotes every SKU, route, order and user id it names. Before,
// the library named a SKU unquoted ("items[0] sku user_id was never
// loaded on route all"), so a SKU whose id happens to be a proto field
// name reached a JSON client rewritten to its JSON name ("userId"):
// another SKU.
func TestJSONClientReadsSKUIdsAsSent(t *testing.T) {
	s, _, _ := startOverNodes(t, 0)
	inv := shardisv1connect.NewInventoryServiceClient(http.DefaultClient, "http://"+s.Addr(), connect.WithProtoJSON())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := inv.LoadStock(ctx, connect.NewRequest(&v1.LoadStockRequest{RouteKey: "all", SkuId: "order_id", Quantity: 3})); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		sku  string
		qty  int64
		code connect.Code
	}{
		{"user_id", 1, connect.CodeNotFound},            // never loaded
		{"order_id", 5, connect.CodeFailedPrecondition}, // 3 loaded: insufficient stock
	} {
		_, err := inv.Reserve(ctx, connect.NewRequest(&v1.ReserveRequest{OrderId: "o-" + c.sku,
			Items: []*v1.Item{{RouteKey: "all", SkuId: c.sku, Quantity: c.qty}}}))
		var ce *connect.Error
		if !errors.As(err, &ce) {
			t.Fatalf("reserve of %d of SKU %q: %v, want a connect error", c.qty, c.sku, err)
		}
		if ce.Code() != c.code {
			t.Errorf("reserve of %d of SKU %q: %v, want code %v", c.qty, c.sku, err, c.code)
		}
		if msg := ce.Message(); !strings.Contains(msg, `sku "`+c.sku+`"`) || !strings.Contains(msg, `route "all"`) {
			t.Errorf("reserve of %d of SKU %q: message %q does not name the SKU and the route as sent", c.qty, c.sku, msg)
		}
	}
}

// The same through the service: a JSON client whose user id ends in a
// backslash reads the SKU it sent ("order_id", not "orderId"), and a
// route key holding a sentinel's text comes back whole. Before, the first
// read sku "orderId" and the second route_key "x: y"
// (TestErrorRewritesLeaveQuotedValues has the cases).
func TestClientValuesComeBackAsSent(t *testing.T) {
	s, _, _ := startOverNodes(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	inv := shardisv1connect.NewInventoryServiceClient(http.DefaultClient, "http://"+s.Addr(), connect.WithProtoJSON())
	limit := int64(2)
	if _, err := inv.LoadStock(ctx, connect.NewRequest(&v1.LoadStockRequest{RouteKey: "all", SkuId: "order_id", Quantity: 30, PerUserLimit: &limit})); err != nil {
		t.Fatal(err)
	}
	_, err := inv.Reserve(ctx, connect.NewRequest(&v1.ReserveRequest{OrderId: "o1", UserId: `u\`,
		Items: []*v1.Item{{RouteKey: "all", SkuId: "order_id", Quantity: 3}}}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), `user "u\\"`) ||
		!strings.Contains(err.Error(), `sku "order_id"`) {
		t.Errorf("Reserve past the limit by user `u\\`: %v, want failed_precondition naming the user and the SKU as sent", err)
	}
	route := "x: invalid argument: y"
	_, err = inv.GetStock(ctx, connect.NewRequest(&v1.GetStockRequest{RouteKey: route, SkuId: "cap"}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), `routeKey "`+route+`"`) {
		t.Errorf("GetStock of route %q: %v, want invalid_argument naming routeKey %q", route, err, route)
	}
}
