package service

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/inventory"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

// The fuzzers of this file send fuzzed requests to a real service (three
// redis-server nodes, service.Start on 127.0.0.1:0), started once per fuzz
// process in the Fuzz function and shared by its iterations.

// fuzzRoutes are the routes of the "inventory" server.
var fuzzRoutes = map[string][]string{"clothes": {"n1", "n2", "n3"}, "books": {"n2", "n3"}}

// fuzzFixed is stock loaded once: fuzzed requests may reserve it, never
// load it, so its loaded total never changes.
var fuzzFixed = []struct {
	route, sku string
	qty, limit int64
}{{"clothes", "tshirt-red", 100, 2}, {"books", "novel", 50, 0}}

type fuzzService struct {
	srv    *Server
	base   string
	client *http.Client
	seq    atomic.Int64
}

func newFuzzService(f *testing.F) *fuzzService {
	f.Helper()
	srvs := redistest.StartN(f, 3, redistest.Options{})
	cfg := config.Default()
	cfg.Service.Listen = "127.0.0.1:0"
	// Generous probe timeouts: fuzz workers keep the CPU busy, and a node
	// marked DOWN would fail iterations for the wrong reason.
	cfg.Health.Heartbeat = time.Second
	cfg.Health.Timeout = 5 * time.Second
	cfg.Nodes = map[string]config.Node{}
	for i, s := range srvs {
		cfg.Nodes["n"+strconv.Itoa(i+1)] = config.Node{Addr: s.Addr(), Weight: 1}
	}
	cfg.Servers = map[string]config.Server{"inventory": {OnNodeDown: config.OnNodeDownFail, Routes: fuzzRoutes}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Start(ctx, &cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		f.Fatal(err)
	}
	fs := &fuzzService{srv: s, base: "http://" + s.Addr(), client: &http.Client{Timeout: 30 * time.Second}}
	f.Cleanup(func() {
		fs.client.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	for _, n := range s.Router.Nodes() {
		if !n.Usable() {
			f.Fatalf("node %s is not up: %v", n.Name(), n.DownReason())
		}
	}
	for _, x := range fuzzFixed {
		if _, err := s.Inv.LoadStock(ctx, x.route, x.sku, x.qty, x.limit); err != nil {
			f.Fatal(err)
		}
	}
	return fs
}

// post sends body to an InventoryService method and returns the HTTP
// status, the Connect error code ("" on success) and the body.
func (fs *fuzzService) post(t *testing.T, method string, body []byte) (int, string, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, fs.base+"/shardis.v1.InventoryService/"+method, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := fs.client.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", method, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: reading the answer: %v", method, err)
	}
	if resp.StatusCode == http.StatusOK {
		return resp.StatusCode, "", out
	}
	var e struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(out, &e); err != nil || e.Code == "" {
		t.Fatalf("POST %s: status %d with a body that is not a Connect error: %q", method, resp.StatusCode, out)
	}
	if want, ok := connectStatus[e.Code]; !ok || resp.StatusCode != want {
		t.Fatalf("POST %s: code %s (%s) with HTTP status %d; want one of the expected codes with its status", method, e.Code, e.Message, resp.StatusCode)
	}
	return resp.StatusCode, e.Code, out
}

// connectStatus maps the codes a request may end with to their HTTP
// status (Connect protocol). internal, unknown and every other code are
// never expected.
var connectStatus = map[string]int{
	"invalid_argument":    400,
	"failed_precondition": 400,
	"not_found":           404,
	"aborted":             409,
	"unavailable":         503,
}

// stock returns a SKU's stock (library view) and checks the per-node
// invariant available+reserved+confirmed == loaded, nothing negative.
func (fs *fuzzService) stock(t *testing.T, route, sku string) inventory.StockLevel {
	t.Helper()
	lvl, err := fs.srv.Inv.GetStock(context.Background(), route, sku)
	if err != nil {
		t.Fatalf("GetStock(%q, %q): %v", route, sku, err)
	}
	for _, n := range lvl.Nodes {
		if !n.Reachable || n.Available < 0 || n.Reserved < 0 || n.Confirmed < 0 || n.Available+n.Reserved+n.Confirmed != n.Loaded {
			t.Fatalf("stock of %s/%q on %s breaks the invariant: %+v", route, sku, n.Node, n)
		}
	}
	return lvl
}

func validID(s string) bool {
	if s == "" || len(s) > inventory.MaxIDLen || !utf8.ValidString(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return false
		}
	}
	return true
}

func validQty(q int64) bool { return q >= 1 && q <= inventory.MaxQuantity }

