package service

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/shardis/shardis/config"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
)

// SettleStuckPart's route_key, sku_id and quantity (the values of a part
// whose own record is gone) go together: one or two of them are
// invalid_argument naming the ones missing, never the call without them
// (which settles by the records). With all three the call is the lost
// record's settle: a value out of range is invalid_argument naming it, a
// part not set aside failed_precondition, and a node of no inventory
// invalid_argument. user_id (a quota part's user) goes with the three; a
// quota part's id without it is invalid_argument naming it.
func TestSettleStuckPartWithTheValuesOfALostRecord(t *testing.T) {
	s, _ := startService(t, func(*config.Config) {})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := shardisv1connect.NewAdminServiceClient(http.DefaultClient, "http://"+s.Addr(), connect.WithProtoJSON())
	str := func(v string) *string { return &v }
	num := func(v int64) *int64 { return &v }
	for _, c := range []struct {
		what string
		req  *v1.SettleStuckPartRequest
		code connect.Code
		says []string
	}{
		{"sku_id alone", &v1.SettleStuckPartRequest{Node: "n1", PartId: "o-1|t|0", Action: "cancel", SkuId: str("s")},
			connect.CodeInvalidArgument, []string{"routeKey, quantity not given"}},
		{"no quantity", &v1.SettleStuckPartRequest{Node: "n1", PartId: "o-1|t|0", Action: "cancel", RouteKey: str("all"), SkuId: str("s")},
			connect.CodeInvalidArgument, []string{"quantity not given"}},
		{"quantity 0", &v1.SettleStuckPartRequest{Node: "n1", PartId: "o-1|t|0", Action: "cancel", RouteKey: str("all"), SkuId: str("s"),
			Quantity: num(0)}, connect.CodeInvalidArgument, []string{"quantity is 0"}},
		{"an unknown route", &v1.SettleStuckPartRequest{Node: "n1", PartId: "o-1|t|0", Action: "cancel", RouteKey: str("zz"), SkuId: str("s"),
			Quantity: num(1)}, connect.CodeInvalidArgument, []string{"routeKey \"zz\""}},
		{"a part not set aside", &v1.SettleStuckPartRequest{Node: "n1", PartId: "o-1|t|0", Action: "cancel", RouteKey: str("all"),
			SkuId: str("s"), Quantity: num(1)}, connect.CodeFailedPrecondition, []string{"not set aside"}},
		{"an unknown node", &v1.SettleStuckPartRequest{Node: "n9", PartId: "o-1|t|0", Action: "cancel", RouteKey: str("all"),
			SkuId: str("s"), Quantity: num(1)}, connect.CodeInvalidArgument, []string{"n9"}},
		{"user_id alone", &v1.SettleStuckPartRequest{Node: "n1", PartId: "o-1|t|q|all|s", Action: "cancel", UserId: str("u")},
			connect.CodeInvalidArgument, []string{"routeKey, skuId, quantity not given"}},
		{"a quota part's id without user_id", &v1.SettleStuckPartRequest{Node: "n1", PartId: "o-1|t|q|all|s", Action: "cancel",
			RouteKey: str("all"), SkuId: str("s"), Quantity: num(1)}, connect.CodeInvalidArgument, []string{"userId"}},
		{"a quota part not set aside", &v1.SettleStuckPartRequest{Node: "n1", PartId: "o-1|t|q|all|s", Action: "cancel",
			RouteKey: str("all"), SkuId: str("s"), Quantity: num(1), UserId: str("u")}, connect.CodeFailedPrecondition,
			[]string{"not set aside"}},
	} {
		_, err := a.SettleStuckPart(ctx, connect.NewRequest(c.req))
		if connect.CodeOf(err) != c.code {
			t.Errorf("SettleStuckPart with %s: %v (code %v), want %v", c.what, err, connect.CodeOf(err), c.code)
			continue
		}
		for _, w := range c.says {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("SettleStuckPart with %s: %v, want it to say %q", c.what, err, w)
			}
		}
	}
}
