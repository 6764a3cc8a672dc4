package tests

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	gstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/internal/service"
	"github.com/shardis/shardis/inventory"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
)

// retryEnv is a service over three real nodes reached through latency
// proxies (so a multi-node order spans several ms), serving the plain
// port and the gRPC port.
type retryEnv struct {
	t       *testing.T
	clients map[string]*redis.Client
	srv     *service.Server
	connect shardisv1connect.InventoryServiceClient // Connect over HTTP/1.1
	cgrpc   shardisv1connect.InventoryServiceClient // gRPC over h2c, plain port
	ggo     *grpc.ClientConn                        // grpc-go, gRPC port
	homes   *inventory.Homes
}

func (e *retryEnv) homeOf(id string) string { return e.homes.Home(id) }

func newRetryEnv(t *testing.T, delay time.Duration) *retryEnv {
	t.Helper()
	e := &retryEnv{t: t, clients: map[string]*redis.Client{}}
	cfg := config.Default()
	cfg.Service.Listen = "127.0.0.1:0"
	cfg.Service.GRPCListen = "127.0.0.1:0"
	cfg.Nodes = map[string]config.Node{}
	var names []string
	for i, s := range redistest.StartN(t, 3, redistest.Options{}) {
		name := fmt.Sprintf("n%d", i+1)
		names = append(names, name)
		e.clients[name] = s.Client(t)
		p := startLatencyProxy(t, s.Addr(), delay)
		cfg.Nodes[name] = config.Node{Addr: p.Addr(), Weight: 1}
	}
	sort.Strings(names)
	cfg.Servers = map[string]config.Server{"inventory": {OnNodeDown: config.OnNodeDownFail, Routes: map[string][]string{"clothes": names}}}
	cfg.Health = quickHealth
	cfg.Health.Backoff = append([]time.Duration(nil), quickHealth.Backoff...)
	cfg.Inventory.ReconcileInterval = 100 * time.Millisecond
	// The tests time out their clients, not the nodes: a command gets
	// 3 s, not the default 1 s, which a script call queued behind others
	// on a loaded machine overran (an outcome-unknown answer to a retry
	// TestSvcRetryAfterTimeoutIsPrompt expects served, under make test
	// beside an explorer run). Still well inside the attempt lease (10 s)
	// the retries must not wait out. A probe gets 3 s too, not
	// quickHealth's 1 s: beside two other suites on 2 cores a probe over
	// the 1.5 ms link passed 1 s, the node was marked DOWN, and a retry
	// with a 15 s deadline (TestSvcRetryAfterTimeoutIsPrompt) or the last
	// Confirm of an order with 10 s (TestSvcRetriesUnderShortDeadlines,
	// which then left it undecided) was answered unavailable. No test of
	// this env stops a node: nothing waits on a probe's timeout.
	cfg.Client.CommandTimeout = 3 * time.Second
	cfg.Health.Timeout = 3 * time.Second
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	var err error
	if e.homes, err = inventory.NewHomes(&cfg); err != nil {
		t.Fatal(err)
	}
	e.srv = svcStart(t, &cfg)
	base := "http://" + e.srv.Addr()
	e.connect = shardisv1connect.NewInventoryServiceClient(svcH2C(t), base) // h2c: many streams
	e.cgrpc = shardisv1connect.NewInventoryServiceClient(svcH2C(t), base, connect.WithGRPC())
	conn, err := grpc.NewClient(e.srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	e.ggo = conn
	return e
}

// call runs one RPC of the three kinds over client kind k (0 Connect, 1
// gRPC on the plain port, 2 grpc-go on the gRPC port) and returns the
// reply and the error's code (0 for OK).
func (e *retryEnv) reserve(ctx context.Context, k int, req *v1.ReserveRequest) (*v1.ReserveResponse, connect.Code, error) {
	switch k {
	case 0, 1:
		cl := e.connect
		if k == 1 {
			cl = e.cgrpc
		}
		res, err := cl.Reserve(ctx, connect.NewRequest(req))
		if err != nil {
			return nil, connect.CodeOf(err), err
		}
		return res.Msg, 0, nil
	}
	out := new(v1.ReserveResponse)
	err := e.ggo.Invoke(ctx, "/shardis.v1.InventoryService/Reserve", req, out)
	return out, grpcCode(err), err
}

func (e *retryEnv) decide(ctx context.Context, k int, confirm bool, id string) (connect.Code, error) {
	switch k {
	case 0, 1:
		cl := e.connect
		if k == 1 {
			cl = e.cgrpc
		}
		var err error
		if confirm {
			_, err = cl.Confirm(ctx, connect.NewRequest(&v1.ConfirmRequest{OrderId: id}))
		} else {
			_, err = cl.Cancel(ctx, connect.NewRequest(&v1.CancelRequest{OrderId: id}))
		}
		if err != nil {
			return connect.CodeOf(err), err
		}
		return 0, nil
	}
	var err error
	ctx = metadata.NewOutgoingContext(ctx, metadata.MD{})
	if confirm {
		err = e.ggo.Invoke(ctx, "/shardis.v1.InventoryService/Confirm", &v1.ConfirmRequest{OrderId: id}, new(v1.ConfirmResponse))
	} else {
		err = e.ggo.Invoke(ctx, "/shardis.v1.InventoryService/Cancel", &v1.CancelRequest{OrderId: id}, new(v1.CancelResponse))
	}
	return grpcCode(err), err
}

func grpcCode(err error) connect.Code {
	if err == nil {
		return 0
	}
	return connect.Code(gstatus.Code(err))
}

// ambiguous reports whether a code leaves the outcome open (retry).
func ambiguous(c connect.Code) bool {
	switch c {
	case connect.CodeCanceled, connect.CodeDeadlineExceeded, connect.CodeUnavailable, connect.CodeAborted, connect.CodeUnknown:
		return true
	}
	return false
}

type retryOrder struct {
	id       string
	user     string
	qty      map[string]int64
	reserved bool // a Reserve returned OK
	final    string
	codes    []string
}

// TestSvcRetriesUnderShortDeadlines: clients whose Reserve, Confirm and
// Cancel time out (random deadlines shorter than a multi-node order) retry
// them with the same order id over Connect, gRPC on the plain port and
// grpc-go on the gRPC port. Afterwards, once every hold has run out, the
// nodes hold exactly what the clients were told: confirmed stock equals
// the orders whose Confirm returned OK, nothing stays reserved (no
// stranded part), each user's quota counter equals its confirmed units,
// and no user ever had more than the limit confirmed.
func TestSvcRetriesUnderShortDeadlines(t *testing.T) {
	t.Parallel()
	e := newRetryEnv(t, 1500*time.Microsecond)
	skus := []string{"tee", "cap", "hat"}
	const loaded = 600
	ctx := svcCtx(t)
	for _, s := range skus {
		var limit *int64
		if s == "hat" {
			limit = proto.Int64(3)
		}
		if _, err := e.connect.LoadStock(ctx, connect.NewRequest(&v1.LoadStockRequest{RouteKey: "clothes", SkuId: s, Quantity: loaded, PerUserLimit: limit})); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu     sync.Mutex
		orders []*retryOrder
		wg     sync.WaitGroup
	)
	const workers, perWorker = 8, 15
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := range perWorker {
				o := &retryOrder{id: fmt.Sprintf("r-%d-%d", w, i), user: fmt.Sprintf("u%d", rng.IntN(6)), qty: map[string]int64{}}
				req := &v1.ReserveRequest{OrderId: o.id, UserId: o.user, TtlSeconds: 2}
				for _, s := range skus {
					if rng.IntN(2) == 0 || len(req.Items) == 0 && s == "hat" {
						q := int64(1 + rng.IntN(2))
						req.Items = append(req.Items, svcItem("clothes", s, q))
						o.qty[s] = q
					}
				}
				mu.Lock()
				orders = append(orders, o)
				mu.Unlock()
				// Reserve: short deadlines first, then a long one, past the
				// attempt lease (10 s): a timed-out attempt that could not
				// give its lease back (its release refused or lost) holds
				// the order until the lease runs out, and the last retry
				// waits for it (with 10 s, beside two other suites on 2
				// cores, one ran out 1 ms before it could begin).
				decided := false
				for a := 0; a < 6 && !decided; a++ {
					d := time.Duration(1+rng.IntN(25)) * time.Millisecond
					if a == 5 {
						d = 15 * time.Second
					}
					cctx, cancel := context.WithTimeout(context.Background(), d)
					k := rng.IntN(3)
					startAt := time.Now().UnixMilli()
					res, code, err := e.reserve(cctx, k, req)
					cancel()
					if a == 5 && err != nil {
						o.codes = append(o.codes, fmt.Sprintf("reserve(%v,k=%d)=%v from %d to %d: %v", d, k, code, startAt, time.Now().UnixMilli(), err))
					} else {
						o.codes = append(o.codes, fmt.Sprintf("reserve(%v)=%v", d, code))
					}
					if err == nil {
						var sum int64
						for _, r := range res.Receipts {
							sum += r.Quantity
						}
						var want int64
						for _, q := range o.qty {
							want += q
						}
						if sum != want || res.OrderId != o.id {
							t.Errorf("order %s: Reserve OK with %d units, want %d: %v", o.id, sum, want, res)
						}
						o.reserved, decided = true, true
					} else if !ambiguous(code) {
						o.final, decided = "refused:"+code.String()+":"+err.Error(), true
					}
				}
				if !o.reserved {
					continue
				}
				// Confirm or Cancel, or let it expire.
				choice := rng.IntN(3)
				if choice == 2 {
					o.final = "left"
					continue
				}
				confirm := choice == 0
				decided = false
				for a := 0; a < 8 && !decided; a++ {
					d := time.Duration(1+rng.IntN(20)) * time.Millisecond
					if a == 7 {
						d = 10 * time.Second
					}
					cctx, cancel := context.WithTimeout(context.Background(), d)
					code, err := e.decide(cctx, rng.IntN(3), confirm, o.id)
					cancel()
					o.codes = append(o.codes, fmt.Sprintf("decide(confirm=%v,%v)=%v", confirm, d, code))
					switch {
					case err == nil && confirm:
						o.final, decided = "confirmed", true
					case err == nil:
						o.final, decided = "cancelled", true
					case !ambiguous(code):
						o.final, decided = "refused-decide:"+code.String()+":"+err.Error(), true
					}
				}
				if !decided {
					o.final = "undecided"
				}
			}
		}()
	}
	wg.Wait()
	want := map[string]int64{}
	quota := map[string]int64{} // user → confirmed hats
	finals := map[string]int{}
	for _, o := range orders {
		k := o.final
		if len(k) > 20 {
			k = k[:20]
		}
		finals[k]++
		if o.final == "confirmed" {
			for s, q := range o.qty {
				want[s] += q
			}
			quota[o.user] += o.qty["hat"]
		}
		if o.final == "undecided" || (!o.reserved && o.final == "") {
			recs := ""
			for name, c := range e.clients {
				if f, err := inventory.ReadOrder(context.Background(), c, o.id).Fields(); err == nil && len(f) > 0 {
					recs += fmt.Sprintf(" %s:%v", name, f)
				}
			}
			t.Logf("order %s undecided: %v; records:%s", o.id, o.codes, recs)
		}
	}
	t.Logf("outcomes: %v", finals)
	for _, o := range orders {
		if len(o.final) > 8 && o.final[:8] == "refused:" && !strings.Contains(o.final, "limit") {
			t.Logf("order %s refused: %s %v", o.id, o.final, o.codes)
		}
	}
	ctx = context.Background()
	for u, q := range quota {
		if q > 3 {
			t.Errorf("user %s has %d hats confirmed, over the limit of 3", u, q)
		}
	}
	// Every hold runs out (ttl 2s, +1s grace, the reconciler every 100ms).
	deadline := time.Now().Add(30 * time.Second)
	for {
		bad := ""
		for _, s := range skus {
			var avail, reserved, confirmed int64
			for name, c := range e.clients {
				f, err := c.HMGet(ctx, "inv:stock:clothes:"+s, "available", "reserved", "confirmed").Result()
				if err != nil {
					t.Fatal(err)
				}
				v := [3]int64{}
				for i := range v {
					v[i], _ = strconv.ParseInt(fmt.Sprint(f[i]), 10, 64)
				}
				_ = name
				avail, reserved, confirmed = avail+v[0], reserved+v[1], confirmed+v[2]
			}
			if reserved != 0 || confirmed != want[s] || avail+confirmed != loaded {
				bad += fmt.Sprintf("%s: available %d reserved %d confirmed %d, want confirmed %d; ", s, avail, reserved, confirmed, want[s])
			}
		}
		if bad == "" {
			break
		}
		if time.Now().After(deadline) {
			for _, o := range orders {
				t.Logf("order %s user %s qty %v final %q: %v", o.id, o.user, o.qty, o.final, o.codes)
			}
			t.Fatalf("after every hold ran out: %s", bad)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Quota counters equal the confirmed hats per user.
	for u := 0; u < 6; u++ {
		user := fmt.Sprintf("u%d", u)
		var held int64
		for _, c := range e.clients {
			v, err := c.Get(ctx, "inv:quota:clothes:3:hat:"+user).Int64()
			if err != nil && !errors.Is(err, redis.Nil) {
				t.Fatal(err)
			}
			held += v
		}
		if held != quota[user] {
			t.Errorf("user %s: quota counters hold %d, confirmed hats %d", user, held, quota[user])
		}
	}
}

// TestSvcRetryAfterTimeoutIsPrompt: a Reserve whose client deadline ran
// out mid-order, retried at once with the same order id and a generous
// deadline, is answered promptly: within half the attempt lease, so
// without waiting out an attempt the timed-out call left behind.
func TestSvcRetryAfterTimeoutIsPrompt(t *testing.T) {
	t.Parallel()
	e := newRetryEnv(t, 1500*time.Microsecond)
	ctx := svcCtx(t)
	for _, s := range []string{"tee", "cap", "hat"} {
		if _, err := e.connect.LoadStock(ctx, connect.NewRequest(&v1.LoadStockRequest{RouteKey: "clothes", SkuId: s, Quantity: 1000})); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 60; i++ {
		k := i % 3
		id := fmt.Sprintf("p-%d", i)
		req := &v1.ReserveRequest{OrderId: id, UserId: fmt.Sprintf("u%d", i), TtlSeconds: 30,
			Items: []*v1.Item{svcItem("clothes", "tee", 1), svcItem("clothes", "cap", 1), svcItem("clothes", "hat", 1)}}
		d := time.Duration(1+i%20) * time.Millisecond
		cctx, cancel := context.WithTimeout(context.Background(), d)
		_, code1, _ := e.reserve(cctx, k, req)
		cancel()
		start := time.Now()
		cctx, cancel = context.WithTimeout(context.Background(), 15*time.Second)
		_, code2, err := e.reserve(cctx, k, req)
		cancel()
		took := time.Since(start)
		rec := ""
		for name, c := range e.clients {
			if f, err := inventory.ReadOrder(context.Background(), c, id).Fields(); err == nil && len(f) > 0 {
				rec += fmt.Sprintf(" %s:%s", name, f["status"])
			}
		}
		t.Logf("%s k=%d first(%v)=%v retry=%v in %v (%v) record%s", id, k, d, code1, code2, took.Round(time.Millisecond), err, rec)
		// prompt: not waiting out inventory.attempt_lease (10 s); with
		// make test beside an explorer a prompt retry took 2.2 s
		if err != nil || took > 5*time.Second {
			t.Errorf("%s: retry after a timed-out Reserve (%v): %v after %v", id, code1, err, took)
		}
	}
}

// TestSvcRetryAfterBeginTimedOut: an order whose stock is split over the
// nodes takes the general path (begin on its home node, takes, commit).
// A client whose deadline runs out while the begin is on the wire gives
// up; the server's attempt ends with it (it answered deadline_exceeded:
// nothing is reserved). The client retries with the same order id at
// once, with a deadline of a few seconds (6 s: a loaded machine made a
// prompt retry take 3 s), as a client does after a
// timeout: the retry must be served, not wait out the abandoned attempt's
// lease (inventory.attempt_lease, 10s), which only a crashed attempt
// leaves behind. Over Connect, gRPC on the plain port and grpc-go on the
// gRPC port, each first deadline a few ms later than the last so that
// one of them ends with the begin in flight.
func TestSvcRetryAfterBeginTimedOut(t *testing.T) {
	t.Parallel()
	e := newRetryEnv(t, 5*time.Millisecond)
	failed := 0
	for i := 0; i < 24; i++ {
		sku := fmt.Sprintf("s%d", i)
		// 1 unit per node: no node meets an order of 2 alone.
		if _, err := e.connect.LoadStock(svcCtx(t), connect.NewRequest(&v1.LoadStockRequest{RouteKey: "clothes", SkuId: sku, Quantity: 3})); err != nil {
			t.Fatal(err)
		}
		k := i % 3
		id := fmt.Sprintf("b-%d", i)
		req := &v1.ReserveRequest{OrderId: id, Items: []*v1.Item{svcItem("clothes", sku, 2)}}
		d := time.Duration(20+2*i) * time.Millisecond
		cctx, cancel := context.WithTimeout(context.Background(), d)
		_, code1, _ := e.reserve(cctx, k, req)
		cancel()
		start := time.Now()
		cctx, cancel = context.WithTimeout(context.Background(), 6*time.Second)
		res, code2, err := e.reserve(cctx, k, req)
		cancel()
		took := time.Since(start)
		rec := ""
		if f, rerr := inventory.ReadOrder(context.Background(), e.clients[e.homeOf(id)], id).Fields(); rerr == nil {
			rec = f["status"]
		}
		t.Logf("%s k=%d first(%v)=%v retry=%v in %v, record %s", id, k, d, code1, code2, took.Round(time.Millisecond), rec)
		if err != nil {
			failed++
			t.Errorf("order %s: Reserve timed out after %v (%v), its retry at once with a 6s deadline failed after %v: %v (record %s)",
				id, d, code1, took.Round(time.Millisecond), err, rec)
			continue
		}
		if svcSum(res.Receipts) != 2 {
			t.Errorf("order %s: retry reserved %d units, want 2", id, svcSum(res.Receipts))
		}
	}
	if failed > 0 {
		t.Logf("%d of 24 retries failed", failed)
	}
}