// FuzzReserveRequest POSTs fuzzed JSON bodies to InventoryService/Reserve.
// "@order" and "@sku" in a body are replaced by an order id and a SKU of
// this iteration (the SKU freshly loaded: 10 units, per-user limit 3). The
// answer is 200 or a Connect error with an expected code and status;
// invalid_argument exactly when the request breaks the documented rules
// (then nothing was touched), and a refused reserve holds nothing. The
// stock invariant holds afterwards for every SKU loaded.
func FuzzReserveRequest(f *testing.F) {
	fs := newFuzzService(f)
	for _, s := range []string{
		`{"orderId":"o-1","userId":"alice","ttlSeconds":300,"items":[{"routeKey":"clothes","skuId":"tshirt-red","quantity":"2"}]}`,
		`{"orderId":"@order","userId":"alice","ttlSeconds":300,"items":[{"routeKey":"clothes","skuId":"@sku","quantity":"2"}]}`,
		`{"orderId":"@order","items":[{"routeKey":"clothes","skuId":"@sku","quantity":"10"}]}`,
		`{"orderId":"@order","items":[{"routeKey":"clothes","skuId":"@sku","quantity":"11"}]}`,
		`{"orderId":"@order","userId":"bob","items":[{"routeKey":"clothes","skuId":"@sku","quantity":"2"},{"routeKey":"clothes","skuId":"@sku","quantity":2}]}`,
		`{"order_id":"@order","user_id":"u:1","ttl_seconds":1,"items":[{"route_key":"clothes","sku_id":"@sku","quantity":1},{"route_key":"books","sku_id":"novel","quantity":1}]}`,
		`{"orderId":"@order","items":[{"routeKey":"clothes","skuId":"@sku","quantity":"0"}]}`,
		`{"orderId":"@order","items":[{"routeKey":"clothes","skuId":"@sku","quantity":"-1"}]}`,
		`{"orderId":"@order","items":[{"routeKey":"clothes","skuId":"@sku","quantity":"1000000001"}]}`,
		`{"orderId":"@order","items":[{"routeKey":"clothes","skuId":"@sku","quantity":"9223372036854775808"}]}`,
		`{"orderId":"@order","ttlSeconds":-1,"items":[{"routeKey":"clothes","skuId":"@sku","quantity":"1"}]}`,
		`{"orderId":"@order","ttlSeconds":2147483647,"items":[{"routeKey":"clothes","skuId":"@sku","quantity":"1"}]}`,
		`{"orderId":"@order","items":[{"routeKey":"nope","skuId":"@sku","quantity":"1"}]}`,
		`{"orderId":"@order","items":[{"routeKey":"clothes","skuId":"","quantity":"1"}]}`,
		`{"orderId":"@order","items":[]}`,
		`{"orderId":"","items":[{"routeKey":"clothes","skuId":"@sku","quantity":"1"}]}`,
		`{"orderId":"@order\u0000","items":[{"routeKey":"clothes","skuId":"@sku","quantity":"1"}]}`,
		`{"orderId":"@order","userId":"\u00fc\u2713{x}|:","items":[{"routeKey":"clothes","skuId":"@sku","quantity":"1"}]}`,
		`{"orderId":"` + strings.Repeat("o", 129) + `","items":[{"routeKey":"clothes","skuId":"@sku","quantity":"1"}]}`,
		`{"orderId":"@order","items":[` + strings.Repeat(`{"routeKey":"clothes","skuId":"@sku","quantity":"1"},`, 100) + `{"routeKey":"clothes","skuId":"@sku","quantity":"1"}]}`,
		`{"orderId":"@order","items":[{"routeKey":"clothes","skuId":"@sku","quantity":true}]}`,
		`{"orderId":"@order","items":{"routeKey":"clothes"}}`,
		`{"orderId":"@order","unknownField":1,"items":[{"routeKey":"clothes","skuId":"@sku","quantity":"1","extra":[1,2]}]}`,
		`{"orderId":"@order","items":[null]}`,
		`[]`, `{}`, ``, `null`, `{"orderId":`, "\xff\xfe",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		ctx := context.Background()
		n := fs.seq.Add(1)
		order, sku := "fz-order-"+strconv.FormatInt(n, 10), "fz-sku-"+strconv.FormatInt(n, 10)
		if _, err := fs.srv.Inv.LoadStock(ctx, "clothes", sku, 10, 3); err != nil {
			t.Fatal(err)
		}
		body = bytes.ReplaceAll(bytes.ReplaceAll(body, []byte("@order"), []byte(order)), []byte("@sku"), []byte(sku))

		status, code, out := fs.post(t, "Reserve", body)

		// What the documented rules say of this request.
		var req v1.ReserveRequest
		valid := len(body) > 0 && protojson.Unmarshal(body, &req) == nil // strict, as the service (codec.go)
		valid = valid && req.TtlSeconds >= 0 && len(req.Items) >= 1 && len(req.Items) <= inventory.MaxItems &&
			validID(req.OrderId) && (req.UserId == "" || validID(req.UserId))
		var want int64 // units of this iteration's SKU
		onlyFresh := true
		for _, it := range req.Items {
			if _, ok := fuzzRoutes[it.RouteKey]; !ok || !validID(it.SkuId) || !validQty(it.Quantity) {
				valid = false
			}
			if it.RouteKey == "clothes" && it.SkuId == sku {
				want += it.Quantity
			} else {
				onlyFresh = false
			}
		}
		// An order without a user of a SKU with a per-user limit (this
		// iteration's SKU, or a fixed one with a limit) is refused:
		// failed_precondition, the SKU's state refuses it (the same order
		// of a SKU without a limit is valid).
		needsUser := false
		if valid && req.UserId == "" {
			for _, it := range req.Items {
				limited := it.RouteKey == "clothes" && it.SkuId == sku
				for _, x := range fuzzFixed {
					limited = limited || (x.limit > 0 && it.RouteKey == x.route && it.SkuId == x.sku)
				}
				needsUser = needsUser || limited
			}
		}
		switch {
		case !valid && code != "invalid_argument":
			t.Fatalf("malformed request %q answered %d %s %q, want invalid_argument", body, status, code, out)
		case needsUser && code != "failed_precondition":
			t.Fatalf("request %q without a user of a limited SKU answered %d %s %q, want failed_precondition", body, status, code, out)
		case valid && code != "" && code != "failed_precondition":
			t.Fatalf("request %q answered %d %s %q, want ok or failed_precondition", body, status, code, out)
		case valid && !needsUser && req.OrderId == order && onlyFresh:
			// Everything about this request is known: the outcome too.
			fits := want <= 10 && (req.UserId == "" || want <= 3)
			if fits != (code == "") {
				t.Fatalf("request %q for %d of 10 units (per-user limit 3) answered %d %s %q", body, want, status, code, out)
			}
		}
		if code == "" {
			var res v1.ReserveResponse
			if err := protojson.Unmarshal(out, &res); err != nil {
				t.Fatalf("200 answer %q: %v", out, err)
			}
			checkReserveResponse(t, &req, &res)
		}

		lvl := fs.stock(t, "clothes", sku)
		if lvl.Loaded != 10 {
			t.Fatalf("loaded total of %q is %d, want 10", sku, lvl.Loaded)
		}
		switch {
		case code != "" && (lvl.Available != 10 || lvl.Reserved != 0):
			t.Fatalf("refused request (%s %q) holds stock of %q: %+v", code, out, sku, lvl)
		case code == "" && (req.TtlSeconds == 0 || req.TtlSeconds > 5) && lvl.Reserved != want:
			t.Fatalf("request %q took %d of %q, want %d", body, lvl.Reserved, sku, want)
		}
		for _, x := range fuzzFixed {
			if lvl := fs.stock(t, x.route, x.sku); lvl.Loaded != x.qty {
				t.Fatalf("loaded total of %s/%s is %d, want %d", x.route, x.sku, lvl.Loaded, x.qty)
			}
		}
	})
}

