package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

// `parts retry --all` and `--sku` with a node that cannot be read do only
// part of their job (that node's stuck parts are neither listed nor
// retried): they print what they did, then exit 1 naming the node. With
// --json stdout stays the one JSON object. Before, they exited 0.
func TestReview2PartsRetryUnreachableFails(t *testing.T) {
	addr, nodes := startService(t, "")
	nodes[2].Kill() // n3
	for _, args := range [][]string{
		{"parts", "retry", "--all"},
		{"parts", "retry", "--sku", "tee"},
	} {
		code, out, errOut := cli(t, withFlags(args, "--addr", addr)...)
		if code != 1 || !strings.Contains(out, "pending again") || !strings.Contains(out, "unreachable: n3") ||
			!strings.Contains(errOut, "node n3 not reached") {
			t.Errorf("shardis %s with n3 down: exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit 1, what was done on stdout, n3 named on stderr",
				strings.Join(args, " "), code, out, errOut)
		}
	}
	code, out, errOut := cli(t, "parts", "retry", "--all", "--json", "--addr", addr)
	if code != 1 || !strings.Contains(errOut, "node n3 not reached") {
		t.Fatalf("parts retry --all --json with n3 down: exit %d, stderr %q; want 1 naming n3", code, errOut)
	}
	if res := decodeLine(t, out, &v1.ListStuckPartsResponse{}); len(res.Unreachable) != 1 || !strings.HasPrefix(res.Unreachable[0], "n3: ") {
		t.Fatalf("parts retry --all --json: unreachable %v; want n3", res.Unreachable)
	}
}

// A node with more stuck parts than one `parts retry --all` lists (10000;
// here 1) had only its oldest retried: the command says "run this again",
// and exits 1 (the rest are still stuck). Before, it exited 0.
func TestReview2PartsRetryTruncatedFails(t *testing.T) {
	addr, nodes := startService(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ok(t, addr, "stock", "load", "--route", "clothes", "--sku", "tr", "--qty", "30")
	res := okJSON(t, addr, &v1.ReserveResponse{}, "reserve", "--order", "tr-1", "--ttl", "1s", "clothes:tr:1")
	node := res.Receipts[0].Node
	i, _ := strconv.Atoi(strings.TrimPrefix(node, "n"))
	cl := nodes[i-1].Client(t)
	key := "inv:stock:clothes:tr"
	reserved := cl.HGet(ctx, key, "reserved").Val()
	cl.HSet(ctx, key, "reserved", "x")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if len(okJSON(t, addr, &v1.ListStuckPartsResponse{}, "parts", "stuck").Parts) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the part over a corrupt counter not listed stuck within 20s")
		}
	}
	cl.HSet(ctx, key, "reserved", reserved)
	old := retryStuckLimit
	retryStuckLimit = 1
	t.Cleanup(func() { retryStuckLimit = old })
	code, out, errOut := cli(t, "parts", "retry", "--all", "--addr", addr)
	if code != 1 || !strings.Contains(out, "1 stuck part(s) pending again") || !strings.Contains(out, "run this again") ||
		!strings.Contains(errOut, node) || !strings.Contains(errOut, "run this again") {
		t.Fatalf("parts retry --all over a node at the limit: exit %d\nstdout:\n%s\nstderr:\n%s\nwant 1 naming %s", code, out, errOut, node)
	}
}
