package service

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"connectrpc.com/connect"

	"github.com/shardis/shardis/inventory"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

// ListStuckParts implements AdminService.ListStuckParts: the parts set
// aside on one node (req.Node) or on every node, read concurrently. A node
// that cannot be read is listed in Unreachable, not an error, unless it is
// the one node asked for. A req.Node that is no node of the inventory
// server (another server's included) is invalid_argument naming it
// (inventory.Inventory.Nodes).
func (h *Handlers) ListStuckParts(ctx context.Context, req *connect.Request[v1.ListStuckPartsRequest]) (*connect.Response[v1.ListStuckPartsResponse], error) {
	m := req.Msg
	limit := int(m.Limit)
	if limit == 0 {
		limit = 1000
	}
	if m.Node != "" {
		parts, err := h.Inventory.StuckParts(ctx, m.Node, limit)
		if err != nil {
			return nil, rpcError(err)
		}
		return connect.NewResponse(&v1.ListStuckPartsResponse{Parts: stuckParts(parts)}), nil
	}
	if limit < 0 || limit > 10000 {
		return nil, rpcError(fmt.Errorf("%w: limit %d, want 1..10000", inventory.ErrInvalid, limit))
	}
	nodes := h.Inventory.Nodes()
	found := make([][]inventory.StuckPart, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			found[i], errs[i] = h.Inventory.StuckParts(ctx, n.Name(), limit)
		}()
	}
	wg.Wait()
	out := &v1.ListStuckPartsResponse{}
	for i, n := range nodes {
		if errs[i] != nil {
			out.Unreachable = append(out.Unreachable, n.Name()+": "+errs[i].Error())
			continue
		}
		out.Parts = append(out.Parts, stuckParts(found[i])...)
	}
	return connect.NewResponse(out), nil
}

// RetryStuckPart implements AdminService.RetryStuckPart.
func (h *Handlers) RetryStuckPart(ctx context.Context, req *connect.Request[v1.RetryStuckPartRequest]) (*connect.Response[v1.RetryStuckPartResponse], error) {
	ok, err := h.Inventory.RetryStuck(ctx, req.Msg.Node, req.Msg.PartId)
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&v1.RetryStuckPartResponse{Retried: ok}), nil
}

// SettleStuckPart implements AdminService.SettleStuckPart: an operator's
// confirm or cancel of a part set aside whose order's record is gone
// (inventory.Inventory.SettleStuck, whose refusals map as rpcError maps
// them: failed_precondition for a part not set aside or whose order's
// record exists, invalid_argument for an unknown node, an empty part_id
// or an action other than "confirm" or "cancel"). With route_key, sku_id
// and quantity (all three, else invalid_argument naming the ones missing)
// it settles a part set aside whose own record is gone by those values
// (inventory.Inventory.SettleStuckLost: failed_precondition for a part not
// set aside or whose record exists, invalid_argument for a value out of
// range); user_id, with the three alone (invalid_argument otherwise),
// names the user of a per-user quota part's order, whose count on the
// node the part holds (StuckUnits.User).
func (h *Handlers) SettleStuckPart(ctx context.Context, req *connect.Request[v1.SettleStuckPartRequest]) (*connect.Response[v1.SettleStuckPartResponse], error) {
	m := req.Msg
	var (
		res string
		err error
	)
	if m.RouteKey != nil || m.SkuId != nil || m.Quantity != nil || m.UserId != nil {
		var missing []string
		for _, f := range []struct {
			name string
			set  bool
		}{{"route_key", m.RouteKey != nil}, {"sku_id", m.SkuId != nil}, {"quantity", m.Quantity != nil}} {
			if !f.set {
				missing = append(missing, f.name)
			}
		}
		if len(missing) > 0 {
			return nil, rpcError(fmt.Errorf("%w: %s not given: a part whose record is gone is settled by route_key, sku_id "+
				"and quantity together, with user_id for a quota part (none of them for one whose record exists)",
				inventory.ErrInvalid, strings.Join(missing, ", ")))
		}
		res, err = h.Inventory.SettleStuckLost(ctx, m.Node, m.PartId, inventory.Action(m.Action),
			inventory.StuckUnits{Route: m.GetRouteKey(), SKU: m.GetSkuId(), Quantity: m.GetQuantity(), User: m.GetUserId()})
	} else {
		res, err = h.Inventory.SettleStuck(ctx, m.Node, m.PartId, inventory.Action(m.Action))
	}
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&v1.SettleStuckPartResponse{Result: res}), nil
}

func stuckParts(ps []inventory.StuckPart) []*v1.StuckPart {
	out := make([]*v1.StuckPart, len(ps))
	for i, p := range ps {
		state := p.State.String()
		if p.Problem != "" {
			state = "unknown"
		}
		out[i] = &v1.StuckPart{Node: p.Node, PartId: p.PartID, OrderId: p.OrderID, SkuId: p.SKU,
			Quantity: p.Quantity, State: state, SinceUnixMs: p.Since.UnixMilli(), Reason: p.Reason, Problem: p.Problem}
	}
	return out
}