// checkReserveResponse checks a successful reservation against its
// request: the order id, and receipts adding up to every item's quantity
// on nodes of the item's route.
func checkReserveResponse(t *testing.T, req *v1.ReserveRequest, res *v1.ReserveResponse) {
	t.Helper()
	if res.OrderId != req.OrderId {
		t.Fatalf("answer for order %q names order %q", req.OrderId, res.OrderId)
	}
	got := make([]int64, len(req.Items))
	for _, r := range res.Receipts {
		if r.ItemIndex < 0 || int(r.ItemIndex) >= len(req.Items) {
			t.Fatalf("receipt %v: item index out of range", r)
		}
		it := req.Items[r.ItemIndex]
		nodeOK := false
		for _, name := range fuzzRoutes[it.RouteKey] {
			nodeOK = nodeOK || name == r.Node
		}
		if r.SkuId != it.SkuId || r.Quantity <= 0 || !nodeOK || r.Offset <= 0 || !strings.HasPrefix(r.RedoLog, "inv:redo:") {
			t.Fatalf("receipt %v for item %v", r, it)
		}
		got[r.ItemIndex] += r.Quantity
	}
	for i, it := range req.Items {
		if got[i] != it.Quantity {
			t.Fatalf("receipts of item %d add up to %d, want %d: %v", i, got[i], it.Quantity, res.Receipts)
		}
	}
	if d := time.Until(time.UnixMilli(res.DeadlineUnixMs)); d <= -time.Minute || d > time.Hour+time.Minute {
		t.Fatalf("deadline %d is %v away", res.DeadlineUnixMs, d)
	}
}

