package main

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

// A part whose SKU counter is corrupt is set aside by the service's
// reconciler: `parts stuck` lists it with the reason, `parts retry` puts
// it back once repaired, and it settles. `redo-log ack` records progress
// and refuses an offset past the queue's head.
func TestClientPartsAndRedoAck(t *testing.T) {
	addr, nodes := startService(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ok(t, addr, "stock", "load", "--route", "clothes", "--sku", "cap", "--qty", "30")
	res := okJSON(t, addr, &v1.ReserveResponse{}, "reserve", "--order", "p-1", "--ttl", "1s", "clothes:cap:1")
	rc := res.Receipts[0]
	var bad int
	for i := range nodes {
		if "n"+strconv.Itoa(i+1) == rc.Node {
			bad = i
		}
	}
	cl := nodes[bad].Client(t)
	cl.HSet(ctx, "inv:stock:clothes:cap", "reserved", "x")

	var stuck *v1.ListStuckPartsResponse
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		stuck = okJSON(t, addr, &v1.ListStuckPartsResponse{}, "parts", "stuck")
		if len(stuck.Parts) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no stuck part listed 20s after a 1s reservation over a corrupt counter")
		}
	}
	p := stuck.Parts[0]
	if len(stuck.Parts) != 1 || p.Node != rc.Node || p.OrderId != "p-1" || p.SkuId != "cap" || p.Quantity != 1 ||
		!strings.Contains(p.Reason, "inv:stock:clothes:cap reserved") {
		t.Fatalf("stuck parts %v: want p-1's part on %s with the corrupt counter as reason", stuck.Parts, rc.Node)
	}
	mustContain(t, ok(t, addr, "parts", "stuck", "--node", rc.Node), p.PartId, "not an integer")
	mustContain(t, metricsText(t, addr),
		`shardis_stuck_parts{node="`+rc.Node+`"} 1`,
		`shardis_reconciler_parts_total{action="set_aside"} 1`,
		`shardis_redo_unacked_entries{node="`+rc.Node+`"} 1`)

	// A part whose own record cannot be read is listed all the same, with
	// what is wrong with it (state "unknown").
	rec, err := cl.Get(ctx, "inv:part:"+p.PartId).Result()
	if err != nil {
		t.Fatalf("the stuck part's packed record: %v", err)
	}
	cl.Set(ctx, "inv:part:"+p.PartId, strings.Repeat("\x1f", 40), redis.KeepTTL)
	if got := okJSON(t, addr, &v1.ListStuckPartsResponse{}, "parts", "stuck").Parts; len(got) != 1 || got[0].State != "unknown" ||
		!strings.Contains(got[0].Problem, "inv:part:"+p.PartId) {
		t.Fatalf("stuck parts over a corrupt part record: %v; want the part, state unknown, a problem naming its record", got)
	}
	mustContain(t, ok(t, addr, "parts", "stuck"), "unreadable record of "+p.PartId)
	cl.Set(ctx, "inv:part:"+p.PartId, rec, redis.KeepTTL)

	cl.HSet(ctx, "inv:stock:clothes:cap", "reserved", "1")
	mustContain(t, ok(t, addr, "parts", "retry", rc.Node, p.PartId), "pending again")
	mustContain(t, ok(t, addr, "parts", "retry", rc.Node, p.PartId), "not stuck")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		st := okJSON(t, addr, &v1.GetStockResponse{}, "stock", "get", "--route", "clothes", "--sku", "cap")
		left := okJSON(t, addr, &v1.ListStuckPartsResponse{}, "parts", "stuck")
		if st.Stock.Reserved == 0 && st.Stock.Available == 30 && len(left.Parts) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after repair and retry: stock %v, stuck %v", st.Stock, left.Parts)
		}
	}

	off := strconv.FormatInt(rc.Offset, 10)
	ack := okJSON(t, addr, &v1.AckRedoLogResponse{}, "redo-log", "ack", "--node", rc.Node, "--queue", rc.RedoLog, off)
	if ack.AckedOffset != rc.Offset {
		t.Fatalf("redo-log ack %s: acked %d", off, ack.AckedOffset)
	}
	past := strconv.FormatInt(rc.Offset+1000, 10)
	mustContain(t, metricsText(t, addr), `shardis_redo_unacked_entries{node="`+rc.Node+`"} 0`)
	fails(t, 1, "past the head", "redo-log", "ack", "--addr", addr, "--node", rc.Node, "--queue", rc.RedoLog, past)
	fails(t, 2, "OFFSET", "redo-log", "ack", "--addr", addr, "--node", rc.Node, "--queue", rc.RedoLog, "x")
	fails(t, 2, "stuck or retry", "parts")

	// Every node shows its own per-user limit.
	ok(t, addr, "stock", "load", "--route", "clothes", "--sku", "lim", "--qty", "3", "--limit", "2")
	for _, ns := range okJSON(t, addr, &v1.GetStockResponse{}, "stock", "get", "--route", "clothes", "--sku", "lim").Stock.Nodes {
		if ns.PerUserLimit != 2 {
			t.Errorf("node %s per-user limit %d, want 2", ns.Node, ns.PerUserLimit)
		}
	}
}

