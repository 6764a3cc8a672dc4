package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
)

// Sold-out storms: after a flash sale sells out nearly every order is
// refused. VarSoldOut sends 1-item orders with distinct ids for a SKU of
// a one-node route that has no stock left (one unit loaded, reserved and
// confirmed in the setup: sold, nothing reserved), ids hashed over the
// nodes as VarHot1's. VarSoldOutReserved sends the same orders with the
// unit reserved and not confirmed, the usual state just after a
// sell-out: the held unit may be a refused order's own, so each refusal
// writes its fence, a failed record on the order's home
// (inventory/soldout.go); with nothing reserved a refusal writes nothing.
// VarSeedSoldOut sends the seed's deduction EVAL for a SKU at "0:0" on
// the same node, which refuses with two reads (the seed has no reserved
// state: its deduction is final). All three count a refusal as the
// operation's success and anything else as a failure: for the seed, only
// its script's own "short" answer is a refusal (errSeedShort), an EVAL
// error or an unusable node a failure.

// seedSoldOutSKU is the seed's id of the sold-out SKU.
const seedSoldOutSKU = 7778

// soldOutSKU is shardis's sold-out SKU.
const soldOutSKU = "sold-out"

// soldOutRefusals is how many refused orders measureSoldOutKeys sends.
const soldOutRefusals = 2000

// errNotRefused is a sold-out order that was not refused.
var errNotRefused = errors.New("bench: an order of a sold-out SKU was not refused")

// soldOutWorkloads returns VarSoldOut, VarSoldOutReserved and
// VarSeedSoldOut over c, the sold-out SKU on route singleRoutes[0], whose
// nodes are nodes.
func soldOutWorkloads(ctx context.Context, c *Cluster, nodes []*node.Node) []invWorkload {
	items := []inventory.Item{{Route: singleRoutes[0], SKU: soldOutSKU, Quantity: 1}}
	seedSKU := strconv.Itoa(seedSoldOutSKU)
	seedItems := []SeedItem{{Nodes: nodes, SKU: seedSKU, Qty: 1}}
	seedQ := seedQueue(seedSoldOutSKU)
	// sellOut loads one unit and reserves it (for the reservation's
	// default TTL, minutes: longer than any run), then confirms it or not
	sellOut := func(confirm bool) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			if _, err := c.Inv.LoadStock(ctx, singleRoutes[0], soldOutSKU, 1, 0); err != nil {
				return fmt.Errorf("load %s/%s: %w", singleRoutes[0], soldOutSKU, err)
			}
			if _, err := c.Inv.Reserve(ctx, "sold-out-last-unit", items, "", 0); err != nil || !confirm {
				return err
			}
			_, err := c.Inv.Confirm(ctx, "sold-out-last-unit")
			return err
		}
	}
	refused := func(w *Worker) error {
		_, err := c.Inv.Reserve(ctx, orderID(w, 'r'), items, "", 0)
		if errors.Is(err, inventory.ErrInsufficientStock) {
			return nil
		}
		return errors.Join(errNotRefused, err)
	}
	return []invWorkload{
		{VarSoldOut, sellOut(true), refused},
		{VarSoldOutReserved, sellOut(false), refused},
		{VarSeedSoldOut, func(ctx context.Context) error {
			for _, n := range nodes {
				if err := loadSeedStock(ctx, n, seedSKU, 0); err != nil {
					return err
				}
			}
			return nil
		}, func(w *Worker) error {
			err := SeedOrder(ctx, orderID(w, 's'), seedItems, func(string) string { return seedQ })
			if errors.Is(err, errSeedShort) {
				return nil
			}
			return errors.Join(errNotRefused, err)
		}},
	}
}

// SoldOutKeys is what refused orders of a sold-out SKU left on the nodes.
type SoldOutKeys struct {
	Refused int64 // orders refused
	Keys    int64 // DBSIZE summed over the nodes (witness hashes left out), after minus before
	// New names up to five of the keys that were not there before, as
	// "node key".
	New []string `json:",omitempty"`
}

// PerRefusal is Keys per refused order (0 when none was refused).
func (k *SoldOutKeys) PerRefusal() float64 {
	if k == nil || k.Refused == 0 {
		return 0
	}
	return float64(k.Keys) / float64(k.Refused)
}

