package bench

import (
	"math"
	"slices"
	"time"
)

// Summary is the one-line JSON object `make bench-quick` ends with. Ratios
// are medians of per-round ratios of GET+SET (router) or orders/s.
type Summary struct {
	// Plan is the plan's name (Plan.Name: "full", "quick").
	Plan string `json:"plan"`

	// RouterVsDirect is GET+SET ops/s through Router.Client over
	// hand-routed go-redis, paired per round; 0 when the router section
	// did not run.
	RouterVsDirect float64 `json:"router_vs_direct"`
	// RouterVsRing is the same over go-redis's Ring.
	RouterVsRing float64 `json:"router_vs_ring"`
	// RouterVsTwemproxy is the same over go-redis through twemproxy.
	RouterVsTwemproxy float64 `json:"router_vs_twemproxy"`
	// RouterVsDirectAP compares with hand-routed go-redis using its own
	// AutoPipeline(): the best a go-redis user could hand-write.
	RouterVsDirectAP float64 `json:"router_vs_direct_autopipelined"`
	// SingleCallerLatencyRatio is p50 latency of one goroutine with
	// auto-pipelining on / off (same build), worst of GET and 1-item reserve.
	SingleCallerLatencyRatio float64 `json:"single_caller_latency_ratio"`
	// FewCallersThroughputRatio is GET ops/s with auto-pipelining on / off
	// (same build) from 6 and from 12 goroutines, the smaller of the two.
	FewCallersThroughputRatio float64 `json:"few_callers_throughput_ratio,omitempty"`
	// SetPickVsDirect is RouterVsDirect for a held *Set (Set.Pick); 0
	// unless the plan measures it (Plan.SetPick).
	SetPickVsDirect float64 `json:"setpick_vs_direct,omitempty"`
	// RouterGetOps is the median GET ops/s through Router.Client.
	RouterGetOps float64 `json:"router_get_ops"`
	// RouterSetOps is the median SET ops/s through Router.Client.
	RouterSetOps float64 `json:"router_set_ops"`

	// RouteLookupNs is ns per Router.Client(server, route, key) lookup,
	// no I/O (testing.Benchmark, one goroutine).
	RouteLookupNs float64 `json:"route_lookup_ns"`
	// RouteLookupAllocs is heap allocations per such lookup.
	RouteLookupAllocs int64 `json:"route_lookup_allocs"`
	// SetPickNs is ns per Set.Pick(key) on a held *Set.
	SetPickNs float64 `json:"set_pick_ns"`

	// Inventory1ItemOps is the median orders/s of 1-item reserves
	// through the library.
	Inventory1ItemOps float64 `json:"inventory_1item_ops"`
	// Inventory3ItemOps is the same for 3 items on 3 nodes.
	Inventory3ItemOps float64 `json:"inventory_3item_ops"`
	// Seed3ItemOps is the seed baseline's orders/s for 3 items on 3
	// nodes (an EVAL per item).
	Seed3ItemOps float64 `json:"seed_3item_ops"`
	// Inventory3ItemVsSeed is shardis's 3-item orders/s over the seed
	// baseline's, paired per round.
	Inventory3ItemVsSeed float64 `json:"inventory_3item_vs_seed"`
	// HotSplitVsSingle is 1-item orders/s on a hot SKU whose stock is
	// split over 3 nodes over the same with its stock on 1 node, paired
	// per round.
	HotSplitVsSingle float64 `json:"hot_split3_vs_single"`
	// Reserve1ItemAllocs is this process's heap allocations per 1-item
	// Reserve, one goroutine (testing.Benchmark).
	Reserve1ItemAllocs int64 `json:"reserve_1item_allocs"`
	// Reserve3ItemAllocs is the same for a 3-item Reserve.
	Reserve3ItemAllocs int64 `json:"reserve_3item_allocs"`
	// InventoryHotVsSeed is orders/s of 1-item orders on one SKU whose
	// stock lives on one node, shardis over the seed's shape on the same
	// node, paired per round.
	InventoryHotVsSeed float64 `json:"inventory_hot_sku_vs_seed,omitempty"`
	// InventoryHotMintedVsSeed is the same with order ids minted by
	// Inventory.NewOrderID given the items (the record on the stock's
	// node), the minting inside the measured call.
	InventoryHotMintedVsSeed float64 `json:"inventory_hot_sku_minted_vs_seed,omitempty"`
	// InventoryHotFloorVsSeed is the same for the floor yardstick
	// (floor.go): the hot-SKU workload written with the least state a
	// reservation with a record per order needs, batched, the records
	// hashed over the nodes as inventory_hot_sku_vs_seed's. Not shardis:
	// a bound on what such a design reaches.
	InventoryHotFloorVsSeed float64 `json:"inventory_hot_sku_floor_vs_seed,omitempty"`
	// InventoryHotFloorLocalVsSeed is InventoryHotFloorVsSeed with every
	// record next to the stock (as the minted ids').
	InventoryHotFloorLocalVsSeed float64 `json:"inventory_hot_sku_floor_local_vs_seed,omitempty"`
	// InventoryHotFloorBucketVsSeed is InventoryHotFloorLocalVsSeed with
	// each record one field of its minute's hash instead of a key
	// (floorbucket.go): what the records' structure costs.
	InventoryHotFloorBucketVsSeed float64 `json:"inventory_hot_sku_floor_bucket_vs_seed,omitempty"`
	// InventoryHotFloorNoTTLVsSeed is InventoryHotFloorLocalVsSeed with
	// each record a key without a TTL, as shardis keeps a reserved
	// order's (floor.go: floorNoTTLScript): beside the bucketed row, what
	// the per-key TTL alone costs.
	InventoryHotFloorNoTTLVsSeed float64 `json:"inventory_hot_sku_floor_nottl_vs_seed,omitempty"`
	// Inventory3ItemFloorVsSeed is the 3-item floor yardstick's orders/s
	// over the seed's 3-item orders, paired per round (floor.go).
	Inventory3ItemFloorVsSeed float64 `json:"inventory_3item_floor_vs_seed,omitempty"`
	// GroupCommitGain3Item is the orders/s of 3-item orders with group
	// commit on over the same workload with it off (inventory.group_commit
	// 1), paired per round.
	GroupCommitGain3Item float64 `json:"group_commit_gain_3item,omitempty"`
	// GroupCommitGainHot is the same for the hot-SKU-on-one-node orders.
	GroupCommitGainHot float64 `json:"group_commit_gain_hot_sku,omitempty"`
	// ReserveRoundTrips1Item is the median sequential round trips of one
	// successful 1-item Reserve with stock on every node, counted by a
	// go-redis hook, one order at a time; 0 when not counted
	// (Plan.RoundTripOrders 0).
	ReserveRoundTrips1Item int `json:"reserve_round_trips_1item,omitempty"`
	// ReserveRoundTrips3Item is the same for 3 items: the worse of stock
	// on every node and one item on each of three one-node routes (the
	// one-round staged path).
	ReserveRoundTrips3Item int `json:"reserve_round_trips_3item,omitempty"`

	// Inventory3ItemVsFloor is shardis's 3-item orders/s over the 3-item
	// floor row's (VsFloor in floorpairs.go names the pairs), paired per
	// round; 0 when the run lacks either row.
	Inventory3ItemVsFloor float64 `json:"inventory_3item_vs_floor,omitempty"`
	// InventoryHotVsFloor is the same for the hot SKU on one node with
	// ids the caller made up, over the floor with records hashed over the
	// nodes.
	InventoryHotVsFloor float64 `json:"inventory_hot_sku_vs_floor,omitempty"`
	// InventoryHotMintedVsFloor is the same for the hot SKU with ids
	// minted by NewOrderID, over the floor with records next to the
	// stock.
	InventoryHotMintedVsFloor float64 `json:"inventory_hot_sku_minted_vs_floor,omitempty"`
	// The one-round ratios below (OneRoundFloors in floorpairs.go) are
	// paired per round, 0 when the run lacks a row; yardsticks, without
	// targets.
	//
	// Inventory3ItemFloorOneRoundVsFloor is the 3-item one-round floor
	// row over the 3-item floor row.
	Inventory3ItemFloorOneRoundVsFloor float64 `json:"inventory_3item_floor_one_round_vs_floor,omitempty"`
	// InventoryHotFloorOneRoundVsFloor is the hot-SKU one-round floor row
	// over the hot-SKU floor row.
	InventoryHotFloorOneRoundVsFloor float64 `json:"inventory_hot_sku_floor_one_round_vs_floor,omitempty"`
	// Inventory3ItemVsFloorOneRound is shardis's 3-item row over the
	// 3-item one-round floor row.
	Inventory3ItemVsFloorOneRound float64 `json:"inventory_3item_vs_floor_one_round,omitempty"`
	// InventoryHotVsFloorOneRound is shardis's hot-SKU row (ids the
	// caller made up) over the hot-SKU one-round floor row.
	InventoryHotVsFloorOneRound float64 `json:"inventory_hot_sku_vs_floor_one_round,omitempty"`
	// The guarded-floor ratios below (GuardedFloors in floorpairs.go)
	// are paired per round, 0 when the run lacks a row; yardsticks,
	// without targets.
	//
	// Inventory3ItemGuardedFloorVsFloor is the 3-item guarded floor row
	// over the 3-item floor row.
	Inventory3ItemGuardedFloorVsFloor float64 `json:"inventory_3item_guarded_floor_vs_floor,omitempty"`
	// InventoryHotGuardedFloorVsFloor is the hot-SKU guarded floor row
	// (records hashed over the nodes) over its floor row.
	InventoryHotGuardedFloorVsFloor float64 `json:"inventory_hot_sku_guarded_floor_vs_floor,omitempty"`
	// InventoryHotMintedGuardedFloorVsFloor is the hot-SKU guarded floor
	// row with records next to the stock over its floor row.
	InventoryHotMintedGuardedFloorVsFloor float64 `json:"inventory_hot_sku_minted_guarded_floor_vs_floor,omitempty"`
	// Inventory3ItemVsGuardedFloor is shardis's 3-item row over the
	// 3-item guarded floor row.
	Inventory3ItemVsGuardedFloor float64 `json:"inventory_3item_vs_guarded_floor,omitempty"`
	// InventoryHotVsGuardedFloor is shardis's hot-SKU row (ids the caller
	// made up) over the hot-SKU guarded floor row.
	InventoryHotVsGuardedFloor float64 `json:"inventory_hot_sku_vs_guarded_floor,omitempty"`
	// InventoryHotMintedVsGuardedFloor is shardis's hot-SKU row with
	// minted ids over the guarded floor row with records next to the
	// stock.
	InventoryHotMintedVsGuardedFloor float64 `json:"inventory_hot_sku_minted_vs_guarded_floor,omitempty"`

	// InventorySoldOutVsSeed is orders/s of 1-item orders with distinct
	// ids on a SKU with no stock left (every one refused), its last unit
	// reserved and confirmed (nothing reserved: a refusal writes nothing),
	// shardis over the seed's refusing EVAL on the same node, paired per
	// round.
	InventorySoldOutVsSeed float64 `json:"inventory_soldout_vs_seed,omitempty"`
	// SoldOutKeysPerRefusal is the keys such refusals left on the nodes
	// per order, the SKU's units confirmed (DBSIZE after minus before, the
	// nodes' witness hashes left out, soldout.go); nil when not measured.
	SoldOutKeysPerRefusal *float64 `json:"soldout_keys_per_refusal,omitempty"`
	// InventorySoldOutReservedVsSeed is InventorySoldOutVsSeed with the
	// SKU's last unit reserved, not confirmed, the usual state just after
	// a sell-out, where each refusal writes a failed record, its fence
	// (inventory/soldout.go). No target.
	InventorySoldOutReservedVsSeed float64 `json:"inventory_soldout_reserved_vs_seed,omitempty"`
	// SoldOutReservedKeysPerRefusal is SoldOutKeysPerRefusal in that
	// state; nil when not measured. No target.
	SoldOutReservedKeysPerRefusal *float64 `json:"soldout_reserved_keys_per_refusal,omitempty"`

	// ReserveBytesPerOrder1Item is node memory per pending 1-item order
	// (memory.go): INFO used_memory less mem_clients_normal (the
	// connections' buffers), summed over the nodes and read every memStep
	// orders over memOrders orders; the least-squares slope of that sum
	// over the orders is one run's figure, and this is the median of
	// memRounds runs, each on flushed nodes (MemoryResult.PerOrder).
	ReserveBytesPerOrder1Item float64 `json:"reserve_bytes_per_order_1item,omitempty"`

	// RPCVsLibrary is 1-item reserves/s through `shardis serve`
	// (Connect over h2c) over the library's, paired per round.
	RPCVsLibrary float64 `json:"rpc_vs_library"`
	// RPCOps is the median 1-item reserves/s through `shardis serve`.
	RPCOps float64 `json:"rpc_1item_ops"`
	// RPCServerCPUUs is the service process's CPU per 1-item Reserve
	// through `shardis serve` (µs, median over the rounds).
	RPCServerCPUUs float64 `json:"rpc_server_cpu_us_1item,omitempty"`
	// RPCClientCPUUs is the Connect client's (this process's) CPU per
	// such Reserve (µs, median over the rounds).
	RPCClientCPUUs float64 `json:"rpc_client_cpu_us_1item,omitempty"`
	// LibraryCPUUs is the library's own CPU per 1-item Reserve in the
	// same rounds (µs, the caller's process, nodes excluded), the
	// yardstick of the server's.
	LibraryCPUUs float64 `json:"library_cpu_us_1item,omitempty"`
	// RPCGRPCVsLibrary is RPCVsLibrary through the service's gRPC port
	// (service.grpc_listen) from a grpc-go client.
	RPCGRPCVsLibrary float64 `json:"rpc_grpc_vs_library,omitempty"`
	// RPCGRPCServerCPUUs is RPCServerCPUUs through the gRPC port (µs).
	RPCGRPCServerCPUUs float64 `json:"rpc_grpc_server_cpu_us_1item,omitempty"`
	// RPCFloorVsLibrary is the RPC floor's calls/s (VarRPCFloor: the same
	// call answered at once) over the library's 1-item reserves/s, paired
	// per round.
	RPCFloorVsLibrary float64 `json:"rpc_floor_vs_library,omitempty"`
	// RPCFloorServerCPUUs is the service process's CPU per RPC floor
	// call (µs).
	RPCFloorServerCPUUs float64 `json:"rpc_floor_server_cpu_us,omitempty"`
	// RPCFloorClientCPUUs is the client's (this process's) CPU per RPC
	// floor call (µs).
	RPCFloorClientCPUUs float64 `json:"rpc_floor_client_cpu_us,omitempty"`

	// SyncReserveOps is the 1-item reserves/s the inventory ran with the
	// sync running (SyncResult.ReserveOps).
	SyncReserveOps float64 `json:"sync_reserve_ops,omitempty"`
	// SyncLandedPerSec is parts landed per second while the inventory
	// reserved at full rate (window + drain).
	SyncLandedPerSec float64 `json:"sync_landed_per_s,omitempty"`
	// SyncBacklogPerSec is the rate a backlog was landed at (parts/s).
	SyncBacklogPerSec float64 `json:"sync_backlog_landed_per_s,omitempty"`
	// SyncLagP99Ms is the p99 from deduction to landing (ms).
	SyncLagP99Ms float64 `json:"sync_lag_p99_ms,omitempty"`
	// SyncKeepsUp is whether the sync drained within 1 s of the load
	// stopping with p99 lag ≤ 1 s; nil when the sync section did not run.
	SyncKeepsUp *bool `json:"sync_keeps_up,omitempty"`

	// DetectMs is the worst failover cycle's time from the SIGKILL until
	// the router marked the node DOWN (ms); 0 when the failover section
	// did not run.
	DetectMs float64 `json:"detect_ms"`
	// RecoverMs is the worst time, over the cycles with the default
	// backoff, from the restarted node accepting a TCP connection until
	// the router marked it UP (ms).
	RecoverMs float64 `json:"recover_ms"`

	// OrdersOKDuringOutage is the share of 1-item orders (stock on every
	// node, ids minted by inventory.NewOrderID) started while one of three
	// nodes was killed that succeeded; nil when the outage section did
	// not run.
	OrdersOKDuringOutage *float64 `json:"orders_ok_during_outage,omitempty"`
	// OrdersOKDuringOutageOwnIDs is the same for orders whose ids the
	// caller made up (their home is hashed from the id, so about a third
	// of them live on the dead node).
	OrdersOKDuringOutageOwnIDs *float64 `json:"orders_ok_during_outage_own_ids,omitempty"`

	// DurabilityReplicaVsNone is 1-item reserves/s with
	// inventory.durability replica over none, on one Sentinel group.
	DurabilityReplicaVsNone float64 `json:"durability_replica_vs_none,omitempty"`
	// DurabilityNoneOps is the median 1-item reserves/s with durability
	// none.
	DurabilityNoneOps float64 `json:"durability_none_ops,omitempty"`
	// DurabilityReplicaOps is the same with durability replica.
	DurabilityReplicaOps float64 `json:"durability_replica_ops,omitempty"`
	// DurabilityNoneP99Ms is the p99 latency of those reserves with
	// durability none (ms, median over the rounds).
	DurabilityNoneP99Ms float64 `json:"durability_none_p99_ms,omitempty"`
	// DurabilityReplicaP99Ms is the same with durability replica.
	DurabilityReplicaP99Ms float64 `json:"durability_replica_p99_ms,omitempty"`

	// CacheHotkeySpread is max/min of the nodes' shares of a 3-replica
	// hot key's reads.
	CacheHotkeySpread float64 `json:"cache_hotkey_spread,omitempty"`
	// CacheLoaderCallsPerMissStorm is the loader calls of 200 concurrent
	// Gets of one missing key over 3 instances, through cache.Get; nil
	// when the cache section did not run.
	CacheLoaderCallsPerMissStorm *int64 `json:"cache_loader_calls_per_miss_storm,omitempty"`
	// CacheGetOps is the median ops/s of the cache section's Zipf
	// workload through cache.Get.
	CacheGetOps float64 `json:"cache_get_ops,omitempty"`
	// CachePlainOps is the same through the router's plain client with a
	// hand-written fill.
	CachePlainOps float64 `json:"cache_plain_fill_ops,omitempty"`

	// Targets maps each target checked (e.g. "router_vs_direct>=3.0") to
	// whether it was met; a target whose section did not run is absent.
	Targets map[string]bool `json:"targets_met"`
}

