package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	v1 "github.com/shardis/shardis/proto/shardis/v1"
	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
)

// TestSvcConnectRPCs drives every RPC through the generated Connect
// clients over real HTTP and checks the real outcomes.
func TestSvcConnectRPCs(t *testing.T) {
	t.Parallel()
	e := newSvcEnv(t, svcOpts{})
	ctx := svcCtx(t)
	st := e.load("clothes", "tee", 100, 0)
	svcWantStock(t, st, 100, 0, 0, 100)
	for _, n := range st.Nodes {
		if len(st.Nodes) != 3 || !n.Reachable || (n.Loaded != 33 && n.Loaded != 34) {
			t.Fatalf("LoadStock did not split 100 over 3 nodes: %v", st)
		}
	}
	svcWantStock(t, e.stock("clothes", "tee"), 100, 0, 0, 100)

	before := time.Now()
	r1 := e.mustReserve("o-1", "alice", 300, svcItem("clothes", "tee", 5))
	for _, rc := range r1.Receipts {
		if rc.SkuId != "tee" || rc.ItemIndex != 0 || e.redis[rc.Node] == nil || !strings.HasPrefix(rc.RedoLog, "inv:redo:") || rc.Offset < 1 {
			t.Fatalf("bad receipt %v", rc)
		}
	}
	if dl := time.UnixMilli(r1.DeadlineUnixMs); dl.Before(before.Add(299*time.Second)) || dl.After(time.Now().Add(301*time.Second)) {
		t.Fatalf("deadline %v, want 300s from now", dl)
	}
	again := e.mustReserve("o-1", "alice", 300, svcItem("clothes", "tee", 5)) // idempotent
	if len(again.Receipts) != len(r1.Receipts) || !proto.Equal(again.Receipts[0], r1.Receipts[0]) {
		t.Fatalf("Reserve retry of o-1 = %v, want the same receipts %v", again.Receipts, r1.Receipts)
	}
	svcWantStock(t, e.stock("clothes", "tee"), 95, 5, 0, 100)
	for range 2 { // idempotent
		if c, err := e.confirm("o-1"); err != nil || c.OrderId != "o-1" || c.Status != v1.OrderStatus_ORDER_STATUS_CONFIRMED || c.PendingParts != 0 {
			t.Fatalf("Confirm o-1 = %v, %v", c, err)
		}
	}
	svcWantStock(t, e.stock("clothes", "tee"), 95, 0, 5, 100)
	r2 := e.mustReserve("o-2", "", 0, svcItem("clothes", "tee", 3))
	svcWantStock(t, e.stock("clothes", "tee"), 92, 3, 5, 100)
	if c, err := e.cancel("o-2"); err != nil || c.Status != v1.OrderStatus_ORDER_STATUS_CANCELLED || c.PendingParts != 0 || c.Reason == "tombstone" {
		t.Fatalf("Cancel o-2 = %v, %v", c, err)
	}
	svcWantStock(t, e.stock("clothes", "tee"), 95, 0, 5, 100)
	if c, err := e.cancel("o-never"); err != nil || c.Status != v1.OrderStatus_ORDER_STATUS_CANCELLED || c.Reason != "tombstone" {
		t.Fatalf("Cancel of an unknown order = %v, %v; want CANCELLED/tombstone", c, err)
	}

	ln, err := e.admin.ListNodes(ctx, connect.NewRequest(&v1.ListNodesRequest{}))
	if err != nil || len(ln.Msg.Nodes) != 3 {
		t.Fatalf("ListNodes = %v, %v", ln, err)
	}
	for i, n := range ln.Msg.Nodes {
		if n.Name != e.names[i] || n.Addr != e.redis[n.Name].Addr() || n.State != v1.NodeState_NODE_STATE_UP ||
			n.Breaker != "closed" || n.Incarnation == "" || n.DownReason != "" ||
			len(n.Routes) != 1 || n.Routes[0].Server != "inventory" || n.Routes[0].Route != "clothes" || !n.Routes[0].Enabled {
			t.Fatalf("ListNodes[%d] = %v", i, n)
		}
	}

	// Every receipt names its redo-log entry, which shows the part's state now.
	queue := func(rc *v1.Receipt) int32 {
		q, _ := strconv.Atoi(strings.TrimPrefix(rc.RedoLog, "inv:redo:"))
		return int32(q)
	}
	for order, rs := range map[string][]*v1.Receipt{"o-1": r1.Receipts, "o-2": r2.Receipts} {
		for _, rc := range rs {
			rr, err := e.admin.ReadRedoLog(ctx, connect.NewRequest(&v1.ReadRedoLogRequest{
				Node: rc.Node, Queue: queue(rc), AfterOffset: rc.Offset - 1, Limit: 1}))
			if err != nil || rr.Msg.Node != rc.Node || rr.Msg.RedoLog != rc.RedoLog || len(rr.Msg.Entries) != 1 {
				t.Fatalf("ReadRedoLog for %v = %v, %v", rc, rr, err)
			}
			en, state := rr.Msg.Entries[0], map[string]string{"o-1": "confirmed", "o-2": "cancelled"}[order]
			if en.Offset != rc.Offset || en.OrderId != order || en.SkuId != "tee" || en.Quantity != rc.Quantity ||
				en.State != state || !strings.HasPrefix(en.PartId, order+"|") || time.Since(time.UnixMilli(en.AtUnixMs)) > time.Minute {
				t.Fatalf("redo entry %v for receipt %v, want order %s state %s", en, rc, order, state)
			}
		}
	}
	rc := r1.Receipts[0]
	for _, off := range []int64{rc.Offset, rc.Offset - 1} { // never lowered
		ack, err := e.admin.AckRedoLog(ctx, connect.NewRequest(&v1.AckRedoLogRequest{Node: rc.Node, Queue: queue(rc), Offset: off}))
		if err != nil || ack.Msg.AckedOffset != rc.Offset {
			t.Fatalf("AckRedoLog(%d) = %v, %v; want acked %d", off, ack, err, rc.Offset)
		}
	}

	// Drain n1 for clothes: new stock and reservations skip it.
	drain := func(enabled bool) {
		sr, err := e.admin.SetRouteEnabled(ctx, connect.NewRequest(&v1.SetRouteEnabledRequest{
			Node: "n1", Server: "inventory", Route: "clothes", Enabled: enabled}))
		ln, lerr := e.admin.ListNodes(ctx, connect.NewRequest(&v1.ListNodesRequest{}))
		if err != nil || lerr != nil || sr.Msg.Node.Name != "n1" || len(sr.Msg.Node.Routes) != 1 || sr.Msg.Node.Routes[0].Enabled != enabled ||
			ln.Msg.Nodes[0].Routes[0].Enabled != enabled || !ln.Msg.Nodes[1].Routes[0].Enabled {
			t.Fatalf("SetRouteEnabled(n1, %v) = %v, %v; ListNodes %v, %v", enabled, sr, err, ln, lerr)
		}
	}
	drain(false)
	for _, n := range e.load("clothes", "hat", 10, 0).Nodes {
		if want := map[bool]int64{true: 0, false: 5}[n.Node == "n1"]; n.Loaded != want {
			t.Fatalf("hat loaded on drained n1: %v", n)
		}
	}
	e.load("clothes", "tee", 30, 0) // n2 and n3 only
	for _, rc := range e.mustReserve("o-3", "", 0, svcItem("clothes", "tee", 40)).Receipts {
		if rc.Node == "n1" {
			t.Fatalf("Reserve took from drained n1: %v", rc)
		}
	}
	drain(true)
	svcWantStock(t, e.stock("clothes", "tee"), 85, 40, 5, 130)
}

