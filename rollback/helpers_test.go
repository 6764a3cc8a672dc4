package rollback_test

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/router"
)

// syncBuf is a bytes.Buffer safe for the reconciler's workers.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// oneNodeInv is an inventory over one fresh node n1 (route r).
func oneNodeInv(t *testing.T, ctx context.Context) (*inventory.Inventory, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	cfg := config.Default()
	cfg.Nodes = map[string]config.Node{"n1": {Addr: srv.Addr(), Weight: 1}}
	cfg.Servers = map[string]config.Server{"inventory": {OnNodeDown: config.OnNodeDownFail, Routes: map[string][]string{"r": {"n1"}}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	r, err := router.New(ctx, &cfg, router.Options{KeepData: cfg.KeepData(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	inv, err := inventory.New(r, inventory.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(inv.Close)
	return inv, srv
}
