// Package service implements the shardis RPC services (Connect, gRPC and
// gRPC-Web on one port) over the router and the inventory, and the HTTP
// server around them.
package service

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"connectrpc.com/connect"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
	"github.com/shardis/shardis/router"
)

// Handlers implements shardisv1connect.InventoryServiceHandler and
// AdminServiceHandler. Safe for concurrent use.
type Handlers struct {
	Router    *router.Router       // the router the admin calls read and change (node and route state)
	Inventory *inventory.Inventory // the inventory every call works on
}

// LoadStock implements InventoryService.LoadStock.
func (h *Handlers) LoadStock(ctx context.Context, req *connect.Request[v1.LoadStockRequest]) (*connect.Response[v1.LoadStockResponse], error) {
	m := req.Msg
	limit := int64(-1) // absent: keep the SKU's limit (a restock never lifts it)
	if m.PerUserLimit != nil {
		limit = *m.PerUserLimit
	}
	level, err := h.Inventory.LoadStock(ctx, m.RouteKey, m.SkuId, m.Quantity, limit)
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&v1.LoadStockResponse{Stock: stockLevel(level)}), nil
}

// GetStock implements InventoryService.GetStock.
func (h *Handlers) GetStock(ctx context.Context, req *connect.Request[v1.GetStockRequest]) (*connect.Response[v1.GetStockResponse], error) {
	level, err := h.Inventory.GetStock(ctx, req.Msg.RouteKey, req.Msg.SkuId)
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&v1.GetStockResponse{Stock: stockLevel(level)}), nil
}

// NewOrderId implements InventoryService.NewOrderId.
func (h *Handlers) NewOrderId(ctx context.Context, req *connect.Request[v1.NewOrderIdRequest]) (*connect.Response[v1.NewOrderIdResponse], error) { //nolint:revive // the generated interface names it
	if len(req.Msg.Items) > inventory.MaxItems {
		return nil, connect.NewError(connect.CodeInvalidArgument,
			fmt.Errorf("items: %d items, at most %d per order", len(req.Msg.Items), inventory.MaxItems))
	}
	id, err := h.Inventory.NewOrderID(ctx, itemsOf(req.Msg.Items)...)
	if err != nil {
		return nil, rpcError(err)
	}
	home, _ := inventory.MintedHome(id)
	return connect.NewResponse(&v1.NewOrderIdResponse{OrderId: id, Node: home}), nil
}

// Reserve implements InventoryService.Reserve.
func (h *Handlers) Reserve(ctx context.Context, req *connect.Request[v1.ReserveRequest]) (*connect.Response[v1.ReserveResponse], error) {
	m := req.Msg
	if m.TtlSeconds < 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("ttl_seconds is negative"))
	}
	if len(m.Items) > inventory.MaxItems {
		return nil, connect.NewError(connect.CodeInvalidArgument,
			fmt.Errorf("items: %d items, at most %d per order", len(m.Items), inventory.MaxItems))
	}
	items := itemsOf(m.Items)
	res, err := h.Inventory.Reserve(ctx, m.OrderId, items, m.UserId, time.Duration(m.TtlSeconds)*time.Second)
	if err != nil {
		return nil, rpcError(err)
	}
	out := &v1.ReserveResponse{OrderId: res.OrderID, DeadlineUnixMs: res.Deadline.UnixMilli(),
		TtlSeconds: int64(res.TTL / time.Second), TtlCapped: res.TTLCapped}
	for _, r := range res.Receipts {
		out.Receipts = append(out.Receipts, &v1.Receipt{
			ItemIndex: int32(r.ItemIndex), SkuId: r.SKU, Quantity: r.Quantity,
			Node: r.Node, RedoLog: r.RedoLog, Offset: r.Offset,
		})
	}
	return connect.NewResponse(out), nil
}

// itemsOf converts an RPC order's items.
func itemsOf(its []*v1.Item) []inventory.Item {
	items := make([]inventory.Item, len(its))
	for i, it := range its {
		items[i] = inventory.Item{Route: it.RouteKey, SKU: it.SkuId, Quantity: it.Quantity}
	}
	return items
}