// TestSvcGRPCAndJSON runs calls over gRPC (h2c) and as plain JSON posts
// (the README's curl examples), checking the proto3 JSON mapping.
func TestSvcGRPCAndJSON(t *testing.T) {
	t.Parallel()
	e := newSvcEnv(t, svcOpts{})
	ctx := svcCtx(t)
	ginv, gadmin := e.svcGRPC()
	svcOK(t)(ginv.LoadStock(ctx, connect.NewRequest(&v1.LoadStockRequest{RouteKey: "clothes", SkuId: "g", Quantity: 10})))
	gr, err := ginv.Reserve(ctx, connect.NewRequest(&v1.ReserveRequest{OrderId: "g-1", Items: []*v1.Item{svcItem("clothes", "g", 4)}}))
	if err != nil || svcSum(gr.Msg.Receipts) != 4 {
		t.Fatalf("gRPC Reserve = %v, %v", gr, err)
	}
	gs, err := svcMsg(ginv.GetStock(ctx, connect.NewRequest(&v1.GetStockRequest{RouteKey: "clothes", SkuId: "g"})))
	svcOK(t)(gs, err)
	svcWantStock(t, gs.Stock, 6, 4, 0, 10)
	if gc, err := ginv.Confirm(ctx, connect.NewRequest(&v1.ConfirmRequest{OrderId: "g-1"})); err != nil || gc.Msg.Status != v1.OrderStatus_ORDER_STATUS_CONFIRMED {
		t.Fatalf("gRPC Confirm = %v, %v", gc, err)
	}
	if gl, err := gadmin.ListNodes(ctx, connect.NewRequest(&v1.ListNodesRequest{})); err != nil || len(gl.Msg.Nodes) != 3 {
		t.Fatalf("gRPC ListNodes = %v, %v", gl, err)
	}
	_, err = ginv.Reserve(ctx, connect.NewRequest(&v1.ReserveRequest{OrderId: "g-2", Items: []*v1.Item{svcItem("clothes", "g", 0)}}))
	svcWantCode(t, "gRPC Reserve quantity 0", err, connect.CodeInvalidArgument, "items[0].quantity")
	_, err = ginv.Reserve(ctx, connect.NewRequest(&v1.ReserveRequest{OrderId: "g-3", Items: []*v1.Item{svcItem("clothes", "g", 7)}}))
	svcWantCode(t, "gRPC Reserve short", err, connect.CodeFailedPrecondition, "insufficient stock", `sku "g"`)
	svcWantStock(t, e.stock("clothes", "g"), 6, 0, 4, 10)

	const inv = "/shardis.v1.InventoryService/"
	code, m := e.svcPostJSON(inv+"LoadStock", `{"routeKey":"clothes","skuId":"tshirt-red","quantity":"100","perUserLimit":"2"}`)
	if s, _ := m["stock"].(map[string]any); code != 200 || s == nil || svcJSONInt(t, s, "loaded") != 100 {
		t.Fatalf("JSON LoadStock: %d %v", code, m)
	}
	code, m = e.svcPostJSON(inv+"Reserve", `{"orderId":"o-1","userId":"alice","ttlSeconds":300,"items":[{"routeKey":"clothes","skuId":"tshirt-red","quantity":"2"}]}`)
	if code != 200 || svcJSONStr(t, m, "orderId") != "o-1" || m["order_id"] != nil || time.Until(time.UnixMilli(svcJSONInt(t, m, "deadlineUnixMs"))) < 290*time.Second {
		t.Fatalf("JSON Reserve: %d %v", code, m)
	}
	var sum int64
	for _, x := range m["receipts"].([]any) {
		r := x.(map[string]any)
		sum += svcJSONInt(t, r, "quantity")
		if svcJSONStr(t, r, "skuId") != "tshirt-red" || svcJSONInt(t, r, "offset") < 1 || r["sku_id"] != nil ||
			!strings.HasPrefix(svcJSONStr(t, r, "redoLog"), "inv:redo:") || e.redis[svcJSONStr(t, r, "node")] == nil {
			t.Fatalf("JSON receipt %v", r)
		}
	}
	if sum != 2 {
		t.Fatalf("JSON receipts sum %d, want 2: %v", sum, m)
	}
	code, m = e.svcPostJSON(inv+"GetStock", `{"routeKey":"clothes","skuId":"tshirt-red"}`)
	s, _ := m["stock"].(map[string]any)
	if code != 200 || s == nil || svcJSONStr(t, s, "skuId") != "tshirt-red" || svcJSONInt(t, s, "available") != 98 ||
		svcJSONInt(t, s, "reserved") != 2 || svcJSONInt(t, s, "loaded") != 100 || svcJSONInt(t, s, "perUserLimit") != 2 || s["per_user_limit"] != nil {
		t.Fatalf("JSON GetStock: %d %v", code, m)
	}
	if n := s["nodes"].([]any)[0].(map[string]any); n["reachable"] != true || svcJSONInt(t, n, "loaded") < 33 {
		t.Fatalf("JSON node stock %v", n)
	}
	code, m = e.svcPostJSON(inv+"Confirm", `{"orderId":"o-1"}`)
	if code != 200 || m["status"] != "ORDER_STATUS_CONFIRMED" || m["orderId"] != "o-1" {
		t.Fatalf("JSON Confirm: %d %v", code, m)
	}
	// A minted order id names the node that holds its record.
	code, m = e.svcPostJSON(inv+"NewOrderId", `{}`)
	minted, home := svcJSONStr(t, m, "orderId"), svcJSONStr(t, m, "node")
	if code != 200 || e.home(minted) != home || e.clients[home] == nil {
		t.Fatalf("JSON NewOrderId: %d %v (home %s)", code, m, e.home(minted))
	}
	code, m = e.svcPostJSON(inv+"Reserve", `{"orderId":"`+minted+`","userId":"bob","items":[{"routeKey":"clothes","skuId":"tshirt-red","quantity":"1"}]}`)
	if code != 200 || svcJSONStr(t, m, "orderId") != minted {
		t.Fatalf("JSON Reserve of minted %s: %d %v", minted, code, m)
	}
	if n := e.clients[home].Exists(context.Background(), "inv:order:"+minted).Val(); n != 1 {
		t.Fatalf("minted order %s has no record on %s", minted, home)
	}
	code, m = e.svcPostJSON(inv+"Reserve", `{"orderId":"o-3","items":[{"routeKey":"clothes","skuId":"tshirt-red","quantity":"0"}]}`)
	if code != 400 || m["code"] != "invalid_argument" || !strings.Contains(fmt.Sprint(m["message"]), "items[0].quantity") {
		t.Fatalf("JSON Reserve quantity 0: %d %v", code, m)
	}
}