// us is d in µs to one decimal.
func us(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Microsecond)*10) / 10 }

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

func ms(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Millisecond)*10) / 10 }

// Summarize computes the summary of a run. Sections that did not run are
// left at zero.
func Summarize(r *Results) Summary {
	s := Summary{Plan: r.Plan.Name, Targets: map[string]bool{}}
	if rr := r.Router; rr != nil {
		s.RouterVsDirect = round3(rr.Ratio(VarRouter, VarDirect))
		s.RouterVsRing = round3(rr.Ratio(VarRouter, VarRing))
		s.RouterVsTwemproxy = round3(rr.Ratio(VarRouter, VarTwemproxy))
		if rr.Series["GET"][VarSetPick] != nil {
			s.SetPickVsDirect = round3(rr.Ratio(VarSetPick, VarDirect))
		}
		s.RouterGetOps = math.Round(rr.Get("GET", VarRouter).Ops())
		s.RouterSetOps = math.Round(rr.Get("SET", VarRouter).Ops())
		s.RouterVsDirectAP = round3(rr.Ratio(VarRouter, VarDirectAP))
		s.Targets["router_vs_direct>=3.0"] = s.RouterVsDirect >= 3.0
		s.Targets["router_vs_ring>=3.0"] = s.RouterVsRing >= 3.0
		s.Targets["router_vs_twemproxy>=3.0"] = s.RouterVsTwemproxy >= 3.0
		s.Targets["router_vs_direct_autopipelined>=0.95"] = s.RouterVsDirectAP >= 0.95
	}
	if m := r.Memory; m != nil && m.Orders > 0 {
		s.ReserveBytesPerOrder1Item = math.Round(m.PerOrder())
		s.Targets["reserve_bytes_per_order_1item<=500"] = s.ReserveBytesPerOrder1Item <= 500
	}
	if lr := r.Latency; lr != nil {
		s.SingleCallerLatencyRatio = round3(lr.Worst())
		s.FewCallersThroughputRatio = round3(lr.FewWorst())
		s.Targets["single_caller_latency_ratio<=1.10"] = s.SingleCallerLatencyRatio <= 1.10
	}
	if len(r.Lookups) > 0 {
		s.RouteLookupNs = math.Round(r.Lookups[0].NsPerOp*10) / 10
		s.RouteLookupAllocs = r.Lookups[0].AllocsPerOp
		s.SetPickNs = math.Round(r.Lookups[1].NsPerOp*10) / 10
		s.Targets["route_lookup<250ns,0allocs"] = s.RouteLookupNs < 250 && s.RouteLookupAllocs == 0
	}
	if ir := r.Inventory; ir != nil {
		s.Inventory1ItemOps = math.Round(ir.Series[VarInv1].Ops())
		s.Inventory3ItemOps = math.Round(ir.Series[VarInv3].Ops())
		s.Seed3ItemOps = math.Round(ir.Series[VarSeed3].Ops())
		s.Inventory3ItemVsSeed = round3(PairedRatio([]*Series{ir.Series[VarInv3]}, []*Series{ir.Series[VarSeed3]}))
		s.HotSplitVsSingle = round3(PairedRatio([]*Series{ir.Series[VarHot3]}, []*Series{ir.Series[VarHot1]}))
		for _, a := range ir.Allocs {
			switch a.Name {
			case VarInv1:
				s.Reserve1ItemAllocs = a.AllocsPerOp
			case VarInv3:
				s.Reserve3ItemAllocs = a.AllocsPerOp
			}
		}
		s.Targets["inventory_3item_vs_seed>=2"] = s.Inventory3ItemVsSeed >= 2
		if h := ir.HotVsSeed(); h > 0 {
			s.InventoryHotVsSeed = round3(h)
			s.Targets["inventory_hot_sku_vs_seed>=2"] = s.InventoryHotVsSeed >= 2
		}
		if h := ir.HotMintedVsSeed(); h > 0 {
			s.InventoryHotMintedVsSeed = round3(h)
		}
		if h := ir.FloorVsSeed(); h > 0 {
			s.InventoryHotFloorVsSeed = round3(h)
		}
		if h := ir.FloorLocalVsSeed(); h > 0 {
			s.InventoryHotFloorLocalVsSeed = round3(h)
		}
		if h := ir.FloorBucketVsSeed(); h > 0 {
			s.InventoryHotFloorBucketVsSeed = round3(h)
		}
		if h := ir.FloorNoTTLVsSeed(); h > 0 {
			s.InventoryHotFloorNoTTLVsSeed = round3(h)
		}
		if h := ir.Floor3VsSeed(); h > 0 {
			s.Inventory3ItemFloorVsSeed = round3(h)
		}
		for _, f := range VsFloor {
			if h := ir.Over(f.Shardis, f.Floor); h > 0 {
				*f.Field(&s) = round3(h)
				s.Targets[f.Key+">=0.8"] = h >= 0.8
			}
		}
		for _, f := range append(slices.Clone(OneRoundFloors), GuardedFloors...) {
			over, vs := f.ratios(ir)
			if over > 0 {
				*f.OverFloor(&s) = round3(over)
			}
			if vs > 0 {
				*f.VsForm(&s) = round3(vs)
			}
		}
		if s.InventoryHotMintedVsSeed > 0 {
			s.Targets["inventory_hot_sku_minted_vs_seed>=1.5"] = s.InventoryHotMintedVsSeed >= 1.5
		}
		if h := ir.SoldOutVsSeed(); h > 0 {
			s.InventorySoldOutVsSeed = round3(h)
			s.Targets["inventory_soldout_vs_seed>=1.0"] = s.InventorySoldOutVsSeed >= 1.0
		}
		if k := ir.SoldOutKeys; k != nil {
			per := round3(k.PerRefusal())
			s.SoldOutKeysPerRefusal = &per
			s.Targets["soldout_keys_per_refusal==0"] = k.Keys == 0
		}
		s.InventorySoldOutReservedVsSeed = round3(ir.SoldOutReservedVsSeed())
		if k := ir.SoldOutReservedKeys; k != nil {
			per := round3(k.PerRefusal())
			s.SoldOutReservedKeysPerRefusal = &per
		}
		s.GroupCommitGain3Item = round3(ir.GroupGain(VarInv3))
		s.GroupCommitGainHot = round3(ir.GroupGain(VarHot1))
		if sh := ir.RoundTrips.Shape(RTShape1); sh != nil {
			s.ReserveRoundTrips1Item = sh.Median
			s.Targets["reserve_round_trips_1item==1"] = sh.Median == 1
		}
		if sh := ir.RoundTrips.Shape(RTShape3); sh != nil {
			s.ReserveRoundTrips3Item = sh.Median
			if st := ir.RoundTrips.Shape(RTShapeStaged); st != nil && st.Median > sh.Median {
				s.ReserveRoundTrips3Item = st.Median
			}
			s.Targets["reserve_round_trips_3item==1"] = s.ReserveRoundTrips3Item == 1
		}
	}
	if rp := r.RPC; rp != nil {
		s.RPCVsLibrary = round3(PairedRatio([]*Series{rp.Series[VarRPC]}, []*Series{rp.Series[VarLib]}))
		s.RPCOps = math.Round(rp.Series[VarRPC].Ops())
		s.Targets["rpc_vs_library>=0.7"] = s.RPCVsLibrary >= 0.7
		if svc := rp.Series[VarRPC].ServicePerOp(); svc > 0 {
			cl, _, _ := rp.Series[VarRPC].CPUPerOp()
			lib, _, _ := rp.Series[VarLib].CPUPerOp()
			s.RPCServerCPUUs, s.RPCClientCPUUs, s.LibraryCPUUs = us(svc), us(cl), us(lib)
			s.Targets["rpc_server_cpu_us_1item<=2x_library"] = svc <= 2*lib
		}
		if g := rp.Series[VarGRPC]; g != nil && len(g.Samples) == len(rp.Series[VarLib].Samples) {
			s.RPCGRPCVsLibrary = round3(PairedRatio([]*Series{g}, []*Series{rp.Series[VarLib]}))
			s.RPCGRPCServerCPUUs = us(g.ServicePerOp())
		}
		if f := rp.Series[VarRPCFloor]; f != nil && len(f.Samples) == len(rp.Series[VarLib].Samples) {
			s.RPCFloorVsLibrary = round3(PairedRatio([]*Series{f}, []*Series{rp.Series[VarLib]}))
			cl, _, _ := f.CPUPerOp()
			s.RPCFloorServerCPUUs, s.RPCFloorClientCPUUs = us(f.ServicePerOp()), us(cl)
		}
	}
	if sr := r.Sync; sr != nil {
		s.SyncReserveOps = math.Round(sr.ReserveOps)
		s.SyncLandedPerSec = math.Round(sr.LandedPerSec)
		s.SyncBacklogPerSec = math.Round(sr.BacklogPerSec)
		s.SyncLagP99Ms = ms(sr.LagP99)
		keeps := sr.KeepsUp
		s.SyncKeepsUp = &keeps
		s.Targets["sync_keeps_up"] = keeps
	}
	if f := r.Failover; f != nil && len(f.Cycles) > 0 {
		var detect, recover time.Duration
		for _, c := range f.Cycles {
			detect = max(detect, c.Detect)
			if c.Backoff == nil {
				recover = max(recover, c.Recover)
			}
		}
		s.DetectMs, s.RecoverMs = ms(detect), ms(recover)
		s.Targets["detect<=1s"] = detect <= time.Second
		s.Targets["recover<=2s"] = recover <= 2*time.Second
	}
	if o := r.Outage; o != nil && o.Minted.Started > 0 {
		share, own := round3(o.Share()), round3(o.Own.Share())
		s.OrdersOKDuringOutage, s.OrdersOKDuringOutageOwnIDs = &share, &own
		s.Targets["orders_ok_during_outage>=0.99"] = o.Share() >= 0.99
	}
	if d := r.Durability; d != nil {
		s.DurabilityReplicaVsNone = round3(d.Ratio())
		s.DurabilityNoneOps = math.Round(d.Series[VarDurNone].Ops())
		s.DurabilityReplicaOps = math.Round(d.Series[VarDurReplica].Ops())
		s.DurabilityNoneP99Ms = ms(d.Series[VarDurNone].P99())
		s.DurabilityReplicaP99Ms = ms(d.Series[VarDurReplica].P99())
	}
	if c := r.Cache; c != nil {
		s.CacheHotkeySpread = round3(c.HotSpread)
		n := c.StormLoads[VarCacheGet]
		s.CacheLoaderCallsPerMissStorm = &n
		s.CacheGetOps = math.Round(c.Series[VarCacheGet].Ops())
		s.CachePlainOps = math.Round(c.Series[VarCachePlain].Ops())
	}
	return s
}