// Confirm implements InventoryService.Confirm.
func (h *Handlers) Confirm(ctx context.Context, req *connect.Request[v1.ConfirmRequest]) (*connect.Response[v1.ConfirmResponse], error) {
	out, err := h.Inventory.Confirm(ctx, req.Msg.OrderId)
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&v1.ConfirmResponse{
		OrderId: out.OrderID, Status: v1.OrderStatus(out.Status), PendingParts: int32(out.PendingParts),
	}), nil
}

// Cancel implements InventoryService.Cancel.
func (h *Handlers) Cancel(ctx context.Context, req *connect.Request[v1.CancelRequest]) (*connect.Response[v1.CancelResponse], error) {
	out, err := h.Inventory.Cancel(ctx, req.Msg.OrderId)
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&v1.CancelResponse{
		OrderId: out.OrderID, Status: v1.OrderStatus(out.Status), PendingParts: int32(out.PendingParts), Reason: string(out.Reason),
	}), nil
}

// acceptable refuses the accept of a node that is UP, unless force: the
// accept is for a node refused for going back or coming back empty, and
// on a healthy node it would only start a new incarnation (a new redo-log
// generation, reported by the sync as an accept after a loss). An unknown
// node is left to Router.AcceptNode.
func (h *Handlers) acceptable(name string, force bool) error {
	n, err := h.Router.Node(name)
	if err != nil || force || n.State() != node.StateUp {
		return nil
	}
	return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
		"node %q is UP, not refused: accepting it would give it a new incarnation for nothing; pass force (shardis node accept --force) to accept it anyway", name))
}

// AcceptNode implements AdminService.AcceptNode.
func (h *Handlers) AcceptNode(ctx context.Context, req *connect.Request[v1.AcceptNodeRequest]) (*connect.Response[v1.AcceptNodeResponse], error) {
	if err := h.acceptable(req.Msg.Node, req.Msg.Force); err != nil {
		return nil, err
	}
	m, err := h.Router.AcceptNode(ctx, req.Msg.Node)
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&v1.AcceptNodeResponse{Node: req.Msg.Node, Generation: m.Gen, Incarnation: m.Incarnation, Seq: m.Seq}), nil
}

// ListNodes implements AdminService.ListNodes.
func (h *Handlers) ListNodes(_ context.Context, _ *connect.Request[v1.ListNodesRequest]) (*connect.Response[v1.ListNodesResponse], error) {
	out := &v1.ListNodesResponse{}
	for _, st := range h.Router.Status() {
		out.Nodes = append(out.Nodes, nodeInfo(st))
	}
	return connect.NewResponse(out), nil
}

// SetRouteEnabled implements AdminService.SetRouteEnabled.
func (h *Handlers) SetRouteEnabled(ctx context.Context, req *connect.Request[v1.SetRouteEnabledRequest]) (*connect.Response[v1.SetRouteEnabledResponse], error) {
	m := req.Msg
	if err := h.Router.SetRouteEnabled(ctx, m.Node, m.Server, m.Route, m.Enabled); err != nil {
		return nil, rpcError(err)
	}
	for _, st := range h.Router.Status() {
		if st.Name == m.Node {
			return connect.NewResponse(&v1.SetRouteEnabledResponse{Node: nodeInfo(st)}), nil
		}
	}
	return nil, connect.NewError(connect.CodeInternal, errors.New("node vanished"))
}

