package main

import (
	"strings"
	"testing"
	"time"

	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

// stock load with a node DOWN loads the route's usable nodes (n3 is not
// a target), then cannot read n3 for the report: it prints the report
// (the totals marked partial, n3's row "no") and exits 1, saying the load
// was applied and naming n3 on stderr, as stock get does; --json keeps
// stdout the JSON alone. Every node read: exit 0. Before, it exited 0
// with the partial totals.
func TestReview4StockLoadUnreadFails(t *testing.T) {
	addr, nodes := startService(t, "")
	ok(t, addr, "stock", "load", "--route", "clothes", "--sku", "cap", "--qty", "9")

	nodes[2].Kill() // n3
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := okJSON(t, addr, &v1.ListNodesResponse{}, "status")
		if len(st.Nodes) == 3 && st.Nodes[2].Name == "n3" && st.Nodes[2].State == v1.NodeState_NODE_STATE_DOWN {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("n3 not DOWN after 20 s: %v", st)
		}
		time.Sleep(100 * time.Millisecond)
	}

	code, out, errOut := cli(t, "stock", "load", "--addr", addr, "--route", "clothes", "--sku", "cap", "--qty", "4")
	if code != 1 {
		t.Fatalf("stock load with n3 down: exit %d\nstdout:\n%s\nstderr:\n%s\nwant 1", code, out, errOut)
	}
	mustContain(t, out, "sku cap: available 10, reserved 0, confirmed 0, loaded 10",
		"totals are partial: 1 of 3 nodes unreachable", "\nn1    yes ", "\nn2    yes ", "\nn3    no ", "\nn3: ")
	if want := "shardis: stock load: the load was applied, but node n3 could not be read: the totals leave out its counters\n"; errOut != want {
		t.Fatalf("stock load with n3 down: stderr %q, want %q", errOut, want)
	}

	code, out, errOut = cli(t, "stock", "load", "--addr", addr, "--route", "clothes", "--sku", "cap", "--qty", "2", "--json")
	if code != 1 || !strings.Contains(errOut, "the load was applied, but node n3 could not be read") {
		t.Fatalf("stock load --json with n3 down: exit %d, stderr %q; want 1 naming n3", code, errOut)
	}
	st := decodeLine(t, out, &v1.LoadStockResponse{}).Stock
	if st.Loaded != 12 || len(st.Nodes) != 3 || st.Nodes[2].Node != "n3" || st.Nodes[2].Reachable {
		t.Fatalf("stock load --json with n3 down: %v; want the partial totals (loaded 12) and n3 unreachable", st)
	}

	// stock get says the same of n3, in its own words
	fails(t, 1, "shardis: stock get: node n3 could not be read: the totals leave out its counters",
		"stock", "get", "--addr", addr, "--route", "clothes", "--sku", "cap")
}