// measureSoldOutKeys prepares wl's nodes (VarSoldOut's or
// VarSoldOutReserved's), sends a warm-up of
// soldOutRefusals/10 refused orders, then sends soldOutRefusals orders of
// wl from conc goroutines and counts the keys they left (DBSIZE of every
// node before and after, and the names of up to five new keys). A node's
// witness hash (node.WitnessKey: its peers' marks, node/witness.go) is no
// order's and is not counted: the marks of the setup's writes are written
// a heartbeat after them, which on a busy machine can fall inside the
// measured refusals. An order that was not refused is an error.
func measureSoldOutKeys(ctx context.Context, c *Cluster, wl invWorkload, conc int) (*SoldOutKeys, error) {
	nodes := c.Router.Nodes()
	if err := retrySetup(nodes, func() error {
		if err := c.Reset(ctx); err != nil {
			return err
		}
		return wl.setup(ctx)
	}); err != nil {
		return nil, err
	}
	workers := NewLoad(max(conc, 1), 4).workers
	if err := refuseN(workers, wl, soldOutRefusals/10); err != nil {
		return nil, err
	}
	before, err := keyCount(ctx, nodes)
	if err != nil {
		return nil, err
	}
	names, err := keyNames(ctx, nodes)
	if err != nil {
		return nil, err
	}
	if err := refuseN(workers, wl, soldOutRefusals); err != nil {
		return nil, err
	}
	after, err := keyCount(ctx, nodes)
	if err != nil {
		return nil, err
	}
	out := &SoldOutKeys{Refused: soldOutRefusals, Keys: after - before}
	if out.Keys != 0 {
		now, err := keyNames(ctx, nodes)
		if err != nil {
			return nil, err
		}
		for k := range now {
			if !names[k] && len(out.New) < 5 {
				out.New = append(out.New, k)
			}
		}
	}
	return out, nil
}

// keyCount returns DBSIZE summed over the nodes, each node's witness hash
// left out: DBSIZE and the hash's EXISTS in one MULTI, so a witness
// written between them cannot count.
func keyCount(ctx context.Context, nodes []*node.Node) (int64, error) {
	var sum int64
	for _, n := range nodes {
		var size, witness *redis.IntCmd
		if _, err := n.Client().TxPipelined(ctx, func(p redis.Pipeliner) error {
			size, witness = p.DBSize(ctx), p.Exists(ctx, node.WitnessKey)
			return nil
		}); err != nil {
			return 0, fmt.Errorf("DBSIZE and EXISTS %s on node %s: %w", node.WitnessKey, n.Name(), err)
		}
		sum += size.Val() - witness.Val()
	}
	return sum, nil
}

// keyNames returns every key of the nodes as "node key", but for their
// witness hashes (the nodes hold only a sold-out SKU's setup here: a few
// dozen keys).
func keyNames(ctx context.Context, nodes []*node.Node) (map[string]bool, error) {
	out := map[string]bool{}
	for _, n := range nodes {
		keys, err := n.Client().Keys(ctx, "*").Result()
		if err != nil {
			return nil, fmt.Errorf("KEYS on node %s: %w", n.Name(), err)
		}
		for _, k := range keys {
			if k != node.WitnessKey {
				out[n.Name()+" "+k] = true
			}
		}
	}
	return out, nil
}

// refuseN sends n orders of wl from the workers, each its own goroutine,
// and returns the first that was not refused.
func refuseN(workers []*Worker, wl invWorkload, n int) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		next  = make(chan struct{}, n)
	)
	for range n {
		next <- struct{}{}
	}
	close(next)
	for _, w := range workers {
		wg.Add(1)
		go func(w *Worker) {
			defer wg.Done()
			for range next {
				if err := wl.op(w); err != nil {
					mu.Lock()
					first = cmpOr(first, err)
					mu.Unlock()
					return
				}
			}
		}(w)
	}
	wg.Wait()
	if first != nil {
		return fmt.Errorf("sold-out keys: %w", first)
	}
	return nil
}

// cmpOr returns a when it is not nil, else b.
func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// SoldOutVsSeed is VarSoldOut's orders/s (the SKU's units confirmed)
// over VarSeedSoldOut's, paired per round (0 when the run has no such
// series).
func (ir *InvResult) SoldOutVsSeed() float64 {
	h, s := ir.Series[VarSoldOut], ir.Series[VarSeedSoldOut]
	if h == nil || s == nil || len(h.Samples) != len(s.Samples) || len(s.Samples) == 0 {
		return 0
	}
	return PairedRatio([]*Series{h}, []*Series{s})
}

// SoldOutReservedVsSeed is SoldOutVsSeed for VarSoldOutReserved (the
// SKU's last unit reserved, not confirmed): 0 when the run has no such
// series (results saved before it existed).
func (ir *InvResult) SoldOutReservedVsSeed() float64 {
	return ir.Over(VarSoldOutReserved, VarSeedSoldOut)
}
