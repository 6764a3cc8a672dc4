package tests

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	gstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/shardis/shardis/internal/syncbuf"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
)

// The service's protobuf and gRPC conventions (issue 26 §2) and what a new
// operator meets on the wire (§4), over real gRPC (a grpc-go client),
// gRPC-Web and Connect JSON against a real service over real nodes.

const reservePath = "/shardis.v1.InventoryService/Reserve"

// svcGRPCGo dials the service with a grpc-go client (plaintext HTTP/2).
func (e *svcEnv) svcGRPCGo() *grpc.ClientConn {
	e.t.Helper()
	conn, err := grpc.NewClient(e.srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { conn.Close() })
	return conn
}

// withField99 returns m with an unknown varint field 99, as a client built
// from a newer .proto sends it.
func withField99[M proto.Message](m M) M {
	raw := protowire.AppendTag(nil, 99, protowire.VarintType)
	m.ProtoReflect().SetUnknown(protowire.AppendVarint(raw, 1))
	return m
}

// svcPostType POSTs body with a Content-Type and returns the status and
// body, followed by the grpc-message header of a trailers-only gRPC-Web
// answer, if any.
func (e *svcEnv) svcPostType(path, ctype string, body []byte) (int, string) {
	e.t.Helper()
	req, err := http.NewRequestWithContext(svcCtx(e.t), http.MethodPost, e.base+path, bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	res, err := e.hc.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if m := res.Header.Get("Grpc-Message"); m != "" {
		b = append(b, " grpc-message: "+m...)
	}
	return res.StatusCode, string(b)
}

// Binary protobuf accepts unknown fields (protobuf's compatibility rule):
// a Reserve carrying field 99 is served over gRPC (grpc-go), gRPC-Web and
// binary Connect. JSON stays strict: an unknown JSON field is refused
// naming it, over Connect and gRPC-Web JSON.
func TestSvcWireUnknownFields(t *testing.T) {
	t.Parallel()
	e := newSvcEnv(t, svcOpts{})
	e.load("clothes", "tee", 10, 0)
	reserve := func(id string) *v1.ReserveRequest {
		return withField99(&v1.ReserveRequest{OrderId: id, UserId: "erin", Items: []*v1.Item{svcItem("clothes", "tee", 1)}})
	}
	res := new(v1.ReserveResponse)
	if err := e.svcGRPCGo().Invoke(svcCtx(t), reservePath, reserve("w-grpc"), res); err != nil || svcSum(res.Receipts) != 1 {
		t.Fatalf("grpc-go Reserve with field 99: %v, %v; want served", res, err)
	}
	web := shardisv1connect.NewInventoryServiceClient(e.hc, e.base, connect.WithGRPCWeb())
	if r, err := web.Reserve(svcCtx(t), connect.NewRequest(reserve("w-web"))); err != nil || svcSum(r.Msg.Receipts) != 1 {
		t.Fatalf("gRPC-Web Reserve with field 99: %v; want served", err)
	}
	if r, err := e.inv.Reserve(svcCtx(t), connect.NewRequest(reserve("w-connect"))); err != nil || svcSum(r.Msg.Receipts) != 1 {
		t.Fatalf("Connect binary Reserve with field 99: %v; want served", err)
	}

	code, m := e.svcPostJSON(reservePath, `{"orderId":"w-json","userId":"erin","fieldNinetyNine":1,"items":[{"routeKey":"clothes","skuId":"tee","quantity":"1"}]}`)
	if code != http.StatusBadRequest || m["code"] != "invalid_argument" || !strings.Contains(fmt.Sprint(m["message"]), `"fieldNinetyNine"`) {
		t.Fatalf("Connect JSON Reserve with an unknown field: HTTP %d %v, want 400 invalid_argument naming it", code, m)
	}
	body := []byte(`{"orderId":"w-webjson","userId":"erin","fieldNinetyNine":1,"items":[{"routeKey":"clothes","skuId":"tee","quantity":"1"}]}`)
	frame := append([]byte{0, 0, 0, 0, byte(len(body))}, body...)
	code2, got := e.svcPostType(reservePath, "application/grpc-web+json", frame)
	if code2 != http.StatusOK || !strings.Contains(got, "fieldNinetyNine") {
		t.Fatalf("gRPC-Web JSON Reserve with an unknown field: HTTP %d %q, want a grpc-status naming the field", code2, got)
	}
	if st := e.stock("clothes", "tee"); st.Reserved != 3 {
		t.Errorf("reserved %d units, want 3 (the three binary orders only)", st.Reserved)
	}
}

// An oversized request is refused with resource_exhausted naming the
// limit, as grpc-go and connect-go answer an oversized message, over gRPC
// (grpc-go), gRPC-Web and Connect JSON; nothing is reserved.
func TestSvcWireOversized(t *testing.T) {
	t.Parallel()
	e := newSvcEnv(t, svcOpts{maxBody: 4096})
	e.load("clothes", "tee", 10, 0)
	big := &v1.ReserveRequest{OrderId: "w-big", UserId: strings.Repeat("u", 5000), Items: []*v1.Item{svcItem("clothes", "tee", 1)}}
	err := e.svcGRPCGo().Invoke(svcCtx(t), reservePath, big, new(v1.ReserveResponse))
	if st := gstatus.Convert(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "4096") {
		t.Fatalf("grpc-go Reserve of %d bytes: %v, want ResourceExhausted naming the limit 4096", proto.Size(big), err)
	}
	web := shardisv1connect.NewInventoryServiceClient(e.hc, e.base, connect.WithGRPCWeb())
	_, err = web.Reserve(svcCtx(t), connect.NewRequest(big))
	svcWantCode(t, "gRPC-Web Reserve of 5 KB", err, connect.CodeResourceExhausted, "4096")
	jsonc := shardisv1connect.NewInventoryServiceClient(e.hc, e.base, connect.WithProtoJSON())
	_, err = jsonc.Reserve(svcCtx(t), connect.NewRequest(big))
	svcWantCode(t, "Connect JSON Reserve of 5 KB", err, connect.CodeResourceExhausted, "4096")
	// curl sends the JSON with its length; a chunked body is read up to the limit.
	raw := `{"orderId":"w-big","userId":"` + strings.Repeat("u", 5000) + `"}`
	code, m := svcPost(t, e.hc, e.base+reservePath, "", io.MultiReader(strings.NewReader(raw)))
	if code != http.StatusTooManyRequests || m["code"] != "resource_exhausted" || !strings.Contains(fmt.Sprint(m["message"]), "4096") {
		t.Fatalf("chunked JSON Reserve of 5 KB: HTTP %d %v, want resource_exhausted naming 4096", code, m)
	}
	if st := e.stock("clothes", "tee"); st.Reserved != 0 {
		t.Errorf("oversized requests reserved %d units", st.Reserved)
	}
}

// A restock that does not send perUserLimit keeps the SKU's limit; a
// quantity of 0 with a limit changes only the limit; a quantity of 0
// without one is refused, naming the JSON fields.
func TestSvcLoadStockKeepsLimit(t *testing.T) {
	t.Parallel()
	e := newSvcEnv(t, svcOpts{})
	const path = "/shardis.v1.InventoryService/LoadStock"
	load := func(body string) map[string]any {
		t.Helper()
		code, m := e.svcPostJSON(path, body)
		if code != http.StatusOK {
			t.Fatalf("LoadStock %s: HTTP %d %v", body, code, m)
		}
		return m["stock"].(map[string]any)
	}
	load(`{"routeKey":"clothes","skuId":"tee","quantity":"10","perUserLimit":"2"}`)
	st := load(`{"routeKey":"clothes","skuId":"tee","quantity":"5"}`)
	if svcJSONInt(t, st, "perUserLimit") != 2 || svcJSONInt(t, st, "loaded") != 15 {
		t.Fatalf("restock without perUserLimit: %v, want limit 2 kept and 15 loaded", st)
	}
	st = load(`{"routeKey":"clothes","skuId":"tee","quantity":"0","perUserLimit":"3"}`)
	if svcJSONInt(t, st, "perUserLimit") != 3 || svcJSONInt(t, st, "loaded") != 15 {
		t.Fatalf("limit-only change: %v, want limit 3 and still 15 loaded", st)
	}
	st = load(`{"routeKey":"clothes","skuId":"tee","perUserLimit":"0"}`)
	if _, ok := st["perUserLimit"]; ok || svcJSONInt(t, st, "loaded") != 15 {
		t.Fatalf("limit removed (perUserLimit 0, no quantity): %v, want no limit and 15 loaded", st)
	}
	code, m := e.svcPostJSON(path, `{"routeKey":"clothes","skuId":"tee"}`)
	msg := fmt.Sprint(m["message"])
	if code != http.StatusBadRequest || m["code"] != "invalid_argument" || !strings.Contains(msg, "perUserLimit") || strings.Contains(msg, "per_user_limit") {
		t.Fatalf("LoadStock with neither quantity nor limit: HTTP %d %v, want invalid_argument naming perUserLimit", code, m)
	}
	// The binary API means the same: an absent limit keeps it.
	svcOK(t)(e.inv.LoadStock(svcCtx(t), connect.NewRequest(&v1.LoadStockRequest{RouteKey: "clothes", SkuId: "cap", Quantity: 4, PerUserLimit: proto.Int64(1)})))
	res, err := e.inv.LoadStock(svcCtx(t), connect.NewRequest(&v1.LoadStockRequest{RouteKey: "clothes", SkuId: "cap", Quantity: 4}))
	if err != nil || res.Msg.Stock.PerUserLimit != 1 {
		t.Fatalf("binary restock without a limit: %v, %v; want limit 1 kept", res, err)
	}
}

// svcLogs is a slog handler's output that tests can read while the
// service writes.
type svcLogs = syncbuf.Buffer

// Every answered request is counted in shardis_rpc_requests_total with
// the code it got and logged, including those the RPC layer refuses
// before a handler runs: bad JSON, an unknown JSON field, "1.5" as a
// quantity, a wrong Content-Type, an oversized body, a gRPC and a gRPC-Web
// body that is not protobuf.
func TestSvcEveryRequestCounted(t *testing.T) {
	t.Parallel()
	logs := &svcLogs{}
	e := newSvcEnv(t, svcOpts{maxBody: 4096, log: slog.New(slog.NewTextHandler(logs, nil))})
	e.load("clothes", "tee", 10, 0)
	before := e.svcMetrics()
	for _, body := range []string{
		`{"orderId":`,
		`{"orderId":"c-1","usr":"x","items":[{"routeKey":"clothes","skuId":"tee","quantity":"1"}]}`,
		`{"orderId":"c-2","items":[{"routeKey":"clothes","skuId":"tee","quantity":"1.5"}]}`,
	} {
		if code, _ := e.svcPostJSON(reservePath, body); code != http.StatusBadRequest {
			t.Fatalf("Reserve %s: HTTP %d, want 400", body, code)
		}
	}
	if code, _ := e.svcPostType(reservePath, "application/x-www-form-urlencoded", []byte("orderId=c-3")); code != http.StatusUnsupportedMediaType {
		t.Fatalf("form Reserve: HTTP %d, want 415", code)
	}
	if code, _ := e.svcPostJSON(reservePath, `{"orderId":"`+strings.Repeat("x", 5000)+`"}`); code == http.StatusOK {
		t.Fatalf("oversized Reserve: HTTP %d, want refused", code)
	}
	garbage := []byte{0, 0, 0, 0, 3, 0xff, 0xff, 0xff}
	grpcReq, _ := http.NewRequestWithContext(svcCtx(t), http.MethodPost, e.base+reservePath, bytes.NewReader(garbage))
	grpcReq.Header.Set("Content-Type", "application/grpc")
	grpcReq.Header.Set("Te", "trailers")
	res, err := svcH2C(t).Do(grpcReq)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.Trailer.Get("Grpc-Status") != "3" {
		t.Fatalf("gRPC Reserve of a body that is not protobuf: grpc-status %q (trailers %v), want 3", res.Trailer.Get("Grpc-Status"), res.Trailer)
	}
	if code, _ := e.svcPostType(reservePath, "application/grpc-web", garbage); code != http.StatusOK {
		t.Fatalf("gRPC-Web Reserve of a body that is not protobuf: HTTP %d", code)
	}
	e.mustReserve("c-ok", "", 0, svcItem("clothes", "tee", 1))

	after := e.svcMetrics()
	for code, want := range map[string]float64{"invalid_argument": 6, "resource_exhausted": 1, "ok": 1} {
		name := `shardis_rpc_requests_total{code="` + code + `",procedure="InventoryService/Reserve"}`
		if got := after[name] - before[name]; got != want {
			t.Errorf("%s went up by %v, want %v", name, got, want)
		}
	}
	var logged int
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "msg=rpc") && strings.Contains(line, "method=Reserve") &&
			(strings.Contains(line, "code=invalid_argument") || strings.Contains(line, "code=resource_exhausted")) {
			logged++
		}
	}
	if logged != 7 {
		t.Errorf("%d refused Reserves logged, want 7:\n%s", logged, logs.String())
	}
}

