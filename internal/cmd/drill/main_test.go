package main

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"connectrpc.com/connect"

	v1 "github.com/shardis/shardis/proto/shardis/v1"
	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
)

// flakyInventory reserves every order and fails every other Confirm and
// Cancel, as calls to a killed node do.
type flakyInventory struct {
	shardisv1connect.InventoryServiceClient
	mu    sync.Mutex
	calls int
}

func (f *flakyInventory) fail() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return f.calls%2 == 0
}

func (f *flakyInventory) NewOrderId(context.Context, *connect.Request[v1.NewOrderIdRequest]) (*connect.Response[v1.NewOrderIdResponse], error) {
	return connect.NewResponse(&v1.NewOrderIdResponse{OrderId: "minted"}), nil
}

func (f *flakyInventory) Reserve(context.Context, *connect.Request[v1.ReserveRequest]) (*connect.Response[v1.ReserveResponse], error) {
	return connect.NewResponse(&v1.ReserveResponse{}), nil
}

func (f *flakyInventory) Confirm(context.Context, *connect.Request[v1.ConfirmRequest]) (*connect.Response[v1.ConfirmResponse], error) {
	if f.fail() {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("node n1 is down"))
	}
	return connect.NewResponse(&v1.ConfirmResponse{}), nil
}

func (f *flakyInventory) Cancel(context.Context, *connect.Request[v1.CancelRequest]) (*connect.Response[v1.CancelResponse], error) {
	if f.fail() {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("node n1 is down"))
	}
	return connect.NewResponse(&v1.CancelResponse{}), nil
}

// Every ok order is counted once: confirmed, cancelled, left, or
// unsettled when its Confirm or Cancel failed.
func TestOrdersAddUp(t *testing.T) {
	var c counts
	var codes sync.Map
	inv := &flakyInventory{}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		order(context.Background(), inv, "o"+string(rune('a'+i%26)), rng, &c, &codes)
	}
	sum, ok := c.accounted()
	if c.ok.Load() != 200 || !ok || c.unsettled.Load() == 0 {
		t.Fatalf("ok %d, confirmed %d + cancelled %d + left %d + unsettled %d = %d: want every ok order counted once",
			c.ok.Load(), c.confirmed.Load(), c.cancelled.Load(), c.left.Load(), c.unsettled.Load(), sum)
	}
}