// TestSvcErrorCodes checks every code of the README's table, each with a
// message naming the field, SKU, order or user, and that the service
// carries on afterwards.
func TestSvcErrorCodes(t *testing.T) {
	t.Parallel()
	e := newSvcEnv(t, svcOpts{maxBody: 4096})
	ctx := svcCtx(t)
	e.load("clothes", "tee", 300, 0)
	e.load("clothes", "scarce", 5, 0)
	e.load("clothes", "limited", 100, 2)
	tee := func(q int64) *v1.Item { return svcItem("clothes", "tee", q) }

	many := slices.Repeat([]*v1.Item{tee(1)}, 101)
	for _, c := range []struct {
		name, order string
		items       []*v1.Item
		ttl         int32
		subs        []string
	}{
		{"empty order id", "", []*v1.Item{tee(1)}, 0, []string{"order_id is empty"}},
		{"200-byte order id", strings.Repeat("o", 200), []*v1.Item{tee(1)}, 0, []string{"order_id is 200 bytes"}},
		{"quantity 0", "i-1", []*v1.Item{tee(0)}, 0, []string{"items[0].quantity is 0"}},
		{"quantity -1", "i-1", []*v1.Item{tee(2), tee(-1)}, 0, []string{"items[1].quantity is -1"}},
		{"quantity 10^12", "i-1", []*v1.Item{tee(1_000_000_000_000)}, 0, []string{"items[0].quantity is 1000000000000"}},
		{"no items", "i-1", nil, 0, []string{"items is empty"}},
		{"101 items", "i-1", many, 0, []string{"items"}},
		{"unknown route", "i-1", []*v1.Item{tee(1), svcItem("nope", "tee", 1)}, 0, []string{"items[1]", `route_key "nope"`}},
		{"empty sku", "i-1", []*v1.Item{svcItem("clothes", "", 1)}, 0, []string{"items[0].sku_id is empty"}},
		{"negative ttl", "i-1", []*v1.Item{tee(1)}, -5, []string{"ttl_seconds"}},
	} {
		_, err := e.reserve(c.order, "", c.ttl, c.items...)
		svcWantCode(t, "Reserve with "+c.name, err, connect.CodeInvalidArgument, c.subs...)
	}
	_, err := e.admin.SetRouteEnabled(ctx, connect.NewRequest(&v1.SetRouteEnabledRequest{Node: "n9", Server: "inventory", Route: "clothes"}))
	svcWantCode(t, "SetRouteEnabled unknown node", err, connect.CodeInvalidArgument, `"n9"`)
	_, err = e.inv.LoadStock(ctx, connect.NewRequest(&v1.LoadStockRequest{RouteKey: "clothes", SkuId: "x", Quantity: 0}))
	svcWantCode(t, "LoadStock quantity 0", err, connect.CodeInvalidArgument, "quantity is 0")
	_, err = e.confirm("")
	svcWantCode(t, "Confirm empty id", err, connect.CodeInvalidArgument, "order_id is empty")
	for body, sub := range map[string]string{
		`{"orderId":"j-1","items":[`: "",
		`{"orderId":"j-1","items":[{"routeKey":"clothes","skuId":"tee","quantity":{}}]}`: "quantity",
		`{"orderId":7,"items":[]}`:     "orderId",
		`{"orderId":"j-1","itemz":[]}`: `unknown field "itemz"`, // unknown fields are refused
	} {
		code, m := e.svcPostJSON("/shardis.v1.InventoryService/Reserve", body)
		if code != 400 || m["code"] != "invalid_argument" || !strings.Contains(fmt.Sprint(m["message"]), sub) {
			t.Fatalf("JSON %s: HTTP %d %v, want 400 invalid_argument naming %q", body, code, m, sub)
		}
	}
	svcWantStock(t, e.stock("clothes", "tee"), 300, 0, 0, 300) // refused calls took nothing

	// failed_precondition
	_, err = e.reserve("f-short", "", 0, tee(2), svcItem("clothes", "scarce", 6))
	svcWantCode(t, "Reserve beyond stock", err, connect.CodeFailedPrecondition, "insufficient stock", "scarce")
	svcWantStock(t, e.stock("clothes", "tee"), 300, 0, 0, 300) // the tee part was rolled back
	e.mustReserve("f-cc", "", 0, tee(1))
	svcOK(t)(e.cancel("f-cc"))
	_, err = e.confirm("f-cc")
	svcWantCode(t, "Confirm after Cancel", err, connect.CodeFailedPrecondition, "order cancelled", `"f-cc"`)
	e.mustReserve("f-conf", "", 0, tee(1))
	svcOK(t)(e.confirm("f-conf"))
	_, err = e.cancel("f-conf")
	svcWantCode(t, "Cancel after Confirm", err, connect.CodeFailedPrecondition, "already confirmed", `"f-conf"`)
	_, err = e.reserve("f-conf", "", 0, tee(2))
	svcWantCode(t, "Reserve of an order id with other items", err, connect.CodeFailedPrecondition, "reused", `"f-conf"`)
	svcOK(t)(e.cancel("f-tomb"))
	_, err = e.reserve("f-tomb", "", 0, tee(1))
	svcWantCode(t, "Reserve of a cancelled order id", err, connect.CodeFailedPrecondition, "order cancelled", `"f-tomb"`)
	e.mustReserve("f-alice-1", "alice", 0, svcItem("clothes", "limited", 2))
	_, err = e.reserve("f-alice-2", "alice", 0, svcItem("clothes", "limited", 1))
	svcWantCode(t, "Reserve past the per-user limit", err, connect.CodeFailedPrecondition, "per-user limit", `"alice"`, "limited")
	e.mustReserve("f-bob-1", "bob", 0, svcItem("clothes", "limited", 2))
	svcWantStock(t, e.stock("clothes", "limited"), 96, 4, 0, 100)
	exp := e.mustReserve("f-exp", "", 1, tee(3))
	svcWantStock(t, e.stock("clothes", "tee"), 296, 3, 1, 300)
	invUntil(time.UnixMilli(exp.DeadlineUnixMs).Add(50 * time.Millisecond))
	_, err = e.confirm("f-exp")
	svcWantCode(t, "Confirm after expiry", err, connect.CodeFailedPrecondition, "reservation expired", `"f-exp"`)
	svcWantStock(t, e.stock("clothes", "tee"), 299, 0, 1, 300) // Confirm returned the expired stock

	// not_found; aborted (an attempt still holds the order: its record, made by hand)
	_, err = e.confirm("f-unknown")
	svcWantCode(t, "Confirm of an unknown order", err, connect.CodeNotFound, "order not reserved", `"f-unknown"`, "never reserved")
	now := time.Now().UnixMilli()
	if err := e.clients[e.home("f-busy")].HSet(ctx, "inv:order:f-busy", "status", "reserving", "token", "t",
		"lease", now+60_000, "deadline", now+600_000, "digest", "d").Err(); err != nil {
		t.Fatal(err)
	}
	_, err = e.confirm("f-busy")
	svcWantCode(t, "Confirm while reserving", err, connect.CodeAborted, `"f-busy"`)

	// An oversized body is resource_exhausted naming the limit in every
	// protocol, sized or chunked, as grpc-go and connect-go answer an
	// oversized message; the service carries on.
	huge := strings.Repeat("x", 1<<20)
	_, err = e.reserve(huge, "", 0, tee(1))
	svcWantCode(t, "Connect 1 MiB Reserve", err, connect.CodeResourceExhausted, "4096", "max_body_bytes")
	ginv, _ := e.svcGRPC()
	_, err = ginv.Reserve(ctx, connect.NewRequest(&v1.ReserveRequest{OrderId: huge, Items: []*v1.Item{tee(1)}}))
	svcWantCode(t, "gRPC 1 MiB Reserve", err, connect.CodeResourceExhausted, "4096")
	body := []byte(`{"orderId":"` + huge + `","items":[]}`)
	for name, r := range map[string]io.Reader{"sized": bytes.NewReader(body), "chunked": io.MultiReader(bytes.NewReader(body))} {
		code, m := svcPost(t, e.hc, e.base+"/shardis.v1.InventoryService/Reserve", "", r)
		if code != http.StatusTooManyRequests || m["code"] != "resource_exhausted" || !strings.Contains(fmt.Sprint(m["message"]), "4096") {
			t.Fatalf("JSON 1 MiB body (%s): HTTP %d %v, want 429 resource_exhausted", name, code, m)
		}
	}
	e.mustReserve("f-after", "", 0, tee(1))
}

