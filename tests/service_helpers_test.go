package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/internal/service"
	"github.com/shardis/shardis/inventory"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
)

// svcEnv is three real redis-server nodes n1..n3 and a running shardis
// service over them, reached over real HTTP on a loopback port.
type svcEnv struct {
	t       *testing.T
	names   []string                     // sorted node names
	redis   map[string]*redistest.Server // by node name
	clients map[string]*redis.Client     // direct, bypassing the service
	cfg     *config.Config
	srv     *service.Server
	base    string                                  // "http://" + srv.Addr()
	hc      *http.Client                            // HTTP/1.1, its own connection pool
	inv     shardisv1connect.InventoryServiceClient // Connect protocol, with the token
	admin   shardisv1connect.AdminServiceClient
	homes   *inventory.Homes // order homes, as the inventory places them
}

// svcOpts configures newSvcEnv. Zero value: route "clothes" over all
// nodes, no token, the default body limit.
type svcOpts struct {
	token   string
	maxBody int
	routes  map[string][]string
	log     *slog.Logger // the service's logger; nil: discard
}

func newSvcEnv(t *testing.T, o svcOpts) *svcEnv {
	t.Helper()
	e := &svcEnv{t: t, redis: map[string]*redistest.Server{}, clients: map[string]*redis.Client{}}
	cfg := config.Default()
	cfg.Service.Listen = "127.0.0.1:0"
	cfg.Service.AuthToken = o.token
	if o.maxBody > 0 {
		cfg.Service.MaxBodyBytes = o.maxBody
	}
	cfg.Nodes = map[string]config.Node{}
	// AOF: nodes the tests kill come back with their data (a node that
	// comes back empty is refused until accepted).
	for i, s := range redistest.StartN(t, 3, redistest.Options{AOF: true}) {
		name := fmt.Sprintf("n%d", i+1)
		e.names = append(e.names, name)
		e.redis[name], e.clients[name] = s, s.Client(t)
		cfg.Nodes[name] = config.Node{Addr: s.Addr(), Weight: 1}
	}
	sort.Strings(e.names)
	if o.routes == nil {
		o.routes = map[string][]string{"clothes": append([]string(nil), e.names...)}
	}
	cfg.Servers = map[string]config.Server{"inventory": {OnNodeDown: config.OnNodeDownFail, Routes: o.routes}}
	cfg.Health = quickHealth
	cfg.Health.Backoff = append([]time.Duration(nil), quickHealth.Backoff...)
	// A command gets 3 s and a probe 2 s, not the default 1 s and
	// quickHealth's 1 s: beside two other suites on 2 cores a LoadStock's
	// script read passed 1 s (i/o timeout, TestSvcHealthMetricsUnavailable),
	// and a probe late by as much marks a live node DOWN. The tests kill
	// nodes (connection refused, noticed at once) but never stop one, so
	// nothing waits on these timeouts; a restarted node is held back a
	// heartbeat and the probe timeout (2.1 s) before it is UP again.
	cfg.Client.CommandTimeout = 3 * time.Second
	cfg.Health.Timeout = 2 * time.Second
	cfg.Inventory.ReconcileInterval = 100 * time.Millisecond
	if err := cfg.Validate(); err != nil {
		t.Fatalf("service test config: %v", err)
	}
	e.cfg = &cfg
	var err error
	if e.homes, err = inventory.NewHomes(e.cfg); err != nil {
		t.Fatal(err)
	}
	e.srv = svcStartLog(t, e.cfg, o.log)
	// Served once ready, as behind a readiness probe: the first read of
	// the topology has a second, which a loaded machine can overrun (the
	// first call then answered unavailable, and the test failed).
	waitReady(t, e.srv.Inv)
	e.base = "http://" + e.srv.Addr()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	e.hc = &http.Client{Transport: tr}
	e.inv = shardisv1connect.NewInventoryServiceClient(e.hc, e.base, svcBearer(o.token))
	e.admin = shardisv1connect.NewAdminServiceClient(e.hc, e.base, svcBearer(o.token))
	return e
}

// svcBearer sends "Authorization: Bearer <token>" (nothing if token is
// empty; the header verbatim if token starts with "raw:").
func svcBearer(token string) connect.ClientOption {
	return connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if h, raw := strings.CutPrefix(token, "raw:"); raw {
				req.Header().Set("Authorization", h)
			} else if token != "" {
				req.Header().Set("Authorization", "Bearer "+token)
			}
			return next(ctx, req)
		}
	}))
}

