package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

// Operator-facing behaviour of the service (issue 10): strict request
// decoding, readiness and gRPC health, reflection, error texts, the TTL
// cap in the reply, and per-RPC metrics.

// A JSON request with a field the API does not define is refused, naming
// the field; nothing is reserved. Binary protobuf accepts unknown fields
// (protobuf's compatibility rule: a client built from a newer .proto).
func TestSvcUnknownFieldsRefused(t *testing.T) {
	t.Parallel()
	e := newSvcEnv(t, svcOpts{})
	e.load("clothes", "tee", 10, 2)
	code, m := e.svcPostJSON("/shardis.v1.InventoryService/Reserve",
		`{"orderId":"u-1","user":"erin","items":[{"routeKey":"clothes","skuId":"tee","quantity":"1"}]}`)
	if code != http.StatusBadRequest || m["code"] != "invalid_argument" || !strings.Contains(fmt.Sprint(m["message"]), `"user"`) {
		t.Fatalf("Reserve with a misspelt userId: HTTP %d %v, want 400 invalid_argument naming \"user\"", code, m)
	}
	// Unknown field inside an item.
	code, m = e.svcPostJSON("/shardis.v1.InventoryService/Reserve",
		`{"orderId":"u-2","userId":"erin","items":[{"routeKey":"clothes","skuId":"tee","qty":"1"}]}`)
	if code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(m["message"]), `"qty"`) {
		t.Fatalf("Reserve with an unknown item field: HTTP %d %v, want 400 naming \"qty\"", code, m)
	}
	// Binary protobuf with an extra field number.
	raw, err := proto.Marshal(&v1.ReserveRequest{OrderId: "u-3", UserId: "erin", Items: []*v1.Item{svcItem("clothes", "tee", 1)}})
	if err != nil {
		t.Fatal(err)
	}
	raw = protowire.AppendTag(raw, 99, protowire.VarintType)
	raw = protowire.AppendVarint(raw, 1)
	req, _ := http.NewRequestWithContext(svcCtx(t), http.MethodPost, e.base+"/shardis.v1.InventoryService/Reserve", bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/proto")
	res, err := e.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("binary Reserve with field 99: HTTP %d %q, want 200 (unknown binary fields are ignored)", res.StatusCode, body)
	}
	if st := e.stock("clothes", "tee"); st.Reserved != 1 {
		t.Errorf("reserved %d units, want 1 (the binary order only)", st.Reserved)
	}
	// Known fields still work, in both encodings.
	e.mustReserve("u-4", "erin", 0, svcItem("clothes", "tee", 1))
}

// /healthz is liveness (200 whatever the nodes do); /readyz and the gRPC
// health service say whether every inventory route can serve.
func TestSvcReadinessAndGRPCHealth(t *testing.T) {
	t.Parallel()
	e := newSvcEnv(t, svcOpts{routes: map[string][]string{"clothes": {"n1", "n2"}, "shoes": {"n3"}}})
	health := grpchealth.NewClient(svcH2C(t), e.base, connect.WithGRPC())
	check := func(service string) grpchealth.Status {
		t.Helper()
		res, err := health.Check(svcCtx(t), &grpchealth.CheckRequest{Service: service})
		if err != nil {
			t.Fatalf("grpc health check %q: %v", service, err)
		}
		return res.Status
	}
	if code, body := svcGet(t, e.base+"/readyz"); code != 200 || body != "ready\n" {
		t.Fatalf("/readyz with every node up: %d %q", code, body)
	}
	if st := check(""); st != grpchealth.StatusServing {
		t.Fatalf("grpc health with every node up: %v", st)
	}
	e.redis["n3"].Kill()
	e.svcWaitState("n3", v1.NodeState_NODE_STATE_DOWN, 5*time.Second)
	code, body := svcGet(t, e.base+"/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "inventory/shoes") || !strings.Contains(body, "n3 down") {
		t.Fatalf("/readyz with the only node of shoes down: %d %q, want 503 naming inventory/shoes and n3", code, body)
	}
	if code, _ := svcGet(t, e.base+"/healthz"); code != 200 {
		t.Fatalf("/healthz (liveness) with a node down: %d, want 200", code)
	}
	if st := check("shardis.v1.InventoryService"); st != grpchealth.StatusNotServing {
		t.Fatalf("grpc health of InventoryService with shoes unservable: %v, want NOT_SERVING", st)
	}
	if _, err := health.Check(svcCtx(t), &grpchealth.CheckRequest{Service: "nope"}); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("grpc health of an unknown service: %v, want not_found", err)
	}
	e.redis["n3"].Restart()
	e.svcWaitState("n3", v1.NodeState_NODE_STATE_UP, 10*time.Second)
	if code, body := svcGet(t, e.base+"/readyz"); code != 200 {
		t.Fatalf("/readyz after n3 came back: %d %q", code, body)
	}
}