// TestSvcHealthMetricsUnavailable checks /healthz and /metrics after some
// calls, then kills nodes under the service: calls that need them fail
// with unavailable naming what is missing, the rest carry on, and health
// and metrics show the node down until it is back.
func TestSvcHealthMetricsUnavailable(t *testing.T) {
	t.Parallel()
	e := newSvcEnv(t, svcOpts{routes: map[string][]string{"clothes": {"n1", "n2", "n3"}, "shoes": {"n3"}}})
	if code, body := svcGet(t, e.base+"/healthz"); code != 200 || !strings.HasPrefix(body, "ok: 3/3 nodes up") {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	e.load("clothes", "tee", 50, 0)
	e.load("clothes", "few", 2, 0)
	e.load("shoes", "boot", 10, 0)
	r1 := e.mustReserve("m-1", "", 0, svcItem("clothes", "tee", 5))
	svcOK(t)(e.confirm("m-1"))
	_, err := e.reserve("m-2", "", 0, svcItem("clothes", "tee", 1), svcItem("clothes", "few", 5))
	svcWantCode(t, "Reserve m-2", err, connect.CodeFailedPrecondition, "few")
	r3 := e.mustReserve("m-3", "", 1, svcItem("clothes", "tee", 2)) // left to expire
	// Scraped until the reconciler cancelled m-3 and every node's redo
	// gauge is in: a scrape leaves out a node whose reads passed their
	// 500 ms (internal/metrics, nodeReadTimeout), as one did beside two
	// other suites on 2 cores.
	var m map[string]float64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		m = e.svcMetrics()
		done := m[`shardis_reconciler_parts_total{action="cancelled"}`] >= 1
		for _, n := range e.names {
			_, in := m[`shardis_redo_log_entries{node="`+n+`"}`]
			done = done && in
		}
		if done || time.Now().After(deadline) {
			break
		}
	}
	var redo float64
	for _, n := range e.names {
		l := `node="` + n + `"`
		if svcMetric(t, m, "shardis_node_up", l) != 1 || svcMetric(t, m, "shardis_node_breaker_state", l) != 0 ||
			svcMetric(t, m, "shardis_command_duration_seconds_count", l) < 1 {
			t.Fatalf("metrics of %s: %v", n, m)
		}
		redo += svcMetric(t, m, "shardis_redo_log_entries", l)
	}
	// m-2 could not be met (few: 2 units over the route, no holds): it is
	// refused by reads alone, takes nothing and leaves no redo entry
	// (inventory/soldout.go).
	if svcMetric(t, m, "shardis_reservations_total", `outcome="ok"`) != 2 ||
		svcMetric(t, m, "shardis_reservations_total", `outcome="insufficient"`) != 1 ||
		svcMetric(t, m, "shardis_reserve_fast_path_total", `path="refused_unwritten"`) != 1 ||
		svcMetric(t, m, "shardis_parts_rolled_back_total", "") != 0 ||
		svcMetric(t, m, "shardis_reconciler_parts_total", `action="cancelled"`) < 1 ||
		svcMetric(t, m, "shardis_reconciler_parts_total", `action="confirmed"`) != 0 ||
		redo < float64(len(r1.Receipts)+len(r3.Receipts)) {
		t.Fatalf("metrics after the calls (redo entries %v): %v", redo, m)
	}
	// Every reserve ran at least one grouped script; a script call carries
	// at least one call.
	if sent, carried := svcMetric(t, m, "shardis_group_commit_script_calls_total", ""), svcMetric(t, m, "shardis_group_commit_calls_total", ""); sent < 3 || carried < sent {
		t.Fatalf("group commit metrics: %v script calls carrying %v calls", sent, carried)
	}
	if c := svcMetric(t, m, "shardis_carried_commits_total", ""); c < 0 || c > 2 {
		t.Fatalf("shardis_carried_commits_total is %v after two reserved orders, want 0 to 2", c)
	}
	svcWantStock(t, e.stock("clothes", "tee"), 45, 0, 5, 50) // m-3 returned by the reconciler

	onN3 := e.orderID("u-home", func(h string) bool { return h == "n3" })
	away := e.orderID("u-away", func(h string) bool { return h != "n3" })
	e.redis["n3"].Kill()
	e.svcWaitState("n3", v1.NodeState_NODE_STATE_DOWN, 5*time.Second)
	_, err = e.reserve(away, "", 0, svcItem("shoes", "boot", 1))
	svcWantCode(t, "Reserve on a route whose only node is down", err, connect.CodeUnavailable, "shoes", "boot")
	_, err = e.reserve(onN3, "", 0, svcItem("clothes", "tee", 1))
	svcWantCode(t, "Reserve of an order homed on a down node", err, connect.CodeUnavailable, "n3", onN3)
	_, err = e.confirm(onN3)
	svcWantCode(t, "Confirm of an order homed on a down node", err, connect.CodeUnavailable, "n3")
	_, err = e.inv.LoadStock(svcCtx(t), connect.NewRequest(&v1.LoadStockRequest{RouteKey: "shoes", SkuId: "boot", Quantity: 1}))
	svcWantCode(t, "LoadStock on a route whose only node is down", err, connect.CodeUnavailable, "shoes")
	for _, rc := range e.mustReserve(away, "", 0, svcItem("clothes", "tee", 15)).Receipts { // a failed id may be retried
		if rc.Node == "n3" {
			t.Fatalf("Reserve took from down n3: %v", rc)
		}
	}
	if st := e.stock("clothes", "tee"); st.Reserved != 15 || st.Nodes[2].Reachable || !strings.Contains(st.Nodes[2].Error, "n3") ||
		!st.Nodes[0].Reachable || st.Available+st.Reserved+st.Confirmed != st.Loaded {
		t.Fatalf("GetStock with n3 down: %v", st)
	}
	if code, body := svcGet(t, e.base+"/healthz"); code != 200 || !strings.Contains(body, "2/3 nodes up") {
		t.Fatalf("/healthz with n3 down: %d %q", code, body)
	}
	m = e.svcMetrics()
	if svcMetric(t, m, "shardis_node_up", `node="n3"`) != 0 || svcMetric(t, m, "shardis_node_up", `node="n1"`) != 1 ||
		svcMetric(t, m, "shardis_probe_failures_total", `node="n3"`) < 1 ||
		svcMetric(t, m, "shardis_node_breaker_state", `node="n3"`) > 2 ||
		svcMetric(t, m, "shardis_reservations_total", `outcome="unavailable"`) != 2 ||
		svcMetric(t, m, "shardis_reservations_total", `outcome="ok"`) != 3 {
		t.Fatalf("metrics with n3 down: %v", m)
	}

	e.redis["n3"].Restart()
	e.svcWaitState("n3", v1.NodeState_NODE_STATE_UP, 10*time.Second)
	if code, body := svcGet(t, e.base+"/healthz"); code != 200 || !strings.Contains(body, "3/3 nodes up") {
		t.Fatalf("/healthz after restart: %d %q", code, body)
	}
	e.mustReserve(onN3, "", 0, svcItem("clothes", "tee", 1))
}

