package drill

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	v1 "github.com/shardis/shardis/proto/shardis/v1"
	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
)

// Phase is the part of a drill in which an order's Reserve was answered:
// the report counts orders by phase, so it shows that orders went on
// after recovery.
type Phase int32

// The phases, in the order a drill passes them.
const (
	Before   Phase = iota // before the kill
	Outage                // from the kill until the node is UP again
	After                 // after it is UP again
	Rejoined              // Sentinel: after the killed master rejoined as a replica
	phases
)

var phaseNames = [phases]string{"before the kill", "during the outage", "after recovery (UP)", "after the old master rejoined"}

// String is the phase as the report prints it ("during the outage").
func (p Phase) String() string {
	if p < 0 || p >= phases {
		return fmt.Sprintf("phase %d", int32(p))
	}
	return phaseNames[p]
}

// Load is the order load of a drill. The zero value works.
type Load struct {
	// Workers is how many order clients run at once.
	// default: 8
	Workers int
	// Seed picks the clients' random streams (worker w draws from
	// PCG(w, Seed)), so each drill keeps its own sequence of orders.
	// default: 0
	Seed uint64
	// TTL is every reservation's TTL, in whole seconds: short, so that
	// healing (every unsettled reservation expiring and being returned)
	// is quick.
	// default: 3s
	TTL time.Duration
	// Minted gives half the orders an id minted by NewOrderId: its record
	// lives on a node that was usable when minted, so such an order does
	// not fail for its record's node being down. The report counts them
	// apart.
	// default: false (every id is made up by the client)
	Minted bool
	// Users gives every order a user id of its own ("u" + order id), so
	// its items take the per-user quota path.
	// default: false (no user)
	Users bool
}

// Outcomes tallies a drill's orders. Every acknowledged Reserve ends in
// exactly one of: confirmed (Confirm acknowledged), cancelled (Cancel
// acknowledged), left to expire (nothing sent), or settle unknown (a
// Confirm or Cancel that failed: the node decides, the checks accept
// reserved, confirmed or cancelled), so the four add up to ok.
type Outcomes struct {
	phase atomic.Int32 // the Phase orders are counted in now

	mu           sync.Mutex // guards the fields below
	ok, failed   [phases]int64
	okMinted     int64 // of ok, those with a minted id (Load.Minted)
	failedMinted int64 // of failed, those with a minted id
	minted       bool  // Load.Minted: the report counts minted ids apart
	codes        map[string]int64
	acks         map[string]int64 // acknowledged Reserve: order → units
	confirmed    map[string]bool  // acknowledged Confirm
	cancelled    map[string]bool  // acknowledged Cancel
	left         int64            // acknowledged, then left to expire
	unknown      int64            // acknowledged, then a Confirm or Cancel failed
}

func newOutcomes(minted bool) *Outcomes {
	return &Outcomes{minted: minted, codes: map[string]int64{}, acks: map[string]int64{},
		confirmed: map[string]bool{}, cancelled: map[string]bool{}}
}

// SetPhase makes later answers count in phase p.
func (o *Outcomes) SetPhase(p Phase) { o.phase.Store(int32(p)) }

// acked is what the clients were told, for the checks. The caller holds
// o.mu.
func (o *Outcomes) acked() Acked {
	return Acked{Reserved: o.acks, Confirmed: o.confirmed, Cancelled: o.cancelled}
}

// Start runs l's order clients against inv until stop is called; stop
// ends them and waits for them (a second call does nothing more). An
// order whose Reserve was acknowledged is followed through to its Confirm
// or Cancel even once stop was called.
func Start(inv shardisv1connect.InventoryServiceClient, l Load) (out *Outcomes, stop func()) {
	if l.Workers <= 0 {
		l.Workers = 8
	}
	if l.TTL <= 0 {
		l.TTL = 3 * time.Second
	}
	out = newOutcomes(l.Minted)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range l.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), l.Seed))
			for i := 0; ctx.Err() == nil; i++ {
				order(ctx, inv, fmt.Sprintf("w%d-%d", w, i), rng, l, out)
			}
		}()
	}
	return out, func() { cancel(); wg.Wait() }
}