// metricsText returns the service's /metrics page.
func metricsText(t *testing.T, addr string) string {
	t.Helper()
	base, err := baseURL(addr)
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d %v", res.StatusCode, err)
	}
	return string(b)
}

// `node accept` brings back a node that restarted empty: the status shows
// it refused with the command to run, accept gives it a new incarnation,
// and it serves again.
func TestClientNodeAccept(t *testing.T) {
	addr, nodes := startService(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ok(t, addr, "stock", "load", "--route", "clothes", "--sku", "acc", "--qty", "30")
	ok(t, addr, "reserve", "--order", "acc-1", "clothes:acc:1")
	// Wait until a peer witnessed n1, then wipe it and restart it empty.
	peer := nodes[1].Client(t)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if v, _ := peer.HGet(ctx, "shardis:witness", "n1").Result(); v != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("n1 never witnessed on n2")
		}
	}
	nodes[0].Kill()
	nodes[0].Restart() // no AOF: empty
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		out := ok(t, addr, "status")
		if strings.Contains(out, "node lost its data") && strings.Contains(out, "shardis node accept n1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never showed n1 refused for lost data:\n%s", out)
		}
	}
	mustContain(t, ok(t, addr, "node", "accept", "n1"), "node n1 accepted", "incarnation")
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if st := okJSON(t, addr, &v1.ListNodesResponse{}, "status"); st.Nodes[0].State == v1.NodeState_NODE_STATE_UP {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("n1 not UP after accept")
		}
	}
	fails(t, 1, "invalid_argument", "node", "accept", "--addr", addr, "n9")
	fails(t, 2, "accept", "node")
	// n1 is UP again: accepting it once more would start a new incarnation
	// for nothing, so it takes --force.
	fails(t, 1, "failed_precondition", "node", "accept", "--addr", addr, "n1")
	mustContain(t, ok(t, addr, "node", "accept", "n1", "--force"), "node n1 accepted")
}

// `parts retry --sku` retries every stuck part of one SKU and `--all` the
// rest, without naming each part; -h lists the forms (safety issue B9).
func TestClientPartsRetryAllAndSKU(t *testing.T) {
	addr, nodes := startService(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	corrupt := map[string]string{} // "node sku" → the reserved count it had
	for _, sku := range []string{"ra", "rb"} {
		ok(t, addr, "stock", "load", "--route", "clothes", "--sku", sku, "--qty", "30")
		res := okJSON(t, addr, &v1.ReserveResponse{}, "reserve", "--order", "pr-"+sku, "--ttl", "1s", "clothes:"+sku+":1")
		i, _ := strconv.Atoi(strings.TrimPrefix(res.Receipts[0].Node, "n"))
		cl := nodes[i-1].Client(t)
		key := "inv:stock:clothes:" + sku
		corrupt[res.Receipts[0].Node+" "+sku] = cl.HGet(ctx, key, "reserved").Val()
		cl.HSet(ctx, key, "reserved", "x")
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if len(okJSON(t, addr, &v1.ListStuckPartsResponse{}, "parts", "stuck").Parts) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("two parts over corrupt counters not listed stuck within 20s")
		}
	}
	for ns, reserved := range corrupt {
		name, sku, _ := strings.Cut(ns, " ")
		i, _ := strconv.Atoi(strings.TrimPrefix(name, "n"))
		nodes[i-1].Client(t).HSet(ctx, "inv:stock:clothes:"+sku, "reserved", reserved)
	}
	got := okJSON(t, addr, &v1.ListStuckPartsResponse{}, "parts", "retry", "--sku", "ra")
	if len(got.Parts) != 1 || got.Parts[0].SkuId != "ra" {
		t.Fatalf("parts retry --sku ra retried %v; want ra's one part", got.Parts)
	}
	mustContain(t, ok(t, addr, "parts", "retry", "--all"), "pending again, due now")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		a := okJSON(t, addr, &v1.GetStockResponse{}, "stock", "get", "--route", "clothes", "--sku", "ra")
		b := okJSON(t, addr, &v1.GetStockResponse{}, "stock", "get", "--route", "clothes", "--sku", "rb")
		if a.Stock.Reserved == 0 && b.Stock.Reserved == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after repair and retry: ra %v, rb %v", a.Stock, b.Stock)
		}
	}
	mustContain(t, ok(t, addr, "parts", "retry", "--all"), "0 stuck part(s) pending again")

	_, _, help := cli(t, "parts", "retry", "-h")
	mustContain(t, help, "NODE PART_ID | --all | --sku SKU", "-all", "-sku", "-node")
	fails(t, 2, "exclude each other", "parts", "retry", "--addr", addr, "--all", "--sku", "x")
	fails(t, 2, "want NODE PART_ID, --all or --sku", "parts", "retry", "--addr", addr)
	fails(t, 2, "not both", "parts", "retry", "--addr", addr, "--all", "n1", "p")
}
