package bench

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/node"
)

// TestSoldOutSummaryKeys: the sold-out keys reach `make bench-quick`'s
// JSON line (a refusal ratio of the paired rounds, and 0 keys per refusal
// printed, not omitted) and the targets, in both states: the units
// confirmed (the targets') and the last unit reserved (its own keys,
// without targets).
func TestSoldOutSummaryKeys(t *testing.T) {
	ir := &InvResult{Series: map[string]*Series{}, SoldOutKeys: &SoldOutKeys{Refused: 2000},
		SoldOutReservedKeys: &SoldOutKeys{Refused: 2000, Keys: 2000}}
	ops := map[string]int64{VarSoldOut: 3000, VarSeedSoldOut: 2000, VarSoldOutReserved: 1000}
	for _, v := range []string{VarInv1, VarInv3, VarSeed3, VarHot3, VarHot1, VarHot1Minted, VarSeedHot1, VarInv3Alone, VarHot1Alone,
		VarHotFloor, VarHotFloorLocal, VarFloor3, VarHotFloorOneRound, VarFloor3OneRound, VarSoldOut, VarSeedSoldOut, VarSoldOutReserved} {
		n := ops[v]
		if n == 0 {
			n = 1000
		}
		ir.Series[v] = &Series{Name: v, Samples: []Sample{{Ops: n, Elapsed: time.Second}}}
	}
	s := Summarize(&Results{Inventory: ir})
	line, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"inventory_soldout_vs_seed":1.5`, `"soldout_keys_per_refusal":0`,
		`"inventory_soldout_reserved_vs_seed":0.5`, `"soldout_reserved_keys_per_refusal":1`} {
		if !strings.Contains(string(line), want) {
			t.Errorf("summary %s lacks %s", line, want)
		}
	}
	if !s.Targets["inventory_soldout_vs_seed>=1.0"] || !s.Targets["soldout_keys_per_refusal==0"] {
		t.Errorf("targets %v", s.Targets)
	}
	for key := range s.Targets {
		if strings.Contains(key, "reserved") {
			t.Errorf("target %s: the reserved state's figures have none", key)
		}
	}
	ir.SoldOutKeys.Keys = 3
	if s := Summarize(&Results{Inventory: ir}); s.Targets["soldout_keys_per_refusal==0"] || *s.SoldOutKeysPerRefusal != 0.002 {
		t.Errorf("3 keys after 2000 refusals: %v per refusal, target met %v", *s.SoldOutKeysPerRefusal, s.Targets["soldout_keys_per_refusal==0"])
	}
	table := InventoryTable(ir)
	for _, want := range []string{"its units confirmed (nothing reserved)", "its last unit reserved, not confirmed"} {
		if !strings.Contains(table, want) {
			t.Errorf("the inventory section does not say %q:\n%s", want, table)
		}
	}
}

// TestSoldOutKeysBothStates measures, on real nodes through the library,
// the keys refused orders of a sold-out SKU leave in its two states: none
// with its unit confirmed, a fence (a failed record on the order's home)
// per refusal with the unit still reserved, as inventory/soldout.go says.
// The benchmark measured only the first state.
func TestSoldOutKeysBothStates(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := startCluster(ctx, false, false, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	set, err := c.Router.Set(invServer, singleRoutes[0])
	if err != nil {
		t.Fatal(err)
	}
	wl := map[string]invWorkload{}
	for _, w := range soldOutWorkloads(ctx, c, set.Nodes()) {
		wl[w.name] = w
	}
	confirmed, err := measureSoldOutKeys(ctx, c, wl[VarSoldOut], 8)
	if err != nil {
		t.Fatal(err)
	}
	if confirmed.Keys != 0 {
		t.Errorf("units confirmed: %d refusals left %d keys (%v), want 0", confirmed.Refused, confirmed.Keys, confirmed.New)
	}
	reserved, err := measureSoldOutKeys(ctx, c, wl[VarSoldOutReserved], 8)
	if err != nil {
		t.Fatal(err)
	}
	if reserved.Keys != reserved.Refused {
		t.Errorf("last unit reserved: %d refusals left %d keys (%v), want one fence each", reserved.Refused, reserved.Keys, reserved.New)
	}
	for _, k := range reserved.New {
		if !strings.Contains(k, "order") {
			t.Errorf("last unit reserved: a refusal left %s, want only order records", k)
		}
	}
}

// TestKeyCountLeavesWitnessesOut: on real nodes, the sold-out measure
// counts every key but a node's witness hash, and names none of those.
func TestKeyCountLeavesWitnessesOut(t *testing.T) {
	nodes, ctx := benchNodes(t)
	for _, n := range nodes { // so that the HSets below make the hashes
		if err := n.Client().Del(ctx, node.WitnessKey).Err(); err != nil {
			t.Fatal(err)
		}
	}
	before, err := keyCount(ctx, nodes)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if err := n.Client().HSet(ctx, node.WitnessKey, "peer", "1:1:1").Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := nodes[0].Client().Set(ctx, "inv:order:o1", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := nodes[1].Client().Set(ctx, "inv:order:o2", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	after, err := keyCount(ctx, nodes)
	if err != nil || after-before != 2 {
		t.Fatalf("keyCount went from %d to %d (%v); want 2 more (two order keys, the witness hashes left out)", before, after, err)
	}
	names, err := keyNames(ctx, nodes)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if names[n.Name()+" "+node.WitnessKey] {
			t.Errorf("keyNames names %s's witness hash", n.Name())
		}
	}
	if !names[nodes[0].Name()+" inv:order:o1"] || !names[nodes[1].Name()+" inv:order:o2"] {
		t.Errorf("keyNames = %v, want both order keys", names)
	}
}

// TestSeedSoldOutCountsOnlyShort: the seed's sold-out row counts its
// script's own "short" answer as a refusal (the operation's success), and
// an EVAL that failed (a node's metadata of the wrong type, so the
// script's HGET errs) as a failure: it was taken for "try the next node",
// then for insufficient stock, and counted as a refusal.
func TestSeedSoldOutCountsOnlyShort(t *testing.T) {
	nodes, ctx := benchNodes(t)
	var wl invWorkload
	for _, w := range soldOutWorkloads(ctx, nil, nodes[:1]) {
		if w.name == VarSeedSoldOut {
			wl = w
		}
	}
	if err := wl.setup(ctx); err != nil {
		t.Fatal(err)
	}
	w := NewLoad(1, 1).workers[0]
	if err := wl.op(w); err != nil {
		t.Fatalf("a refused seed order: %v, want it counted as a refusal", err)
	}
	c := nodes[0].Client()
	if err := c.Del(ctx, "metadata").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "metadata", "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	err := wl.op(w)
	if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("a seed order whose EVAL failed: %v, want a failure naming the EVAL's error", err)
	}
}
