package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/shardis/shardis/internal/drillcheck"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
)

// The drill's phases: orders are counted by the phase their Reserve was
// answered in, so the report shows that orders went on after recovery.
const (
	phaseBefore   = iota // before the kill
	phaseOutage          // from the kill until the node is UP again
	phaseAfter           // after it is UP again
	phaseRejoined        // Sentinel: after the killed master rejoined as a replica
	phases
)

var phaseNames = [phases]string{"before the kill", "during the outage", "after recovery (UP)", "after the old master rejoined"}

// ttlSeconds is every drill reservation's TTL: short, so that healing
// (every unsettled reservation expiring and being returned) is quick.
const ttlSeconds = 3

// outcomes tallies the order load. Every acknowledged Reserve ends in
// exactly one of: confirmed (Confirm acknowledged), cancelled (Cancel
// acknowledged), left to expire (nothing sent), or settle unknown (a
// Confirm or Cancel that failed: the node decides, the check accepts
// reserved, confirmed or cancelled), so the four add up to ok.
type outcomes struct {
	phase atomic.Int32

	mu        sync.Mutex
	ok        [phases]int64
	failed    [phases]int64
	codes     map[string]int64
	reserved  map[string]int64 // acknowledged Reserve: order → units
	confirmed map[string]bool  // acknowledged Confirm
	cancelled map[string]bool  // acknowledged Cancel
	left      int64            // acknowledged, then left to expire
	unknown   int64            // acknowledged, then a Confirm or Cancel failed
}

// acked is what the clients were told, for the checks. The caller holds
// o.mu.
func (o *outcomes) acked() drillcheck.Acked {
	return drillcheck.Acked{Reserved: o.reserved, Confirmed: o.confirmed, Cancelled: o.cancelled}
}

func newOutcomes() *outcomes {
	return &outcomes{codes: map[string]int64{}, reserved: map[string]int64{},
		confirmed: map[string]bool{}, cancelled: map[string]bool{}}
}

// runLoad starts workers order clients; the returned stop ends them and
// waits for them.
func runLoad(inv shardisv1connect.InventoryServiceClient, workers int, out *outcomes) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 13))
			for i := 0; ctx.Err() == nil; i++ {
				order(ctx, inv, fmt.Sprintf("w%d-%d", w, i), rng, out)
			}
		}()
	}
	return func() { cancel(); wg.Wait() }
}

// order reserves one or two SKUs, then confirms (6 in 10), cancels (3 in
// 10) or leaves the reservation to expire (1 in 10), recording what was
// acknowledged.
func order(ctx context.Context, inv shardisv1connect.InventoryServiceClient, id string, rng *rand.Rand, out *outcomes) {
	qty := 1 + rng.Int64N(2)
	items := []*v1.Item{{RouteKey: "clothes", SkuId: "sku-a", Quantity: qty}}
	units := qty
	if rng.IntN(2) == 0 {
		items = append(items, &v1.Item{RouteKey: "books", SkuId: "sku-b", Quantity: 1})
		units++
	}
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err := inv.Reserve(rctx, connect.NewRequest(&v1.ReserveRequest{OrderId: id, Items: items, TtlSeconds: ttlSeconds}))
	phase := out.phase.Load()
	if err != nil {
		if ctx.Err() != nil {
			return // the load was stopped: not an outcome of the drill
		}
		out.mu.Lock()
		out.failed[phase]++
		out.codes[connect.CodeOf(err).String()]++
		out.mu.Unlock()
		time.Sleep(5 * time.Millisecond) // a down route answers at once: do not spin
		return
	}
	out.mu.Lock()
	out.ok[phase]++
	out.reserved[id] = units
	out.mu.Unlock()
	// The settle runs even once the load is stopped (its own context):
	// an acknowledged order is always followed through.
	sctx, scancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer scancel()
	var settle error
	switch rng.IntN(10) {
	case 0:
		out.mu.Lock()
		out.left++
		out.mu.Unlock()
		return
	case 1, 2, 3:
		if _, settle = inv.Cancel(sctx, connect.NewRequest(&v1.CancelRequest{OrderId: id})); settle == nil {
			out.mu.Lock()
			out.cancelled[id] = true
			out.mu.Unlock()
		}
	default:
		if _, settle = inv.Confirm(sctx, connect.NewRequest(&v1.ConfirmRequest{OrderId: id})); settle == nil {
			out.mu.Lock()
			out.confirmed[id] = true
			out.mu.Unlock()
		}
	}
	if settle != nil {
		out.mu.Lock()
		out.unknown++
		out.mu.Unlock()
	}
}

// report prints the orders by phase and code and how the acknowledged
// ones ended; it returns the problems: no order acknowledged after
// recovery, or an accounting that does not add up.
func (o *outcomes) report() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var problems []string
	var ok, failed int64
	last := o.phase.Load()
	for p := range last + 1 {
		fmt.Printf("%-40s %d ok, %d failed\n", "reserves "+phaseNames[p], o.ok[p], o.failed[p])
		ok += o.ok[p]
		failed += o.failed[p]
	}
	fmt.Printf("%-40s %d ok, %d failed\n", "reserves", ok, failed)
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
		problems = append(problems, "no order was acknowledged "+phaseNames[last])
	}
	return problems
}