// A SKU never loaded on the route answers not_found naming the SKU and the
// route (not "insufficient stock … 0 available"); a sold-out SKU still
// answers failed_precondition; neither refusal writes an order record.
func TestSvcUnknownSKUNotFound(t *testing.T) {
	t.Parallel()
	e := newSvcEnv(t, svcOpts{})
	e.load("clothes", "tee", 1, 0)
	e.mustReserve("k-0", "", 0, svcItem("clothes", "tee", 1))
	svcOK(t)(e.confirm("k-0")) // sold, not held: a refusal of tee writes nothing (soldout.go)
	_, err := e.reserve("k-1", "", 0, svcItem("clothes", "nosuch", 1))
	svcWantCode(t, "Reserve of a SKU never loaded", err, connect.CodeNotFound, "nosuch", "clothes", "never loaded")
	_, err = e.reserve("k-2", "", 0, svcItem("clothes", "tee", 1))
	svcWantCode(t, "Reserve of a sold-out SKU", err, connect.CodeFailedPrecondition, "tee", "insufficient stock")
	// Again, with the sold-out hint set for both SKUs.
	_, err = e.reserve("k-3", "", 0, svcItem("clothes", "nosuch", 1))
	svcWantCode(t, "Reserve of a SKU never loaded, again", err, connect.CodeNotFound, "nosuch")
	for _, id := range []string{"k-1", "k-2", "k-3"} {
		for name, c := range e.clients {
			if n, err := c.Exists(svcCtx(t), "inv:order:"+id).Result(); err != nil || n != 0 {
				t.Errorf("refused order %s left a record on %s (%d, %v)", id, name, n, err)
			}
		}
	}
	// A limit set before any stock is not stock: still never loaded.
	svcOK(t)(e.inv.LoadStock(svcCtx(t), connect.NewRequest(&v1.LoadStockRequest{RouteKey: "clothes", SkuId: "later", PerUserLimit: proto.Int64(2)})))
	_, err = e.reserve("k-4", "u", 0, svcItem("clothes", "later", 1))
	svcWantCode(t, "Reserve of a SKU with a limit but no stock", err, connect.CodeNotFound, "later")
	// Counted as the caller's mistake, not as a failure of the system.
	if st := e.srv.Inv.Stats(); st.Reservations["unknown_sku"] != 3 || st.Reservations["error"] != 0 || st.Reservations["insufficient"] != 1 {
		t.Errorf("reservations by outcome %v, want unknown_sku 3 (k-1, k-3, k-4), insufficient 1 (k-2), error 0", st.Reservations)
	}
}