// TestSvcAuth checks the bearer token on every protocol, and that health
// and metrics stay open.
func TestSvcAuth(t *testing.T) {
	t.Parallel()
	e := newSvcEnv(t, svcOpts{token: "s3cret"})
	e.load("clothes", "tee", 10, 0)
	for _, tok := range []string{"", "wrong", "raw:s3cret", "raw:Basic s3cret", "raw:bearer s3cret"} {
		inv := shardisv1connect.NewInventoryServiceClient(e.hc, e.base, svcBearer(tok))
		_, err := inv.Reserve(svcCtx(t), connect.NewRequest(&v1.ReserveRequest{OrderId: "a-1", Items: []*v1.Item{svcItem("clothes", "tee", 1)}}))
		svcWantCode(t, "Reserve with token "+tok, err, connect.CodeUnauthenticated, "token")
		if strings.Contains(err.Error(), "s3cret") {
			t.Fatalf("error leaks the token: %v", err)
		}
		admin := shardisv1connect.NewAdminServiceClient(e.hc, e.base, svcBearer(tok))
		_, err = admin.ListNodes(svcCtx(t), connect.NewRequest(&v1.ListNodesRequest{}))
		svcWantCode(t, "ListNodes with token "+tok, err, connect.CodeUnauthenticated)
	}
	g := shardisv1connect.NewInventoryServiceClient(svcH2C(t), e.base, connect.WithGRPC())
	_, err := g.GetStock(svcCtx(t), connect.NewRequest(&v1.GetStockRequest{RouteKey: "clothes", SkuId: "tee"}))
	svcWantCode(t, "gRPC GetStock without token", err, connect.CodeUnauthenticated)
	code, m := svcPost(t, e.hc, e.base+"/shardis.v1.InventoryService/GetStock", "", strings.NewReader(`{"routeKey":"clothes","skuId":"tee"}`))
	if code != http.StatusUnauthorized || m["code"] != "unauthenticated" {
		t.Fatalf("JSON without token: %d %v", code, m)
	}
	for _, p := range []string{"/healthz", "/metrics"} {
		if code, _ := svcGet(t, e.base+p); code != 200 {
			t.Fatalf("GET %s without token: HTTP %d", p, code)
		}
	}
	svcWantStock(t, e.stock("clothes", "tee"), 10, 0, 0, 10) // refused calls took nothing
	e.mustReserve("a-1", "", 0, svcItem("clothes", "tee", 1))
}

