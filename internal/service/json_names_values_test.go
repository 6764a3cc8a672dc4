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
