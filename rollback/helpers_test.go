package rollback_test

import (
	"context"
	"testing"

	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/inventory"
)

// oneNodeInv is an inventory over one fresh node n1 (route r).
func oneNodeInv(t *testing.T, ctx context.Context) (*inventory.Inventory, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	return instanceOn(t, ctx, srv, nil), srv
}