// TestSvcGracefulShutdown shuts the service down under 32 concurrent
// Reserve+Confirm loops (half Connect over HTTP/1.1, half gRPC over h2c):
// Shutdown waits for the calls in flight, every call either completed or
// was refused before it was accepted, and the nodes hold exactly what the
// clients were told.
func TestSvcGracefulShutdown(t *testing.T) {
	t.Parallel()
	e := newSvcEnv(t, svcOpts{})
	const loaded = 1_000_000
	skus := [2]string{"tee", "cap"}
	for _, s := range skus {
		e.load("clothes", s, loaded, 0)
	}
	ginv, _ := e.svcGRPC()
	var (
		mu                  sync.Mutex
		seen                = map[string]*svcOutcome{}
		calls, shutAt, late atomic.Int64
		codes               invCounter
		wg                  sync.WaitGroup
	)
	for g := range 32 {
		cl := e.inv
		if g%2 == 1 {
			cl = ginv
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				id := fmt.Sprintf("sd-%d-%d", g, i)
				o := &svcOutcome{qty: [2]int64{int64(1 + i%3), int64(g % 2)}}
				items := []*v1.Item{svcItem("clothes", "tee", o.qty[0])}
				if o.qty[1] > 0 {
					items = append(items, svcItem("clothes", "cap", o.qty[1]))
				}
				mu.Lock()
				seen[id] = o
				mu.Unlock()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				start := time.Now().UnixNano()
				_, o.reserveErr = cl.Reserve(ctx, connect.NewRequest(&v1.ReserveRequest{OrderId: id, Items: items}))
				if at := shutAt.Load(); o.reserveErr == nil && at != 0 && start < at {
					late.Add(1) // in flight when Shutdown began, and completed
				}
				if o.reserveErr == nil {
					var c *connect.Response[v1.ConfirmResponse]
					c, o.confirmErr = cl.Confirm(ctx, connect.NewRequest(&v1.ConfirmRequest{OrderId: id}))
					if o.confirmed = o.confirmErr == nil; o.confirmed && (c.Msg.Status != v1.OrderStatus_ORDER_STATUS_CONFIRMED || c.Msg.PendingParts != 0) {
						t.Errorf("Confirm %s = %v", id, c.Msg)
					}
				}
				cancel()
				calls.Add(1)
				if err := errors.Join(o.reserveErr, o.confirmErr); err != nil {
					codes.add(connect.CodeOf(err).String())
					if !svcConnErr(err) {
						t.Errorf("order %s: %v (code %v), want a connection error", id, err, connect.CodeOf(err))
					}
					return
				}
			}
		}()
	}
	for deadline := time.Now().Add(20 * time.Second); calls.Load() < 300 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	shutAt.Store(time.Now().UnixNano())
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err := e.srv.Shutdown(sctx)
	cancel()
	wg.Wait()
	if err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-e.srv.Done(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Done after Shutdown: %v", err)
	}
	t.Logf("%d calls, %d in flight at Shutdown completed; errors by code: %v", calls.Load(), late.Load(), &codes)
	if late.Load() == 0 {
		t.Errorf("no Reserve in flight when Shutdown began completed: were calls cut off?")
	}
	e.svcCheckOrders(seen, skus, loaded)

	// A second service over the same nodes sees the same stock and carries on.
	srv2 := svcStart(t, e.cfg)
	for _, s := range skus {
		checkInvariant(t, srv2.Inv, "clothes", s, loaded)
	}
	inv2 := shardisv1connect.NewInventoryServiceClient(e.hc, "http://"+srv2.Addr())
	for id, o := range seen {
		switch {
		case o.reserveErr == nil && !o.confirmed:
			_, err = inv2.Confirm(svcCtx(t), connect.NewRequest(&v1.ConfirmRequest{OrderId: id}))
		case o.reserveErr != nil:
			_, err = inv2.Reserve(svcCtx(t), connect.NewRequest(&v1.ReserveRequest{OrderId: id, Items: []*v1.Item{svcItem("clothes", "tee", 1)}}))
		}
		if err != nil {
			t.Fatalf("order %s on the second service: %v", id, err)
		}
	}
}
