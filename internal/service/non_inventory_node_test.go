package service

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
)

// TestAdminCallOnNonInventoryNode checks that the inventory's admin calls
// (ListStuckParts, RetryStuckPart, SettleStuckPart, ReadRedoLog,
// AckRedoLog) take only a node of the inventory: n4, which the
// configuration gives to server "cache" only, is an unknown node for
// them, invalid_argument naming it
// (README, status table: "unknown route/node"), as a name the
// configuration does not give at all is. Found by a review: they ran on
// n4 and answered unavailable (a transient state: "retry"), or, for
// ListStuckParts, an empty success.
func TestAdminCallOnNonInventoryNode(t *testing.T) {
	srvs := redistest.StartN(t, 4, redistest.Options{})
	s, _ := startServiceOn(t, srvs, func(cfg *config.Config) {
		cfg.Servers["inventory"] = config.Server{OnNodeDown: config.OnNodeDownFail, Routes: map[string][]string{"all": {"n1", "n2", "n3"}}}
		cfg.Servers["cache"] = config.Server{OnNodeDown: config.OnNodeDownFail, Routes: map[string][]string{"c": {"n4"}}}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := shardisv1connect.NewAdminServiceClient(http.DefaultClient, "http://"+s.Addr(), connect.WithProtoJSON())
	check := func(call string, err error) {
		t.Helper()
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "n4") {
			t.Errorf("%s on n4 (a node of server cache only): %v (code %v), want invalid_argument naming n4", call, err, connect.CodeOf(err))
		}
	}
	_, err := a.ListStuckParts(ctx, connect.NewRequest(&v1.ListStuckPartsRequest{Node: "n4"}))
	check("ListStuckParts", err)
	_, err = a.RetryStuckPart(ctx, connect.NewRequest(&v1.RetryStuckPartRequest{Node: "n4", PartId: "o-1|t|0"}))
	check("RetryStuckPart", err)
	_, err = a.SettleStuckPart(ctx, connect.NewRequest(&v1.SettleStuckPartRequest{Node: "n4", PartId: "o-1|t|0", Action: "cancel"}))
	check("SettleStuckPart", err)
	_, err = a.ReadRedoLog(ctx, connect.NewRequest(&v1.ReadRedoLogRequest{Node: "n4"}))
	check("ReadRedoLog", err)
	_, err = a.AckRedoLog(ctx, connect.NewRequest(&v1.AckRedoLogRequest{Node: "n4"}))
	check("AckRedoLog", err)
}
