package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
)

// invWorkloads returns the inventory variants over c. Every SKU holds 10⁹
// units (split over its route's nodes), so no order runs short: these are
// the costs of the success path. The floor variants' senders, started by
// their first order, run until ctx ends.
func invWorkloads(ctx context.Context, c *Cluster, nSKU int) (map[string]invWorkload, error) {
	inv := c.Inv
	load := func(route string, skus ...string) error {
		for _, s := range skus {
			if _, err := inv.LoadStock(ctx, route, s, inventory.MaxQuantity, 0); err != nil {
				return fmt.Errorf("load %s/%s: %w", route, s, err)
			}
		}
		return nil
	}
	skuNames := func(prefix string) []string {
		out := make([]string, nSKU)
		for i := range out {
			out[i] = prefix + strconv.Itoa(i)
		}
		return out
	}
	one := skuNames("s-")
	// Seed SKU ids are numbers (the seed's queue is sku % 50); shardis
	// uses the same ids for its 3-item orders.
	three := make([][]string, len(singleRoutes))
	queue := map[string]string{}
	for r := range singleRoutes {
		three[r] = make([]string, nSKU)
		for k := range three[r] {
			num := (r+1)*1000 + k
			three[r][k] = strconv.Itoa(num)
			queue[three[r][k]] = seedQueue(num)
		}
	}
	routeNodes := make([][]*node.Node, len(singleRoutes))
	for r, route := range singleRoutes {
		set, err := c.Router.Set(invServer, route)
		if err != nil {
			return nil, err
		}
		routeNodes[r] = set.Nodes()
	}
	items1 := make([][]inventory.Item, nSKU)
	for k, s := range one {
		items1[k] = []inventory.Item{{Route: routeAll, SKU: s, Quantity: 1}}
	}
	hot3 := []inventory.Item{{Route: routeAll, SKU: "hot", Quantity: 1}}
	hot1 := []inventory.Item{{Route: singleRoutes[0], SKU: "hot", Quantity: 1}}
	seedHot := strconv.Itoa(seedHotSKU)
	seedHotItems := []SeedItem{{Nodes: routeNodes[0], SKU: seedHot, Qty: 1}}
	seedHotQueue := seedQueue(seedHotSKU)
	floors := make([]*floorBatcher, len(singleRoutes))
	bucketFloor := newFloorBucketBatcher(ctx, routeNodes[0][0]) // the bucketed-record floor's (floorbucket.go)
	noTTLFloor := newFloorNoTTLBatcher(ctx, routeNodes[0][0])   // the no-TTL floor's (floor.go: floorNoTTLScript)
	gfloors := make([]*floorBatcher, len(singleRoutes))         // the guarded floor's (floorguard.go)
	for r := range floors {
		floors[r] = newFloorBatcher(ctx, routeNodes[r][0])
		gfloors[r] = newGuardedFloorBatcher(ctx, routeNodes[r][0])
	}
	floorHot := []floorItem{{node: 0, sku: floorHotSKU}}
	// a floor's setups: every node's batcher reset (a failure of the
	// last row's late entries fails no order of this one) and stamped (the
	// guarded floor's), the script checked on the stock's node, the stock
	// loaded
	stamped := func(ctx context.Context, fs []*floorBatcher) error {
		for _, f := range fs {
			f.reset()
			if err := f.stamp(ctx); err != nil {
				return err
			}
		}
		return nil
	}
	hotSetup := func(fs []*floorBatcher) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			if err := stamped(ctx, fs); err != nil {
				return err
			}
			if err := fs[0].check(ctx); err != nil {
				return err
			}
			return fs[0].load(ctx, floorHotSKU, inventory.MaxQuantity)
		}
	}
	setup3 := func(fs []*floorBatcher) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			if err := stamped(ctx, fs); err != nil {
				return err
			}
			for r, f := range fs {
				for _, s := range three[r] {
					if err := f.load(ctx, s, inventory.MaxQuantity); err != nil {
						return err
					}
				}
			}
			return nil
		}
	}
	floorHotSetup, floor3Setup := hotSetup(floors), setup3(floors)
	floor3Items := func(w *Worker) []floorItem {
		items := make([]floorItem, len(singleRoutes))
		for r := range items {
			items[r] = floorItem{node: r, sku: three[r][w.Rng.IntN(nSKU)]}
		}
		return items
	}
	reserve := func(w *Worker, items []inventory.Item) error {
		_, err := inv.Reserve(ctx, orderID(w, 'o'), items, "", 0)
		return err
	}
	reserveAlone := func(w *Worker, items []inventory.Item) error {
		_, err := c.InvAlone.Reserve(ctx, orderID(w, 'o'), items, "", 0)
		return err
	}
	items3 := func(w *Worker) []inventory.Item {
		items := make([]inventory.Item, len(singleRoutes))
		for r, route := range singleRoutes {
			items[r] = inventory.Item{Route: route, SKU: three[r][w.Rng.IntN(nSKU)], Quantity: 1}
		}
		return items
	}
	load3 := func(ctx context.Context) error {
		for r, route := range singleRoutes {
			if err := load(route, three[r]...); err != nil {
				return err
			}
		}
		return nil
	}
	wl := map[string]invWorkload{
		VarInv1: {VarInv1, func(ctx context.Context) error { return load(routeAll, one...) },
			func(w *Worker) error { return reserve(w, items1[w.Rng.IntN(nSKU)]) }},
		VarInv3:      {VarInv3, load3, func(w *Worker) error { return reserve(w, items3(w)) }},
		VarInv3Alone: {VarInv3Alone, load3, func(w *Worker) error { return reserveAlone(w, items3(w)) }},
		VarSeed3: {VarSeed3, func(ctx context.Context) error {
			for r := range singleRoutes {
				for _, s := range three[r] {
					for _, n := range routeNodes[r] {
						if err := loadSeedStock(ctx, n, s, inventory.MaxQuantity); err != nil {
							return err
						}
					}
				}
			}
			return nil
		}, func(w *Worker) error {
			items := make([]SeedItem, len(singleRoutes))
			for r := range singleRoutes {
				items[r] = SeedItem{Nodes: routeNodes[r], SKU: three[r][w.Rng.IntN(nSKU)], Qty: 1}
			}
			return SeedOrder(ctx, orderID(w, 's'), items, func(s string) string { return queue[s] })
		}},
		VarHot3: {VarHot3, func(ctx context.Context) error { return load(routeAll, "hot") },
			func(w *Worker) error { return reserve(w, hot3) }},
		VarHot1: {VarHot1, func(ctx context.Context) error { return load(singleRoutes[0], "hot") },
			func(w *Worker) error { return reserve(w, hot1) }},
		VarHot1Alone: {VarHot1Alone, func(ctx context.Context) error { return load(singleRoutes[0], "hot") },
			func(w *Worker) error { return reserveAlone(w, hot1) }},
		VarHot1Minted: {VarHot1Minted, func(ctx context.Context) error { return load(singleRoutes[0], "hot") },
			func(w *Worker) error {
				id, err := inv.NewOrderID(ctx, hot1...)
				if err != nil {
					return err
				}
				_, err = inv.Reserve(ctx, id, hot1, "", 0)
				return err
			}},
		VarSeedHot1: {VarSeedHot1, func(ctx context.Context) error {
			for _, n := range routeNodes[0] {
				if err := loadSeedStock(ctx, n, seedHot, inventory.MaxQuantity); err != nil {
					return err
				}
			}
			return nil
		}, func(w *Worker) error {
			return SeedOrder(ctx, orderID(w, 's'), seedHotItems, func(string) string { return seedHotQueue })
		}},
		VarHotFloor: {VarHotFloor, floorHotSetup, func(w *Worker) error {
			id := orderID(w, 'f')
			return floorOrder(floors, floorHome(id, len(floors)), id, floorHot)
		}},
		VarHotFloorOneRound: {VarHotFloorOneRound, floorHotSetup, func(w *Worker) error {
			id := orderID(w, 'f')
			return floorOrderOneRound(floors, floorHome(id, len(floors)), id, floorHot)
		}},
		VarHotFloorLocal: {VarHotFloorLocal, floorHotSetup, func(w *Worker) error {
			return floorOrder(floors, 0, orderID(w, 'f'), floorHot)
		}},
		VarHotFloorBucket: {VarHotFloorBucket, func(ctx context.Context) error {
			bucketFloor.reset()
			if err := bucketFloor.checkBucket(ctx); err != nil {
				return err
			}
			return bucketFloor.load(ctx, floorHotSKU, inventory.MaxQuantity)
		}, func(w *Worker) error {
			id, minute := floorBucketID(time.Now(), orderID(w, 'b'))
			return floorBucketOrder(bucketFloor, id, minute, floorHotSKU)
		}},
		VarHotFloorLocalNoTTL: {VarHotFloorLocalNoTTL, func(ctx context.Context) error {
			noTTLFloor.reset()
			if err := noTTLFloor.check(ctx); err != nil {
				return err
			}
			// the check's taken record a: a key without a TTL
			if ttl, err := noTTLFloor.n.Client().TTL(ctx, "floor:order:a").Result(); err != nil || ttl != -1 {
				return fmt.Errorf("no-TTL floor check: record a's TTL is %v (%v), want none", ttl, err)
			}
			return noTTLFloor.load(ctx, floorHotSKU, inventory.MaxQuantity)
		}, func(w *Worker) error {
			return floorOrder([]*floorBatcher{noTTLFloor}, 0, orderID(w, 'n'), floorHot)
		}},
		VarFloor3: {VarFloor3, floor3Setup, func(w *Worker) error {
			id := orderID(w, 'f')
			return floorOrder(floors, floorHome(id, len(floors)), id, floor3Items(w))
		}},
		VarFloor3OneRound: {VarFloor3OneRound, floor3Setup, func(w *Worker) error {
			id := orderID(w, 'f')
			return floorOrderOneRound(floors, floorHome(id, len(floors)), id, floor3Items(w))
		}},
		VarHotFloorGuarded: {VarHotFloorGuarded, hotSetup(gfloors), func(w *Worker) error {
			id := orderID(w, 'f')
			return floorOrder(gfloors, floorHome(id, len(gfloors)), id, floorHot)
		}},
		VarHotFloorLocalGuarded: {VarHotFloorLocalGuarded, hotSetup(gfloors), func(w *Worker) error {
			return floorOrder(gfloors, 0, orderID(w, 'f'), floorHot)
		}},
		VarFloor3Guarded: {VarFloor3Guarded, setup3(gfloors), func(w *Worker) error {
			id := orderID(w, 'f')
			return floorOrder(gfloors, floorHome(id, len(gfloors)), id, floor3Items(w))
		}},
		VarHotFloorOneRoundGuarded: {VarHotFloorOneRoundGuarded, hotSetup(gfloors), func(w *Worker) error {
			id := orderID(w, 'f')
			return floorOrderOneRound(gfloors, floorHome(id, len(gfloors)), id, floorHot)
		}},
		VarFloor3OneRoundGuarded: {VarFloor3OneRoundGuarded, setup3(gfloors), func(w *Worker) error {
			id := orderID(w, 'f')
			return floorOrderOneRound(gfloors, floorHome(id, len(gfloors)), id, floor3Items(w))
		}},
	}
	for _, w := range soldOutWorkloads(ctx, c, routeNodes[0]) {
		wl[w.name] = w
	}
	return wl, nil
}
