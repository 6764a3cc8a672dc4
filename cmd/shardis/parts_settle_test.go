package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

// A part set aside over a corrupt counter whose order's record then goes
// (lived out its retention: the key deleted, as its expiry does) is set
// aside again by the service's reconciler once retried, its decision
// cannot be inferred. `parts settle` is the operator's decision for it:
// refused while the order's record exists (parts retry then), for an
// unknown node and for a bad action; then it confirms the part (its units
// sold, the stuck list empty), and a second settle is refused, the part no
// longer set aside.
func TestClientPartsSettle(t *testing.T) {
	addr, nodes := startService(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ok(t, addr, "stock", "load", "--route", "clothes", "--sku", "gone", "--qty", "30")
	res := okJSON(t, addr, &v1.ReserveResponse{}, "reserve", "--order", "g-1", "--ttl", "1s", "clothes:gone:2")
	rc := res.Receipts[0]
	i, _ := strconv.Atoi(strings.TrimPrefix(rc.Node, "n"))
	cl := nodes[i-1].Client(t)
	key := "inv:stock:clothes:gone"
	good := cl.HGet(ctx, key, "reserved").Val()
	cl.HSet(ctx, key, "reserved", "x")
	p := waitStuck(t, addr, "inv:stock:clothes:gone reserved")

	// its order's record exists (the reservation expired: cancelled): the
	// record decides, not an operator
	fails(t, 1, "failed_precondition", "parts", "settle", "--addr", addr, rc.Node, p.PartId, "cancel")
	mustContain(t, fails(t, 1, "parts retry", "parts", "settle", "--addr", addr, rc.Node, p.PartId, "cancel"), "exists")

	var gone int64
	for _, n := range nodes {
		gone += n.Client(t).Del(ctx, "inv:order:g-1").Val()
	}
	if gone != 1 {
		t.Fatalf("deleted %d records of order g-1, want its one", gone)
	}
	cl.HSet(ctx, key, "reserved", good)
	mustContain(t, ok(t, addr, "parts", "retry", rc.Node, p.PartId), "pending again")
	p = waitStuck(t, addr, "cannot be inferred")
	mustContain(t, p.Reason, "shardis parts settle "+rc.Node)

	fails(t, 2, `ACTION "abort": want confirm or cancel`, "parts", "settle", "--addr", addr, rc.Node, p.PartId, "abort")
	fails(t, 2, "wrong number of arguments", "parts", "settle", "--addr", addr, rc.Node, p.PartId)
	fails(t, 1, "invalid_argument", "parts", "settle", "--addr", addr, "n9", p.PartId, "confirm")
	mustContain(t, ok(t, addr, "parts", "settle", rc.Node, p.PartId, "confirm"), "part "+p.PartId+" on "+rc.Node+" confirmed")
	st := okJSON(t, addr, &v1.GetStockResponse{}, "stock", "get", "--route", "clothes", "--sku", "gone")
	if st.Stock.Reserved != 0 || st.Stock.Confirmed != 2 || st.Stock.Available != 28 {
		t.Errorf("stock after parts settle confirm: %v; want 2 confirmed, 28 available", st.Stock)
	}
	if left := okJSON(t, addr, &v1.ListStuckPartsResponse{}, "parts", "stuck").Parts; len(left) != 0 {
		t.Errorf("stuck parts after parts settle: %v; want none", left)
	}
	mustContain(t, fails(t, 1, "failed_precondition", "parts", "settle", "--addr", addr, rc.Node, p.PartId, "cancel"),
		"not set aside", "confirmed")
	st = okJSON(t, addr, &v1.GetStockResponse{}, "stock", "get", "--route", "clothes", "--sku", "gone")
	if st.Stock.Confirmed != 2 || st.Stock.Available != 28 {
		t.Errorf("stock after a refused second settle: %v; want it unchanged", st.Stock)
	}

	_, _, help := cli(t, "parts", "settle", "-h")
	mustContain(t, help, "NODE PART_ID confirm|cancel", "system of record")
	_, _, groupHelp := cli(t, "parts", "-h")
	mustContain(t, groupHelp, "parts settle")
}

// waitStuck waits up to 20s for the one stuck part whose reason says
// reason, and returns it.
func waitStuck(t *testing.T, addr, reason string) *v1.StuckPart {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		stuck := okJSON(t, addr, &v1.ListStuckPartsResponse{}, "parts", "stuck").Parts
		if len(stuck) == 1 && strings.Contains(stuck[0].Reason, reason) {
			return stuck[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("stuck parts %v 20s on; want one set aside for %q", stuck, reason)
		}
	}
}

// A part whose own record is lost while pending (deleted, with its
// order's record, which holds a one-node order's part inline) is set
// aside by the service's reconciler once due; `parts settle` alone
// refuses it (nothing names its units), --route/--sku/--qty must come
// together, and with the three it settles the part by them: its units
// sold, the stuck list empty, a second settle refused.
func TestClientPartsSettleOfAPartWhoseRecordIsGone(t *testing.T) {
	addr, nodes := startService(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ok(t, addr, "stock", "load", "--route", "clothes", "--sku", "lost", "--qty", "30")
	res := okJSON(t, addr, &v1.ReserveResponse{}, "reserve", "--order", "l-1", "--ttl", "1s", "clothes:lost:2")
	rc := res.Receipts[0]
	var gone int64
	for _, n := range nodes {
		cl := n.Client(t)
		keys := append(cl.Keys(ctx, "inv:part:l-1|*").Val(), "inv:order:l-1")
		gone += cl.Del(ctx, keys...).Val()
	}
	if gone == 0 {
		t.Fatal("no record of order l-1 or its part deleted")
	}
	p := waitStuck(t, addr, "is gone")
	mustContain(t, fails(t, 1, "failed_precondition", "parts", "settle", "--addr", addr, rc.Node, p.PartId, "confirm"), "is gone")
	fails(t, 2, "go together", "parts", "settle", "--addr", addr, "--route", "clothes", "--sku", "lost", rc.Node, p.PartId, "confirm")
	mustContain(t, fails(t, 1, "invalid_argument", "parts", "settle", "--addr", addr, "--route", "clothes", "--sku", "lost",
		"--qty", "3", rc.Node, p.PartId, "confirm"), "quantity 3")
	mustContain(t, ok(t, addr, "parts", "settle", "--route", "clothes", "--sku", "lost", "--qty", "2", rc.Node, p.PartId, "confirm"),
		"part "+p.PartId+" on "+rc.Node+" confirmed")
	st := okJSON(t, addr, &v1.GetStockResponse{}, "stock", "get", "--route", "clothes", "--sku", "lost")
	if st.Stock.Reserved != 0 || st.Stock.Confirmed != 2 || st.Stock.Available != 28 {
		t.Errorf("stock after parts settle confirm: %v; want 2 confirmed, 28 available", st.Stock)
	}
	if left := okJSON(t, addr, &v1.ListStuckPartsResponse{}, "parts", "stuck").Parts; len(left) != 0 {
		t.Errorf("stuck parts after parts settle: %v; want none", left)
	}
	mustContain(t, fails(t, 1, "failed_precondition", "parts", "settle", "--addr", addr, "--route", "clothes", "--sku", "lost",
		"--qty", "2", rc.Node, p.PartId, "cancel"), "not set aside", "confirmed")
	_, _, help := cli(t, "parts", "settle", "-h")
	mustContain(t, help, "--route R --sku S --qty N", "own record is gone")
}