// ReadRedoLog implements AdminService.ReadRedoLog: the entries, the
// node's incarnation and the queue's head are read on the node in one
// atomic step (inventory.ReadRedoPageFrom), with the offsets trimmed past
// after_offset (trimmed) and a position past the head, or an entry at
// after_offset holding another part than after_part_id (rewound),
// reported. With inventory.durability replica or aof, entries (or trimmed
// offsets) are handed out only once a replica has them, as pgsync's read
// (inventory.ReadRedoBatch): unavailable otherwise, read again later. A
// negative after_offset, or one over 2^53 (inventory.MaxRedoOffset), is
// invalid_argument naming after_offset. Before, one over 2^53 reached the
// inventory, whose message named no field ("after 9007199254740993").
func (h *Handlers) ReadRedoLog(ctx context.Context, req *connect.Request[v1.ReadRedoLogRequest]) (*connect.Response[v1.ReadRedoLogResponse], error) {
	m := req.Msg
	if m.AfterOffset < 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument,
			fmt.Errorf("after_offset: %d is negative, want an offset of 0 or more", m.AfterOffset))
	}
	if m.AfterOffset > inventory.MaxRedoOffset {
		return nil, connect.NewError(connect.CodeInvalidArgument,
			fmt.Errorf("after_offset: %d is over 2^53, want an offset of 0..%d", m.AfterOffset, inventory.MaxRedoOffset))
	}
	limit := int(m.Limit)
	if limit == 0 {
		limit = 100
	}
	c := inventory.RedoCursor{Queue: int(m.Queue), After: m.AfterOffset, PartID: m.AfterPartId}
	p, err := h.Inventory.ReadRedoPageFrom(ctx, m.Node, c, limit)
	if err != nil {
		return nil, rpcError(err)
	}
	out := &v1.ReadRedoLogResponse{Node: m.Node, Queue: m.Queue, RedoLog: inventory.RedoLogKey(int(m.Queue)),
		Incarnation: p.Incarnation, Head: p.Head, Trimmed: p.Trimmed, Rewound: p.Rewound}
	for _, e := range p.Entries {
		out.Entries = append(out.Entries, &v1.RedoEntry{
			Offset: e.Offset, PartId: e.PartID, OrderId: e.OrderID, SkuId: e.SKU,
			Quantity: e.Quantity, State: e.State, AtUnixMs: e.At.UnixMilli(),
		})
	}
	return connect.NewResponse(out), nil
}

// AckRedoLog implements AdminService.AckRedoLog. With an incarnation, a
// node at another one refuses the acknowledgement on the node itself
// (inventory.AckRedoLogAt): failed_precondition, naming both; nothing is
// acknowledged. Without one it is unfenced. A negative offset is
// invalid_argument, naming the field.
func (h *Handlers) AckRedoLog(ctx context.Context, req *connect.Request[v1.AckRedoLogRequest]) (*connect.Response[v1.AckRedoLogResponse], error) {
	m := req.Msg
	if m.Offset < 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument,
			fmt.Errorf("offset: %d is negative, want an offset of 0 or more", m.Offset))
	}
	acked, err := h.Inventory.AckRedoLogAt(ctx, m.Node, m.Incarnation,
		inventory.RedoCursor{Queue: int(m.Queue), After: m.Offset, PartID: m.PartId})
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&v1.AckRedoLogResponse{AckedOffset: acked}), nil
}

func stockLevel(l inventory.StockLevel) *v1.StockLevel {
	out := &v1.StockLevel{SkuId: l.SKU, Available: l.Available, Reserved: l.Reserved, Confirmed: l.Confirmed,
		Loaded: l.Loaded, PerUserLimit: l.Limit}
	for _, n := range l.Nodes {
		ns := &v1.NodeStock{Node: n.Node, Reachable: n.Reachable, Available: n.Available,
			Reserved: n.Reserved, Confirmed: n.Confirmed, Loaded: n.Loaded, PerUserLimit: n.Limit}
		if n.Err != nil {
			ns.Error = n.Err.Error()
		}
		out.Nodes = append(out.Nodes, ns)
	}
	return out
}

func nodeInfo(st router.NodeStatus) *v1.NodeInfo {
	info := &v1.NodeInfo{Name: st.Name, Addr: st.Addr, Breaker: st.Breaker, FailedProbes: int32(st.FailedProbes),
		Incarnation: st.Incarnation, State: v1.NodeState_NODE_STATE_DOWN, Warning: st.Warning,
		MaxmemoryPolicy: st.Settings.MaxmemoryPolicy, Appendonly: st.Settings.AppendOnly, Appendfsync: st.Settings.AppendFsync}
	if st.State == node.StateUp {
		info.State = v1.NodeState_NODE_STATE_UP
	}
	if st.DownReason != nil {
		info.DownReason = st.DownReason.Error()
	}
	for rk, enabled := range st.Routes {
		info.Routes = append(info.Routes, &v1.RouteStatus{Server: rk.Server, Route: rk.Route, Enabled: enabled})
	}
	sortRoutes(info.Routes)
	return info
}

func sortRoutes(rs []*v1.RouteStatus) {
	sort.Slice(rs, func(i, j int) bool {
		if rs[i].Server != rs[j].Server {
			return rs[i].Server < rs[j].Server
		}
		return rs[i].Route < rs[j].Route
	})
}
