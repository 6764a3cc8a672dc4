package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

// SKU is one SKU the run loads, and what it loaded.
type SKU struct {
	Route  string // the inventory route the SKU is on
	SKU    string // the SKU id
	Loaded int64  // units the run loaded, over all the route's nodes
	Limit  int64  // per-user limit; 0 = none
}

// String is "route/sku".
func (s SKU) String() string { return s.Route + "/" + s.SKU }

type item struct {
	Route, SKU string
	Qty        int64
}

type receipt struct {
	Item   int
	SKU    string
	Qty    int64
	Node   string
	Redo   string
	Offset int64
}

// order is what the clients know about one order id.
type order struct {
	ID     string
	Client int
	User   string
	Items  []item
	TTL    int32

	mu            sync.Mutex // concurrent duplicate reserves
	reserveCalls  int
	reserveOK     int
	receipts      []receipt // of the first successful Reserve
	confirmIssued bool
	// Terminal claims: what a client was told that can never change.
	confirmedBy string // Confirm ok, or Cancel refused because confirmed
	cancelledBy string // Cancel ok, or Confirm refused (cancelled, expired)
	// notHeld is a claim that holds until the next Reserve of the order:
	// every Reserve call of the last round was refused, or Confirm said
	// the order does not exist.
	notHeld string
	// contradictions are client-visible answers that cannot both be true.
	contradictions []string
	// first and last are when a client call on the order began and
	// ended, first to last (a node's lost writes may touch it).
	first, last time.Time
	// decidedAt is when the first terminal claim (confirmedBy or
	// cancelledBy) was made, after the call that told it returned: the
	// order's record was decided for good by then (exposer.record).
	decidedAt time.Time
}

// touch records a call on o now.
func (o *order) touch() {
	now := time.Now()
	o.mu.Lock()
	if o.first.IsZero() {
		o.first = now
	}
	o.last = now
	o.mu.Unlock()
}

func (o *order) contradict(format string, args ...any) {
	o.contradictions = append(o.contradictions, fmt.Sprintf(format, args...))
}

func (o *order) claimConfirmed(why string) {
	if o.cancelledBy != "" {
		o.contradict("%s, but earlier %s", why, o.cancelledBy)
	}
	if o.confirmedBy == "" {
		o.confirmedBy = why
		o.markDecided()
	}
}

func (o *order) claimCancelled(why string) {
	if o.confirmedBy != "" {
		o.contradict("%s, but earlier %s", why, o.confirmedBy)
	}
	if o.cancelledBy == "" {
		o.cancelledBy = why
		o.markDecided()
	}
}

// markDecided records when the order's first terminal claim was made
// (decidedAt).
func (o *order) markDecided() {
	o.mu.Lock()
	if o.decidedAt.IsZero() {
		o.decidedAt = time.Now()
	}
	o.mu.Unlock()
}

func (o *order) decided() bool { return o.confirmedBy != "" || o.cancelledBy != "" }

// workload is the clients of a run.
type workload struct {
	c     *cluster
	opts  Options
	skus  []SKU
	users int

	ops     atomic.Int64
	nOrders atomic.Int64
	clients []*client
	orders  []*order // after run
}

type client struct {
	w      *workload
	id     int
	rng    *rand.Rand
	n      int
	ops    map[string]map[string]int64
	orders []*order
	recent []*order
	errs   []string // first messages of unexpected codes
}

func newWorkload(c *cluster, opts Options, skus []SKU) *workload {
	w := &workload{c: c, opts: opts, skus: skus, users: 40 + 8*opts.Clients}
	for i := range opts.Clients {
		w.clients = append(w.clients, &client{w: w, id: i, rng: rngFor(opts.Seed, 0x636c69+uint64(i)),
			ops: map[string]map[string]int64{}})
	}
	return w
}

// pick chooses the SKU of an item: mostly plentiful stock, sometimes a
// SKU with a per-user limit or a scarce one.
func (w *workload) pick(rng *rand.Rand) SKU {
	var want func(SKU) bool
	switch r := rng.IntN(100); {
	case r < 12:
		want = func(s SKU) bool { return s.Loaded < 1_000_000 }
	case r < 32:
		want = func(s SKU) bool { return s.Limit > 0 }
	default:
		want = func(s SKU) bool { return s.Loaded >= 1_000_000 && s.Limit == 0 }
	}
	var from []SKU
	for _, s := range w.skus {
		if want(s) {
			from = append(from, s)
		}
	}
	return from[rng.IntN(len(from))]
}

func (w *workload) orderCount() int64 { return w.nOrders.Load() }
func (w *workload) opCount() int64    { return w.ops.Load() }

func (w *workload) run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, cl := range w.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				cl.step(ctx)
				if w.opts.Think > 0 {
					time.Sleep(time.Duration(cl.rng.Int64N(int64(w.opts.Think))))
				}
			}
		}()
	}
	wg.Wait()
	for _, cl := range w.clients {
		w.orders = append(w.orders, cl.orders...)
	}
}

// merge adds the clients' operation counts to the report.
func (w *workload) merge(rep *Report) {
	for _, cl := range w.clients {
		for op, codes := range cl.ops {
			for code, n := range codes {
				rep.addOp(op, code, n)
			}
		}
		for _, e := range cl.errs {
			rep.note("%s", e)
		}
	}
	rep.Orders = len(w.orders)
}

