package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestFloorGuarded holds the guarded floor (floorguard.go) to the floor's
// replies and writes on its check's entries, and each guard to its
// refusal, on a real node: a stamp of another node or epoch refuses the
// whole call before any write; a corrupt counter or a redo queue that is
// not a sorted set refuses its entry alone (-2, nothing of it written)
// while the call's other entries are taken; every call advances the
// stamp's write sequence once.
func TestFloorGuarded(t *testing.T) {
	nodes, ctx := benchNodes(t)
	n := nodes[0]
	c := n.Client()
	f := newGuardedFloorBatcher(ctx, n)
	// the floor's own check: the same replies, the same keys written
	if err := f.check(ctx); err != nil {
		t.Fatal(err)
	}
	seq := func() int64 {
		v, err := c.HGet(ctx, floorStampKey, "seq").Int64()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if got := seq(); got != 1 {
		t.Fatalf("write sequence %d after one call, want 1", got)
	}

	// a corrupt counter and a redo queue of the wrong type refuse their
	// entries alone
	for sku, v := range map[string]string{"ok": "5", "corrupt": "1e3"} {
		if err := c.HSet(ctx, floorStock(sku), "available", v, "reserved", "0").Err(); err != nil {
			t.Fatal(err)
		}
	}
	// floorRedo puts every non-numeric SKU on queue 0: the wrong type goes
	// on a numeric SKU's queue of its own (7's)
	if err := c.HSet(ctx, floorStock("7"), "available", "5", "reserved", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, floorRedo("7"), "not a sorted set", 0).Err(); err != nil {
		t.Fatal(err)
	}
	reqs := []*floorReq{
		{mode: "t", key: "floor:part:a", sku: "ok", member: "a", value: "x"},
		{mode: "t", key: "floor:part:b", sku: "corrupt", member: "b", value: "x"},
		{mode: "t", key: "floor:part:c", sku: "7", member: "c", value: "x"},
		{mode: "t", key: "floor:part:d", sku: "ok", member: "d", value: "x"},
	}
	// queue 0's offsets 1 and 2 went to the check's entries
	if got, want := f.run(ctx, t, reqs), "[3 -2 -2 4]"; got != want {
		t.Fatalf("replies %s, want %s", got, want)
	}
	for key, want := range map[string]int64{"floor:part:a": 1, "floor:part:b": 0, "floor:part:c": 0, "floor:part:d": 1} {
		if n, err := c.Exists(ctx, key).Result(); err != nil || n != want {
			t.Errorf("%s exists %d (%v), want %d", key, n, err, want)
		}
	}
	for sku, want := range map[string]string{"ok": "[3 2]", "corrupt": "[1e3 0]", "7": "[5 0]"} {
		if v, err := c.HMGet(ctx, floorStock(sku), "available", "reserved").Result(); err != nil || fmt.Sprint(v) != want {
			t.Errorf("stock %s: %v (%v), want %s", sku, v, err, want)
		}
	}
	if got := seq(); got != 2 {
		t.Fatalf("write sequence %d after two calls, want 2", got)
	}

	// a stamp of another node or epoch refuses the whole call
	for field, v := range map[string]string{"name": "n9", "epoch": "2:other"} {
		if err := f.stamp(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.HSet(ctx, floorStampKey, field, v).Err(); err != nil {
			t.Fatal(err)
		}
		req := &floorReq{mode: "t", key: "floor:part:e-" + field, sku: "ok", member: "e", value: "x"}
		if err := f.submit(req); err != nil {
			t.Fatal(err)
		}
		if err := f.wait(req); err == nil || !strings.Contains(err.Error(), "FLOOR_IDENTITY") {
			t.Errorf("stamp %s %q: %v, want FLOOR_IDENTITY", field, v, err)
		}
		if n, err := c.Exists(ctx, req.key).Result(); err != nil || n != 0 {
			t.Errorf("stamp %s %q: the entry's fence was written (%d, %v)", field, v, n, err)
		}
	}
}

// run sends reqs to f's script as one call and returns its replies.
func (f *floorBatcher) run(ctx context.Context, t *testing.T, reqs []*floorReq) string {
	t.Helper()
	keys, args := slices.Clone(f.headKeys), slices.Clone(f.headArgs)
	for _, r := range reqs {
		keys = floorEntryKeys(keys, r.mode, r.key, r.sku)
		args = append(args, r.mode, r.member, r.value)
	}
	out, err := f.script.Run(ctx, f.n.Client(), keys, args...).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(out)
}
