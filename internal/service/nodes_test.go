package service

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
)

// startOverNodes starts the service (no token) over three real nodes n1,
// n2, n3 (startService) and returns it, its nodes and an admin client on
// the service port. A heartbeat > 0 replaces the default: a long one
// keeps a killed node UP until a command fails on it.
func startOverNodes(t *testing.T, heartbeat time.Duration) (*Server, []*redistest.Server, shardisv1connect.AdminServiceClient) {
	t.Helper()
	s, srvs := startService(t, func(cfg *config.Config) {
		cfg.Health.Timeout = 2 * time.Second
		if heartbeat > 0 {
			cfg.Health.Heartbeat = heartbeat
		}
	})
	return s, srvs, shardisv1connect.NewAdminServiceClient(http.DefaultClient, "http://"+s.Addr())
}

// startService starts the service on a free loopback port over three real
// nodes n1, n2, n3 (one inventory route "all" over all three, on_node_down
// fail), its configuration changed by edit first, and shuts it down when
// the test ends.
func startService(t *testing.T, edit func(*config.Config)) (*Server, []*redistest.Server) {
	t.Helper()
	return startServiceOn(t, redistest.StartN(t, 3, redistest.Options{}), edit)
}

// startServiceOn is startService over the nodes srvs (n1, n2, … in
// order), started by the caller.
func startServiceOn(t *testing.T, srvs []*redistest.Server, edit func(*config.Config)) (*Server, []*redistest.Server) {
	t.Helper()
	cfg := config.Default()
	cfg.Service.Listen = "127.0.0.1:0"
	cfg.Nodes = map[string]config.Node{}
	var names []string
	for i, s := range srvs {
		name := "n" + strconv.Itoa(i+1)
		cfg.Nodes[name] = config.Node{Addr: s.Addr(), Weight: 1}
		names = append(names, name)
	}
	cfg.Servers = map[string]config.Server{"inventory": {OnNodeDown: config.OnNodeDownFail, Routes: map[string][]string{"all": names}}}
	edit(&cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Start(ctx, &cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	return s, srvs
}