// gRPC reflection lists the services (what `grpcurl -plaintext ADDR list`
// asks).
func TestSvcGRPCReflection(t *testing.T) {
	t.Parallel()
	e := newSvcEnv(t, svcOpts{})
	c := grpcreflect.NewClient(svcH2C(t), e.base)
	stream := c.NewStream(svcCtx(t))
	defer stream.Close()
	names, err := stream.ListServices()
	if err != nil {
		t.Fatalf("reflection ListServices: %v", err)
	}
	got := fmt.Sprint(names)
	for _, want := range []string{"shardis.v1.InventoryService", "shardis.v1.AdminService", "grpc.health.v1.Health"} {
		if !strings.Contains(got, want) {
			t.Errorf("reflection lists %v, missing %s", names, want)
		}
	}
}

// Error texts: a missing Content-Type says what is expected; the code is
// not repeated in the message; "too many items" states the limit; a capped
// TTL is reported in the reply.
func TestSvcErrorTextsAndTTLCap(t *testing.T) {
	t.Parallel()
	e := newSvcEnv(t, svcOpts{})
	e.load("clothes", "tee", 10, 0)
	req, _ := http.NewRequestWithContext(svcCtx(t), http.MethodPost, e.base+"/shardis.v1.InventoryService/Reserve",
		strings.NewReader(`{}`))
	res, err := e.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusUnsupportedMediaType || !strings.Contains(string(body), "application/json") {
		t.Fatalf("POST without Content-Type: HTTP %d %q, want 415 saying application/json", res.StatusCode, body)
	}

	_, err = e.admin.ReadRedoLog(svcCtx(t), connect.NewRequest(&v1.ReadRedoLogRequest{Node: "n1", Queue: 99, Limit: 10}))
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument || strings.Contains(ce.Message(), "invalid argument") ||
		!strings.Contains(ce.Message(), "queue 99") {
		t.Fatalf("ReadRedoLog queue 99: %v, want invalid_argument whose message names queue 99 without repeating the code", err)
	}

	items := make([]*v1.Item, 101)
	for i := range items {
		items[i] = svcItem("clothes", "tee", 1)
	}
	_, err = e.reserve("t-many", "", 0, items...)
	svcWantCode(t, "Reserve of 101 items", err, connect.CodeInvalidArgument, "101 items", "at most 100")

	r := e.mustReserve("t-cap", "", int32((2 * time.Hour).Seconds()), svcItem("clothes", "tee", 1))
	if !r.TtlCapped || r.TtlSeconds != int64(e.cfg.Inventory.MaxReservationTTL.Seconds()) {
		t.Errorf("Reserve with ttl 2h (cap %v): ttl_seconds %d capped %v, want the cap and true", e.cfg.Inventory.MaxReservationTTL, r.TtlSeconds, r.TtlCapped)
	}
	r = e.mustReserve("t-nocap", "", 60, svcItem("clothes", "tee", 1))
	if r.TtlCapped || r.TtlSeconds != 60 {
		t.Errorf("Reserve with ttl 60s: ttl_seconds %d capped %v, want 60 and false", r.TtlSeconds, r.TtlCapped)
	}
}

// Per-RPC metrics: counts by procedure and code, latency, Confirm and
// Cancel outcomes; failure counters exist at 0 before any failure.
func TestSvcRPCMetrics(t *testing.T) {
	t.Parallel()
	e := newSvcEnv(t, svcOpts{})
	m := e.svcMetrics()
	for _, name := range []string{`shardis_command_failures_total{node="n1"}`, `shardis_probe_failures_total{node="n2"}`,
		`shardis_order_settles_total{op="confirm",outcome="not_found"}`} {
		if v, ok := m[name]; !ok || v != 0 {
			t.Errorf("%s = %v (present %v) before any failure, want 0", name, v, ok)
		}
	}
	e.load("clothes", "tee", 10, 0)
	e.mustReserve("mx-1", "", 0, svcItem("clothes", "tee", 1))
	svcOK(t)(e.confirm("mx-1"))
	_, err := e.confirm("mx-unknown")
	svcWantCode(t, "Confirm unknown", err, connect.CodeNotFound)
	svcOK(t)(e.cancel("mx-2"))
	m = e.svcMetrics()
	for name, want := range map[string]float64{
		`shardis_rpc_requests_total{code="ok",procedure="InventoryService/Reserve"}`:        1,
		`shardis_rpc_requests_total{code="not_found",procedure="InventoryService/Confirm"}`: 1,
		`shardis_order_settles_total{op="confirm",outcome="confirmed"}`:                     1,
		`shardis_order_settles_total{op="confirm",outcome="not_found"}`:                     1,
		`shardis_order_settles_total{op="cancel",outcome="cancelled"}`:                      1,
		`shardis_rpc_duration_seconds_count{procedure="InventoryService/Confirm"}`:          2,
	} {
		if m[name] != want {
			t.Errorf("%s = %v, want %v", name, m[name], want)
		}
	}
	_ = context.Background
}