// step runs one client action: mostly a new order, sometimes a replay of
// an earlier order id, a cancel before the reserve, or an invalid request.
func (cl *client) step(ctx context.Context) {
	r := cl.rng.IntN(100)
	switch {
	case r < 6 && len(cl.recent) > 0:
		o := cl.recent[cl.rng.IntN(len(cl.recent))]
		cl.reserve(ctx, o, "reserve-replay", 1)
		if !o.decided() && o.reserveOK > 0 {
			cl.decide(ctx, o)
		}
	case r < 9:
		o := cl.newOrder(true)
		if code, _ := cl.cancel(o, "cancel-first"); code == "ok" {
			o.claimCancelled("Cancel before any Reserve was ok")
		}
		cl.reserve(ctx, o, "reserve-after-cancel", 1)
	case r < 10:
		o := cl.newOrder(false)
		o.Items = append(o.Items, item{Route: "no-such-route", SKU: "big", Qty: 1})
		cl.reserve(ctx, o, "reserve-invalid", 1)
	default:
		o := cl.newOrder(true)
		dup := 1
		if cl.rng.IntN(10) == 0 {
			dup = 2 // a concurrent duplicate of the same order id
		}
		res := cl.reserve(ctx, o, "reserve", dup)
		for try := 0; res == "unknown" && try < 2 && ctx.Err() == nil; try++ {
			time.Sleep(time.Duration(100+cl.rng.IntN(200)) * time.Millisecond)
			res = cl.reserve(ctx, o, "reserve-retry", 1)
		}
		switch {
		case res == "ok":
			cl.decide(ctx, o)
		case res == "unknown" && cl.rng.IntN(2) == 0:
			cl.cancelLoop(ctx, o, "cancel-unknown")
		}
	}
}

// newOrder makes a new order id with random items; replayable orders may
// be reserved again later.
func (cl *client) newOrder(replayable bool) *order {
	cl.n++
	w := cl.w
	o := &order{ID: fmt.Sprintf("c%d-%d", cl.id, cl.n), Client: cl.id}
	mint := cl.rng.IntN(3)
	if cl.rng.IntN(4) != 0 {
		o.User = fmt.Sprintf("u%d", cl.rng.IntN(w.users))
	}
	if cl.rng.IntN(5) == 0 {
		o.TTL = 1
	}
	n := 1
	switch r := cl.rng.IntN(100); {
	case r >= 85:
		n = 3
	case r >= 50:
		n = 2
	}
	for range n {
		s := w.pick(cl.rng)
		q := 1 + cl.rng.Int64N(3)
		if s.Limit > 0 {
			q = 1 + cl.rng.Int64N(2)
			if o.User == "" { // a limited SKU is refused without a user
				o.User = fmt.Sprintf("u%d", cl.rng.IntN(w.users))
			}
		}
		o.Items = append(o.Items, item{Route: s.Route, SKU: s.SKU, Qty: q})
	}
	switch mint { // a third made up, a third minted, a third minted with the items
	case 1:
		o.ID = cl.mint(o.ID, nil)
	case 2:
		o.ID = cl.mint(o.ID, o.Items)
	}
	cl.orders = append(cl.orders, o)
	w.nOrders.Add(1)
	if !replayable {
		return o
	}
	if len(cl.recent) < 64 {
		cl.recent = append(cl.recent, o)
	} else {
		cl.recent[cl.rng.IntN(len(cl.recent))] = o
	}
	return o
}

// mint returns an order id minted by the service (NewOrderId, given items
// when not nil: its record lives on a node that was usable when minted),
// or fallback when minting failed: the order then has an id the client
// made up, like a third of all orders.
func (cl *client) mint(fallback string, items []item) string {
	inv, _ := cl.w.c.rpc()
	ctx, cancel := context.WithTimeout(context.Background(), cl.w.opts.ClientTimeout)
	defer cancel()
	req := &v1.NewOrderIdRequest{}
	for _, it := range items {
		req.Items = append(req.Items, &v1.Item{RouteKey: it.Route, SkuId: it.SKU, Quantity: it.Qty})
	}
	res, err := inv.NewOrderId(ctx, connect.NewRequest(req))
	code := "ok"
	if err != nil {
		code = connect.CodeOf(err).String()
	}
	cl.count("mint", code)
	if err != nil {
		return fallback
	}
	return res.Msg.OrderId
}

// decide confirms (60%), cancels (25%) or abandons (15%) a reserved order.
func (cl *client) decide(ctx context.Context, o *order) {
	switch r := cl.rng.IntN(100); {
	case r < 60:
		if cl.confirmLoop(ctx, o) {
			if cl.rng.IntN(10) == 0 {
				if code, _ := cl.confirm(o, "confirm-again"); code == "ok" {
					o.claimConfirmed("a second Confirm was ok")
				} else if code == "failed_precondition" || code == "not_found" {
					o.contradict("a second Confirm after Confirm ok answered %s", code)
				}
			}
			if cl.rng.IntN(20) == 0 {
				switch code, _ := cl.cancel(o, "cancel-after-confirm"); code {
				case "ok":
					o.claimCancelled("Cancel after Confirm was ok")
				case "failed_precondition":
					o.claimConfirmed("Cancel refused: already confirmed")
				}
			}
		}
	case r < 85:
		cl.cancelLoop(ctx, o, "cancel")
	}
}

// call runs one RPC with the client timeout and counts its outcome.
func (cl *client) call(op string, f func(context.Context) error) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cl.w.opts.ClientTimeout)
	defer cancel()
	err := f(ctx)
	code := "ok"
	if err != nil {
		code = connect.CodeOf(err).String()
	}
	cl.count(op, code)
	if code == "internal" || code == "unknown" || (code == "invalid_argument" && op != "reserve-invalid") {
		if len(cl.errs) < 5 {
			cl.errs = append(cl.errs, fmt.Sprintf("%s answered %s: %v", op, code, err))
		}
	}
	return code, err
}

func (cl *client) count(op, code string) {
	m := cl.ops[op]
	if m == nil {
		m = map[string]int64{}
		cl.ops[op] = m
	}
	m[code]++
	cl.w.ops.Add(1)
}