// FuzzLoadStock POSTs LoadStock requests with fuzzed route, SKU, quantity
// and per-user limit. A request breaking the documented rules is refused
// with invalid_argument and changes nothing; any other adds exactly its
// quantity (split over the route's nodes, each keeping available+reserved
// +confirmed == loaded) and sets the limit as documented: > 0 sets it, 0
// removes it, < 0 keeps the current one.
func FuzzLoadStock(f *testing.F) {
	fs := newFuzzService(f)
	f.Add("clothes", "tshirt-blue", int64(100), int64(2))
	f.Add("clothes", "tshirt-blue", int64(7), int64(-1))
	f.Add("clothes", "tshirt-blue", int64(1), int64(0))
	f.Add("books", "novel-2", int64(inventory.MaxQuantity), int64(inventory.MaxQuantity))
	f.Add("books", "novel-2", int64(inventory.MaxQuantity+1), int64(inventory.MaxQuantity+1))
	f.Add("clothes", "sku", int64(0), int64(0))
	f.Add("clothes", "sku", int64(-5), int64(-9223372036854775808))
	f.Add("clothes", "sku", int64(9223372036854775807), int64(9223372036854775807))
	f.Add("nope", "sku", int64(1), int64(0))
	f.Add("", "", int64(1), int64(0))
	f.Add("clothes", "ü{tag}|:\u2713", int64(3), int64(1))
	f.Add("clothes", "nul\x00", int64(3), int64(1))
	f.Add("clothes", strings.Repeat("s", 129), int64(3), int64(1))
	f.Add("clothes", "bad\xff", int64(3), int64(1))
	f.Fuzz(func(t *testing.T, route, sku string, qty, limit int64) {
		// JSON strings are UTF-8: send what a JSON client can send.
		route, sku = strings.ToValidUTF8(route, "\uFFFD"), strings.ToValidUTF8(sku, "\uFFFD")
		body, err := protojson.Marshal(&v1.LoadStockRequest{RouteKey: route, SkuId: sku, Quantity: qty, PerUserLimit: &limit})
		if err != nil {
			t.Fatal(err)
		}
		_, known := fuzzRoutes[route]
		var before inventory.StockLevel
		if known && validID(sku) {
			before = fs.stock(t, route, sku)
		}

		status, code, out := fs.post(t, "LoadStock", body)

		// Quantity 0 with a limit present changes only the limit.
		valid := known && validID(sku) && (validQty(qty) || qty == 0 && limit >= 0) && limit <= inventory.MaxQuantity
		if !valid {
			if code != "invalid_argument" {
				t.Fatalf("LoadStock %s answered %d %s %q, want invalid_argument", body, status, code, out)
			}
			if known && validID(sku) {
				if after := fs.stock(t, route, sku); !sameLevel(after, before) {
					t.Fatalf("refused LoadStock %s changed the stock: %+v, then %+v", body, before, after)
				}
			}
			return
		}
		if code != "" {
			t.Fatalf("LoadStock %s answered %d %s %q", body, status, code, out)
		}
		var res v1.LoadStockResponse
		if err := protojson.Unmarshal(out, &res); err != nil {
			t.Fatalf("200 answer %q: %v", out, err)
		}
		after := fs.stock(t, route, sku)
		wantLimit := before.Limit
		switch {
		case limit > 0:
			wantLimit = limit
		case limit == 0:
			wantLimit = 0
		}
		if after.Loaded != before.Loaded+qty || after.Available != before.Available+qty || after.Limit != wantLimit {
			t.Fatalf("LoadStock(%d, limit %d) on %+v gave %+v (want limit %d)", qty, limit, before, after, wantLimit)
		}
		for _, n := range after.Nodes {
			if n.Limit != wantLimit {
				t.Fatalf("node %s has per-user limit %d, want %d", n.Node, n.Limit, wantLimit)
			}
		}
		st := res.GetStock()
		if st.GetSkuId() != sku || st.GetLoaded() != after.Loaded || st.GetAvailable() != after.Available ||
			st.GetPerUserLimit() != wantLimit || len(st.GetNodes()) != len(fuzzRoutes[route]) {
			t.Fatalf("answer %v does not match the stock %+v", st, after)
		}
	})
}

func sameLevel(a, b inventory.StockLevel) bool {
	if a.Available != b.Available || a.Reserved != b.Reserved || a.Confirmed != b.Confirmed ||
		a.Loaded != b.Loaded || a.Limit != b.Limit || len(a.Nodes) != len(b.Nodes) {
		return false
	}
	for i := range a.Nodes {
		x, y := a.Nodes[i], b.Nodes[i]
		if x.Node != y.Node || x.Available != y.Available || x.Reserved != y.Reserved || x.Confirmed != y.Confirmed ||
			x.Loaded != y.Loaded || x.Limit != y.Limit {
			return false
		}
	}
	return true
}