// svcStart starts a service over cfg; a t.Cleanup shuts it down.
func svcStart(t *testing.T, cfg *config.Config) *service.Server {
	t.Helper()
	return svcStartLog(t, cfg, nil)
}

// svcStartLog is svcStart logging to log (nil: discard).
func svcStartLog(t *testing.T, cfg *config.Config, log *slog.Logger) *service.Server {
	t.Helper()
	if log == nil {
		log = invDiscard
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv, err := service.Start(ctx, cfg, log)
	if err != nil {
		t.Fatalf("service.Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx) // after the test's own Shutdown, a no-op
	})
	return srv
}

// svcH2C returns a client speaking HTTP/2 over cleartext with prior
// knowledge, as gRPC clients do on the plain port.
func svcH2C(t *testing.T) *http.Client {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: p}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// svcGRPC returns gRPC clients of the service, with the token.
func (e *svcEnv) svcGRPC() (shardisv1connect.InventoryServiceClient, shardisv1connect.AdminServiceClient) {
	hc, tok := svcH2C(e.t), svcBearer(e.cfg.Service.AuthToken)
	return shardisv1connect.NewInventoryServiceClient(hc, e.base, connect.WithGRPC(), tok),
		shardisv1connect.NewAdminServiceClient(hc, e.base, connect.WithGRPC(), tok)
}

// home returns the name of an order's home node.
func (e *svcEnv) home(orderID string) string { return e.homes.Home(orderID) }

// orderID returns the first id "prefix-i" whose home node satisfies ok.
func (e *svcEnv) orderID(prefix string, ok func(home string) bool) string {
	for i := 0; i < 10000; i++ {
		if id := fmt.Sprintf("%s-%d", prefix, i); ok(e.home(id)) {
			return id
		}
	}
	e.t.Fatalf("no order id %s-* fits", prefix)
	return ""
}

// load loads stock through the service and fails the test on error.
func (e *svcEnv) load(route, sku string, qty, limit int64) *v1.StockLevel {
	e.t.Helper()
	res, err := svcMsg(e.inv.LoadStock(svcCtx(e.t), connect.NewRequest(&v1.LoadStockRequest{
		RouteKey: route, SkuId: sku, Quantity: qty, PerUserLimit: proto.Int64(limit)})))
	svcOK(e.t)(res, err)
	return res.Stock
}

// stock reads a SKU's stock through the service.
func (e *svcEnv) stock(route, sku string) *v1.StockLevel {
	e.t.Helper()
	res, err := svcMsg(e.inv.GetStock(svcCtx(e.t), connect.NewRequest(&v1.GetStockRequest{RouteKey: route, SkuId: sku})))
	svcOK(e.t)(res, err)
	return res.Stock
}

// svcMsg unwraps a Connect response.
func svcMsg[T any](res *connect.Response[T], err error) (*T, error) {
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

func (e *svcEnv) reserve(orderID, user string, ttl int32, items ...*v1.Item) (*v1.ReserveResponse, error) {
	return svcMsg(e.inv.Reserve(svcCtx(e.t), connect.NewRequest(&v1.ReserveRequest{
		OrderId: orderID, UserId: user, TtlSeconds: ttl, Items: items})))
}

// mustReserve reserves and fails the test unless every unit was taken.
func (e *svcEnv) mustReserve(orderID, user string, ttl int32, items ...*v1.Item) *v1.ReserveResponse {
	e.t.Helper()
	r, err := e.reserve(orderID, user, ttl, items...)
	var want int64
	for _, it := range items {
		want += it.Quantity
	}
	if err != nil || r.OrderId != orderID || svcSum(r.Receipts) != want {
		e.t.Fatalf("Reserve %s = %v, %v; want %d units", orderID, r, err, want)
	}
	return r
}

func (e *svcEnv) confirm(orderID string) (*v1.ConfirmResponse, error) {
	return svcMsg(e.inv.Confirm(svcCtx(e.t), connect.NewRequest(&v1.ConfirmRequest{OrderId: orderID})))
}

func (e *svcEnv) cancel(orderID string) (*v1.CancelResponse, error) {
	return svcMsg(e.inv.Cancel(svcCtx(e.t), connect.NewRequest(&v1.CancelRequest{OrderId: orderID})))
}

// svcOK returns a func that fails the test on an error: svcOK(t)(call()).
func svcOK(t *testing.T) func(any, error) {
	return func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// svcWantStock fails unless the SKU's totals are (available, reserved,
// confirmed, loaded) and each reachable node's counters add up.
func svcWantStock(t *testing.T, s *v1.StockLevel, avail, reserved, confirmed, loaded int64) {
	t.Helper()
	if s.Available != avail || s.Reserved != reserved || s.Confirmed != confirmed || s.Loaded != loaded {
		t.Fatalf("stock %s = available %d reserved %d confirmed %d loaded %d, want %d %d %d %d",
			s.SkuId, s.Available, s.Reserved, s.Confirmed, s.Loaded, avail, reserved, confirmed, loaded)
	}
	for _, n := range s.Nodes {
		if n.Reachable && n.Available+n.Reserved+n.Confirmed != n.Loaded {
			t.Fatalf("stock %s on %s does not add up: %v", s.SkuId, n.Node, n)
		}
	}
}

func svcItem(route, sku string, qty int64) *v1.Item {
	return &v1.Item{RouteKey: route, SkuId: sku, Quantity: qty}
}

func svcSum(rs []*v1.Receipt) (n int64) {
	for _, r := range rs {
		n += r.Quantity
	}
	return n
}

// svcCtx is a 30s context ending with the test (some tests use one for
// their whole run, which a loaded machine stretched past 10 s).
func svcCtx(t *testing.T) context.Context { return invCtx(t, 30*time.Second) }

// svcWantCode fails unless err is a Connect error with code want whose
// message contains every sub.
func svcWantCode(t *testing.T, what string, err error, want connect.Code, subs ...string) {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != want {
		t.Fatalf("%s: error %v (code %v), want code %v", what, err, connect.CodeOf(err), want)
	}
	for _, s := range subs {
		if !strings.Contains(ce.Message(), s) {
			t.Fatalf("%s: message %q does not name %q", what, ce.Message(), s)
		}
	}
}

// svcPost POSTs a JSON body as curl would and decodes the JSON reply
// ({"_raw": body} if it is not JSON). A body without a known length is
// sent chunked.
func svcPost(t *testing.T, hc *http.Client, url, token string, body io.Reader) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(svcCtx(t), http.MethodPost, url, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := hc.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var m map[string]any
	if json.Unmarshal(raw, &m) != nil {
		m = map[string]any{"_raw": string(raw)}
	}
	return res.StatusCode, m
}

// svcPostJSON posts body to path with the service's token.
func (e *svcEnv) svcPostJSON(path, body string) (int, map[string]any) {
	e.t.Helper()
	return svcPost(e.t, e.hc, e.base+path, e.cfg.Service.AuthToken, strings.NewReader(body))
}

// svcJSONStr returns m[key], failing unless it is a JSON string.
func svcJSONStr(t *testing.T, m map[string]any, key string) string {
	t.Helper()
	s, ok := m[key].(string)
	if !ok {
		t.Fatalf("JSON field %q = %#v, want a string; object %v", key, m[key], m)
	}
	return s
}

// svcJSONInt parses an int64 field, failing unless it is sent as a JSON
// string (the proto3 JSON mapping).
func svcJSONInt(t *testing.T, m map[string]any, key string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(svcJSONStr(t, m, key), 10, 64)
	if err != nil {
		t.Fatalf("JSON field %q: %v", key, err)
	}
	return n
}

// svcGet GETs url without any token and returns the status and body.
func svcGet(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// svcMetrics scrapes /metrics into `name{labels}` → value.
func (e *svcEnv) svcMetrics() map[string]float64 {
	e.t.Helper()
	code, body := svcGet(e.t, e.base+"/metrics")
	if code != http.StatusOK {
		e.t.Fatalf("/metrics: HTTP %d: %s", code, body)
	}
	out := map[string]float64{}
	for sc := bufio.NewScanner(strings.NewReader(body)); sc.Scan(); {
		if line := sc.Text(); line != "" && line[0] != '#' {
			i := strings.LastIndexByte(line, ' ')
			v, err := strconv.ParseFloat(line[i+1:], 64)
			if err != nil {
				e.t.Fatalf("/metrics line %q: %v", line, err)
			}
			out[line[:i]] = v
		}
	}
	return out
}

// svcMetric returns a sample, e.g. svcMetric(t, m, "shardis_node_up",
// `node="n1"`), failing if it is missing.
func svcMetric(t *testing.T, m map[string]float64, name, labels string) float64 {
	t.Helper()
	if labels != "" {
		name += "{" + labels + "}"
	}
	v, ok := m[name]
	if !ok {
		t.Fatalf("metric %s missing from /metrics", name)
	}
	return v
}

// svcWaitState polls ListNodes until node name has state want.
func (e *svcEnv) svcWaitState(name string, want v1.NodeState, timeout time.Duration) {
	e.t.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(20 * time.Millisecond) {
		res, err := e.admin.ListNodes(svcCtx(e.t), connect.NewRequest(&v1.ListNodesRequest{}))
		if err != nil {
			e.t.Fatalf("ListNodes: %v", err)
		}
		for _, n := range res.Msg.Nodes {
			if n.Name == name && n.State == want {
				return
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("node %s not %v within %v: %v", name, want, timeout, res.Msg.Nodes)
		}
	}
}

// svcOutcome is what a client saw of one order in the shutdown test.
type svcOutcome struct {
	qty        [2]int64 // per item: tee, cap (0: not ordered)
	reserveErr error
	confirmErr error // nil with confirmed false: Confirm not called
	confirmed  bool  // Confirm returned OK
}

// svcCheckOrders checks on the nodes, with direct clients, what the
// clients saw: an order whose Reserve returned OK is reserved (confirmed,
// with every part confirmed, if its Confirm returned OK) with the parts of
// one attempt adding up to the order; an order whose Reserve failed left
// no record and no part; no part is pending unless its order is reserved;
// every part belongs to a seen order; each node's counters of each SKU
// equal the sums of its parts and add up to what was loaded.
func (e *svcEnv) svcCheckOrders(seen map[string]*svcOutcome, skus [2]string, loaded int64) {
	t := e.t
	t.Helper()
	ctx := svcCtx(t)
	parts, err := invParts(ctx, e.clients, nil)
	if err != nil {
		t.Fatal(err)
	}
	byOrder := map[string][]invPart{}
	for _, p := range parts {
		if seen[p.order] == nil {
			t.Fatalf("part %v belongs to no order a client sent", p)
		}
		byOrder[p.order] = append(byOrder[p.order], p)
	}
	type nodeSKU struct{ node, sku string }
	held := map[nodeSKU][2]int64{} // reserved, confirmed
	for id, o := range seen {
		rec, err := inventory.ReadOrder(ctx, e.clients[e.home(id)], id).Fields()
		if err != nil {
			t.Fatal(err)
		}
		if o.reserveErr != nil {
			if len(rec) != 0 || len(byOrder[id]) != 0 {
				t.Fatalf("order %s: Reserve failed (%v) but left record %v and parts %v", id, o.reserveErr, rec, byOrder[id])
			}
			continue
		}
		want, partState, col := "reserved", "pending", 0
		if o.confirmed {
			want, partState, col = "confirmed", "confirmed", 1
		}
		if rec["status"] != want {
			t.Fatalf("order %s: Reserve ok, Confirm ok=%v err=%v, but the record is %v, want %s", id, o.confirmed, o.confirmErr, rec, want)
		}
		var got [2]int64
		for _, p := range byOrder[id] {
			item, _ := strconv.Atoi(p.id[strings.LastIndexByte(p.id, '|')+1:])
			if p.token != rec["token"] || p.kind != "s" || p.state != partState || p.inIndex != (col == 0) || item > 1 {
				t.Fatalf("order %s is %s (token %s) but has part %v", id, want, rec["token"], p)
			}
			got[item] += p.qty
			h := held[nodeSKU{p.node, skus[item]}]
			h[col] += p.qty
			held[nodeSKU{p.node, skus[item]}] = h
		}
		if got != o.qty {
			t.Fatalf("order %s: parts hold %v, the order is %v: %v", id, got, o.qty, byOrder[id])
		}
	}
	for _, sku := range skus {
		var total int64
		for _, name := range e.names {
			f, err := e.clients[name].HMGet(ctx, "inv:stock:clothes:"+sku, "available", "reserved", "confirmed", "loaded").Result()
			if err != nil {
				t.Fatal(err)
			}
			var v [4]int64
			for i := range v {
				v[i], _ = strconv.ParseInt(fmt.Sprint(f[i]), 10, 64)
			}
			if h := held[nodeSKU{name, sku}]; v[1] != h[0] || v[2] != h[1] || v[0]+v[1]+v[2] != v[3] {
				t.Fatalf("%s on %s: available/reserved/confirmed/loaded %v, parts hold reserved %d confirmed %d", sku, name, v, h[0], h[1])
			}
			total += v[3]
		}
		if total != loaded {
			t.Fatalf("%s: loaded %d over the nodes, want %d", sku, total, loaded)
		}
	}
}

// svcConnErr reports whether err is a refused, reset or closed
// connection (unavailable, or a reset the Connect client labels
// canceled), never an answer of the service.
func svcConnErr(err error) bool {
	return connect.CodeOf(err) == connect.CodeUnavailable || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