// Every wrong Content-Type gets 415 with a body naming the accepted
// types: curl's default form type, XML, text, none.
func TestSvcWrongContentTypes(t *testing.T) {
	t.Parallel()
	e := newSvcEnv(t, svcOpts{})
	for _, ct := range []string{"application/x-www-form-urlencoded", "application/xml", "text/plain", "application/grpc-web-text", ""} {
		code, body := e.svcPostType(reservePath, ct, []byte(`{"orderId":"x"}`))
		if code != http.StatusUnsupportedMediaType || !strings.Contains(body, "application/json") || !strings.Contains(body, "application/grpc") {
			t.Errorf("Content-Type %q: HTTP %d %q, want 415 naming the accepted types", ct, code, body)
		}
	}
	// The accepted ones with parameters still reach the service.
	if code, body := e.svcPostType(reservePath, "application/json; charset=utf-8", []byte(`{}`)); code != http.StatusBadRequest {
		t.Errorf("application/json; charset=utf-8: HTTP %d %q, want 400 (an empty order)", code, body)
	}
}

// Errors name the fields as the client sends them: JSON names for JSON
// clients, proto names for binary ones; the class is said once (no
// "items[0]: invalid argument: …").
func TestSvcErrorFieldNames(t *testing.T) {
	t.Parallel()
	e := newSvcEnv(t, svcOpts{})
	code, m := e.svcPostJSON(reservePath, `{"orderId":"","items":[{"routeKey":"clothes","skuId":"tee","quantity":"1"}]}`)
	if msg := fmt.Sprint(m["message"]); code != http.StatusBadRequest || !strings.Contains(msg, "orderId is empty") {
		t.Fatalf("JSON Reserve without orderId: HTTP %d %q, want it to name orderId", code, msg)
	}
	code, m = e.svcPostJSON(reservePath, `{"orderId":"f-1","items":[{"routeKey":"nope","skuId":"tee","quantity":"1"}]}`)
	if msg := fmt.Sprint(m["message"]); code != http.StatusBadRequest || !strings.HasPrefix(msg, `items[0]: routeKey "nope" is not a route`) {
		t.Fatalf("JSON Reserve of an unknown route: HTTP %d %q, want `items[0]: routeKey \"nope\" is not a route…`", code, msg)
	}
	err := e.svcGRPCGo().Invoke(svcCtx(t), reservePath, &v1.ReserveRequest{OrderId: "f-2",
		Items: []*v1.Item{svcItem("nope", "tee", 1)}}, new(v1.ReserveResponse))
	if st := gstatus.Convert(err); st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), `items[0]: route_key "nope" is not a route`) {
		t.Fatalf("gRPC Reserve of an unknown route: %v, want `items[0]: route_key \"nope\" is not a route…`", err)
	}
}
