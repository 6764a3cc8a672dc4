package service

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"

	"github.com/shardis/shardis/config"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

// TestReview2DeadlineCutCallIsDeadlineExceeded holds a call cut short by
// its client's deadline to the code of that (rpcError: a context's
// deadline is deadline_exceeded, as Connect and grpc-go answer it), on
// both ports, whatever layer noticed the deadline first. The deadline
// reaches the inventory (Connect-Timeout-Ms, grpc-timeout): a Reserve with
// 50 ms against paused nodes is answered well before the 5 s command
// timeout, and what it took adds up once the nodes are back. Before, the
// answer depended on a race: go-redis sets the connection's deadline to
// the context's, so a read on a paused node often failed with "i/o
// timeout" before the context's timer fired, and the call was answered
// (and counted, and logged at warn) unavailable, a node's failure, as
// the client's own impatience.
func TestReview2DeadlineCutCallIsDeadlineExceeded(t *testing.T) {
	s, srvs := startService(t, func(cfg *config.Config) {
		cfg.Service.GRPCListen = "127.0.0.1:0"
		cfg.Health.Heartbeat = time.Minute // the paused nodes stay UP: each call meets them
		cfg.Health.Timeout = 30 * time.Second
		cfg.Client.CommandTimeout = 5 * time.Second
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := s.Inv.LoadStock(ctx, "all", "hat", 30, 0); err != nil {
		t.Fatal(err)
	}
	// Enough pooled connections on every node for the calls below: each
	// call cut while it reads drops its connection, and a new one to a
	// paused node waits for its stamp read whatever the caller's deadline
	// (node/dialcheck.go), which this test is not about.
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() { _, _ = s.Inv.GetStock(ctx, "all", "hat") })
	}
	wg.Wait()
	for _, r := range srvs {
		r.Pause()
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			for _, r := range srvs {
				r.Resume()
			}
		}
	}
	defer resume()
	url := "http://" + s.Addr() + "/shardis.v1.InventoryService/Reserve"
	for i := range 4 {
		// The header alone, no timer in the client: the server's answer.
		body := `{"orderId":"dl-` + string(rune('a'+i)) + `","items":[{"routeKey":"all","skuId":"hat","quantity":"1"}]}`
		start := time.Now()
		code, res := review2Post(ctx, t, url, "application/json", map[string]string{"Connect-Timeout-Ms": "50"}, []byte(body))
		took := time.Since(start)
		if code != http.StatusGatewayTimeout || !strings.Contains(res, `"deadline_exceeded"`) {
			t.Errorf("Connect-Timeout-Ms 50 over paused nodes: HTTP %d %s, want 504 deadline_exceeded", code, res)
		}
		if took > 2*time.Second {
			t.Errorf("Connect-Timeout-Ms 50 over paused nodes: answered after %v (command timeout 5s)", took)
		}
	}
	// gRPC on both ports, grpc-timeout alone, no timer in the client. At
	// the deadline grpc-go resets the stream itself (the client's own
	// timer gives it its code); the code the gRPC port's handler answered
	// is read from shardis_rpc_requests_total below.
	h2c := review2H2C(t)
	for i, addr := range []string{s.Addr(), s.GRPCAddr(), s.Addr(), s.GRPCAddr()} {
		req := &v1.ReserveRequest{OrderId: "dg-" + string(rune('a'+i)), Items: []*v1.Item{{RouteKey: "all", SkuId: "hat", Quantity: 1}}}
		start := time.Now()
		code, msg, err := review2GRPC(ctx, t, h2c, "http://"+addr+"/shardis.v1.InventoryService/Reserve", map[string]string{"Grpc-Timeout": "50m"}, req)
		if (err != nil || code != codes.DeadlineExceeded) && (addr == s.Addr() || err == nil) {
			t.Errorf("grpc-timeout 50m to %s over paused nodes: %v %q %v, want DeadlineExceeded", addr, code, msg, err)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("grpc-timeout 50m to %s over paused nodes: answered after %v (command timeout 5s)", addr, took)
		}
	}
	waitCount(t, s, "InventoryService/Reserve", 8)
	if got := rpcCount(t, s, "InventoryService/Reserve", connect.CodeDeadlineExceeded.String()); got != 8 {
		t.Errorf("shardis_rpc_requests_total{code=deadline_exceeded} = %v of 8 calls cut by their deadline (unavailable: %v, canceled: %v)",
			got, rpcCount(t, s, "InventoryService/Reserve", connect.CodeUnavailable.String()),
			rpcCount(t, s, "InventoryService/Reserve", connect.CodeCanceled.String()))
	}
	resume()
	for _, n := range s.Router.Nodes() {
		for !n.Usable() && ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond)
		}
	}
	level, err := s.Inv.GetStock(ctx, "all", "hat")
	if err != nil {
		t.Fatal(err)
	}
	if level.Available+level.Reserved+level.Confirmed != level.Loaded || level.Loaded != 30 || level.Available < 0 {
		t.Errorf("after the cut calls: %+v, want available+reserved+confirmed = loaded = 30", level)
	}
}

// waitCount waits until n calls of procedure are counted (any code).
func waitCount(t *testing.T, s *Server, procedure string, n float64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		var sum float64
		for _, c := range []connect.Code{connect.CodeDeadlineExceeded, connect.CodeUnavailable, connect.CodeCanceled, connect.CodeInternal} {
			sum += rpcCount(t, s, procedure, c.String())
		}
		if sum >= n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("fewer than %v calls of %s counted after 20s", n, procedure)
}
