package service

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	v1 "github.com/shardis/shardis/proto/shardis/v1"
	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
)

// A Reserve without user_id of a SKU with a per-user limit answers
// failed_precondition, naming user_id (userId for a JSON client): the
// same request is valid for a SKU without a limit (it is reserved below),
// so by gRPC's rule (errors.go) it is the SKU's state that refuses it,
// and README's code table lists the per-user limit under
// failed_precondition. Before, the refusal wrapped inventory.ErrInvalid
// and answered invalid_argument.
func TestReserveWithoutUserOfLimitedSKUIsFailedPrecondition(t *testing.T) {
	s, _, _ := startOverNodes(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, c := range []struct {
		name  string
		opts  []connect.ClientOption
		field string
	}{
		{"binary", nil, "user_id"},
		{"JSON", []connect.ClientOption{connect.WithProtoJSON()}, "userId"},
	} {
		inv := shardisv1connect.NewInventoryServiceClient(http.DefaultClient, "http://"+s.Addr(), c.opts...)
		limited, free := "limited-"+c.name, "free-"+c.name
		limit := int64(5)
		for sku, lim := range map[string]*int64{limited: &limit, free: nil} {
			if _, err := inv.LoadStock(ctx, connect.NewRequest(&v1.LoadStockRequest{RouteKey: "all", SkuId: sku, Quantity: 30, PerUserLimit: lim})); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := inv.Reserve(ctx, connect.NewRequest(&v1.ReserveRequest{OrderId: "free-" + c.name,
			Items: []*v1.Item{{RouteKey: "all", SkuId: free, Quantity: 1}}})); err != nil {
			t.Fatalf("%s: Reserve without user_id of a SKU without a limit: %v", c.name, err)
		}
		_, err := inv.Reserve(ctx, connect.NewRequest(&v1.ReserveRequest{OrderId: "limited-" + c.name,
			Items: []*v1.Item{{RouteKey: "all", SkuId: limited, Quantity: 1}}}))
		if code := connect.CodeOf(err); code != connect.CodeFailedPrecondition {
			t.Errorf("%s: Reserve without user_id of a SKU limited to 5: code %v (%v), want failed_precondition", c.name, code, err)
		}
		if err != nil && (!strings.Contains(err.Error(), "needs "+c.field) || !strings.Contains(err.Error(), `"`+limited+`"`)) {
			t.Errorf("%s: %q should say the order needs %s and name the SKU", c.name, err, c.field)
		}
	}
}