// order reserves one or two SKUs (sku-a on route clothes, 1 or 2 units;
// half the time also one unit of sku-b on route books), then confirms (6
// in 10), cancels (3 in 10) or leaves the reservation to expire (1 in
// 10), recording what was acknowledged.
func order(ctx context.Context, inv shardisv1connect.InventoryServiceClient, id string, rng *rand.Rand, l Load, out *Outcomes) {
	qty := 1 + rng.Int64N(2)
	items := []*v1.Item{{RouteKey: "clothes", SkuId: "sku-a", Quantity: qty}}
	units := qty
	if rng.IntN(2) == 0 {
		items = append(items, &v1.Item{RouteKey: "books", SkuId: "sku-b", Quantity: 1})
		units++
	}
	rctx, cancel := context.WithTimeout(ctx, l.TTL)
	defer cancel()
	req := &v1.ReserveRequest{OrderId: id, Items: items, TtlSeconds: int32(l.TTL / time.Second)}
	if l.Users {
		req.UserId = "u" + id
	}
	minted := l.Minted && rng.IntN(2) == 0
	var err error
	if minted {
		var res *connect.Response[v1.NewOrderIdResponse]
		if res, err = inv.NewOrderId(rctx, connect.NewRequest(&v1.NewOrderIdRequest{})); err == nil {
			req.OrderId = res.Msg.OrderId
		}
	}
	if err == nil {
		_, err = inv.Reserve(rctx, connect.NewRequest(req))
	}
	if err != nil {
		if ctx.Err() == nil { // else the load was stopped: no outcome of the drill
			out.refused(minted, err)
			time.Sleep(5 * time.Millisecond) // a down route answers at once: do not spin
		}
		return
	}
	out.reserved(req.OrderId, units, minted)
	// The settle runs even once the load is stopped (its own context):
	// an acknowledged order is always followed through.
	sctx, scancel := context.WithTimeout(context.Background(), l.TTL)
	defer scancel()
	switch rng.IntN(10) {
	case 0:
		out.settled(req.OrderId, nil, nil)
	case 1, 2, 3:
		_, err := inv.Cancel(sctx, connect.NewRequest(&v1.CancelRequest{OrderId: req.OrderId}))
		out.settled(req.OrderId, out.cancelled, err)
	default:
		_, err := inv.Confirm(sctx, connect.NewRequest(&v1.ConfirmRequest{OrderId: req.OrderId}))
		out.settled(req.OrderId, out.confirmed, err)
	}
}

// refused counts a Reserve (or its NewOrderId) that failed with err.
func (o *Outcomes) refused(minted bool, err error) {
	phase := o.phase.Load()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.failed[phase]++
	if minted {
		o.failedMinted++
	}
	o.codes[connect.CodeOf(err).String()]++
}

// reserved counts an acknowledged Reserve of order id for units.
func (o *Outcomes) reserved(id string, units int64, minted bool) {
	phase := o.phase.Load()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ok[phase]++
	if minted {
		o.okMinted++
	}
	o.acks[id] = units
}

// settled counts how an acknowledged order ended: left to expire (into
// nil), its Confirm or Cancel acknowledged (into that set), or unknown
// (err: the call failed).
func (o *Outcomes) settled(id string, into map[string]bool, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case err != nil:
		o.unknown++
	case into == nil:
		o.left++
	default:
		into[id] = true
	}
}

// Report prints the orders by phase and code and how the acknowledged
// ones ended; it returns the problems: no order acknowledged in the last
// phase reached, or an accounting that does not add up.
func (o *Outcomes) Report() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var problems []string
	var ok, failed int64
	last := Phase(o.phase.Load())
	for p := range last + 1 {
		fmt.Printf("%-40s %d ok, %d failed\n", "reserves "+p.String(), o.ok[p], o.failed[p])
		ok += o.ok[p]
		failed += o.failed[p]
	}
	fmt.Printf("%-40s %d ok, %d failed\n", "reserves", ok, failed)
	if o.minted {
		fmt.Printf("%-40s %d ok, %d failed (the rest had ids made up by the client)\n", "  of them with minted ids", o.okMinted, o.failedMinted)
	}
	codes := make([]string, 0, len(o.codes))
	for c := range o.codes {
		codes = append(codes, c)
	}
	sort.Strings(codes)
	for _, c := range codes {
		fmt.Printf("%-40s %d\n", "  failed with "+c, o.codes[c])
	}
	conf, canc := int64(len(o.confirmed)), int64(len(o.cancelled))
	sum := conf + canc + o.left + o.unknown
	fmt.Printf("%-40s %d confirmed + %d cancelled + %d left to expire + %d settle failed = %d of %d ok\n",
		"of the ok orders", conf, canc, o.left, o.unknown, sum, ok)
	if sum != ok {
		problems = append(problems, fmt.Sprintf("the ok orders' outcomes add up to %d, not %d", sum, ok))
	}
	if o.ok[last] == 0 {
		problems = append(problems, "no order was acknowledged "+last.String())
	}
	return problems
}

// LoadStock loads the stock the load orders from through inv: 50,000
// units of sku-a on route clothes and of sku-b on route books. It returns
// what it loaded, for [Heal], or the first LoadStock error, naming the
// SKU.
func LoadStock(ctx context.Context, inv shardisv1connect.InventoryServiceClient) ([]*v1.LoadStockRequest, error) {
	skus := []*v1.LoadStockRequest{{RouteKey: "clothes", SkuId: "sku-a", Quantity: 50000}, {RouteKey: "books", SkuId: "sku-b", Quantity: 50000}}
	for _, m := range skus {
		if _, err := inv.LoadStock(ctx, connect.NewRequest(m)); err != nil {
			return nil, fmt.Errorf("load %s: %w", m.SkuId, err)
		}
	}
	return skus, nil
}
