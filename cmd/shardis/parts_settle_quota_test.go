package main

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

// A per-user quota part whose own record is lost while pending (deleted),
// its order then cancelled, is set aside by the service's reconciler once
// due and keeps its 2 units in the user's count of a SKU limited to 2: the
// user is refused an order of 1. `parts settle --user` with the route, SKU
// and units cancels it: the count goes, the user buys the limit again, a
// second settle is refused. --user without the three is a usage error.
// Before, `parts settle` refused a quota part's id whatever was given, and
// the user stayed refused for good.
func TestClientPartsSettleOfAQuotaPartWhoseRecordIsGone(t *testing.T) {
	addr, nodes := startService(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ok(t, addr, "stock", "load", "--route", "clothes", "--sku", "lim", "--qty", "30", "--limit", "2")
	ok(t, addr, "reserve", "--order", "lq-1", "--user", "u1", "--ttl", "1s", "clothes:lim:2")
	var node string
	for i, n := range nodes {
		cl := n.Client(t)
		if keys := cl.Keys(ctx, "inv:part:lq-1|*|q|clothes|lim").Val(); len(keys) > 0 {
			node = "n" + string(rune('1'+i))
			cl.Del(ctx, keys...)
		}
	}
	if node == "" {
		t.Fatal("no quota part of order lq-1 found")
	}
	ok(t, addr, "cancel", "lq-1")
	p := waitStuck(t, addr, "is gone")
	if !strings.Contains(p.PartId, "|q|clothes|lim") || p.Node != node {
		t.Fatalf("stuck part %v; want the quota part of lq-1 on %s", p, node)
	}
	mustContain(t, fails(t, 1, "limit", "reserve", "--addr", addr, "--order", "lq-2", "--user", "u1", "clothes:lim:1"), "limit")
	fails(t, 2, "--user goes with", "parts", "settle", "--addr", addr, "--user", "u1", node, p.PartId, "cancel")
	mustContain(t, fails(t, 1, "invalid_argument", "parts", "settle", "--addr", addr, "--route", "clothes", "--sku", "lim",
		"--qty", "2", node, p.PartId, "cancel"), "user_id")
	mustContain(t, fails(t, 1, "invalid_argument", "parts", "settle", "--addr", addr, "--route", "clothes", "--sku", "lim",
		"--qty", "2", "--user", "u2", node, p.PartId, "cancel"), "quantity 2", "u2")
	mustContain(t, ok(t, addr, "parts", "settle", "--route", "clothes", "--sku", "lim", "--qty", "2", "--user", "u1", node, p.PartId, "cancel"),
		"part "+p.PartId+" on "+node+" cancelled (its units off the user's count)")
	if left := okJSON(t, addr, &v1.ListStuckPartsResponse{}, "parts", "stuck").Parts; len(left) != 0 {
		t.Errorf("stuck parts after parts settle: %v; want none", left)
	}
	mustContain(t, fails(t, 1, "failed_precondition", "parts", "settle", "--addr", addr, "--route", "clothes", "--sku", "lim",
		"--qty", "2", "--user", "u1", node, p.PartId, "cancel"), "not set aside", "cancelled")
	ok(t, addr, "reserve", "--order", "lq-3", "--user", "u1", "clothes:lim:2")
	_, _, help := cli(t, "parts", "settle", "-h")
	mustContain(t, help, "--user U", "quota part")
}
