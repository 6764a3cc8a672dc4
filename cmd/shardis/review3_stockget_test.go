package main

import (
	"strings"
	"testing"

	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

// stock get with a node that cannot be read prints what it read (the
// totals, marked partial, and every node's row, the unreachable one
// marked "no") and exits 1, naming the node on stderr and saying the
// totals leave it out, as the other reports do (parts stuck, parts
// retry, status, topology show, sync status); --json keeps stdout the
// JSON alone. Every node read: exit 0. Before, it exited 0 with the
// partial totals.
func TestReview3StockGetUnreachableFails(t *testing.T) {
	addr, nodes := startService(t, "")
	ok(t, addr, "stock", "load", "--route", "clothes", "--sku", "cap", "--qty", "9")
	if code, out, errOut := cli(t, "stock", "get", "--addr", addr, "--route", "clothes", "--sku", "cap"); code != 0 || errOut != "" {
		t.Fatalf("stock get, every node up: exit %d\nstdout:\n%s\nstderr:\n%s\nwant 0, nothing on stderr", code, out, errOut)
	}

	nodes[2].Kill() // n3
	code, out, errOut := cli(t, "stock", "get", "--addr", addr, "--route", "clothes", "--sku", "cap")
	if code != 1 {
		t.Fatalf("stock get with n3 down: exit %d\nstdout:\n%s\nstderr:\n%s\nwant 1", code, out, errOut)
	}
	mustContain(t, out, "sku cap: available 6, reserved 0, confirmed 0, loaded 6",
		"totals are partial: 1 of 3 nodes unreachable", "\nn1    yes ", "\nn2    yes ", "\nn3    no ", "\nn3: ")
	if want := "shardis: stock get: node n3 could not be read: the totals leave out its counters\n"; errOut != want {
		t.Fatalf("stock get with n3 down: stderr %q, want %q", errOut, want)
	}

	code, out, errOut = cli(t, "stock", "get", "--addr", addr, "--route", "clothes", "--sku", "cap", "--json")
	if code != 1 || !strings.Contains(errOut, "node n3 could not be read") {
		t.Fatalf("stock get --json with n3 down: exit %d, stderr %q; want 1 naming n3", code, errOut)
	}
	st := decodeLine(t, out, &v1.GetStockResponse{}).Stock
	if st.Available != 6 || len(st.Nodes) != 3 || st.Nodes[2].Node != "n3" || st.Nodes[2].Reachable {
		t.Fatalf("stock get --json with n3 down: %v; want the partial totals and n3 unreachable", st)
	}

	nodes[1].Kill() // n2 too
	code, out, errOut = cli(t, "stock", "get", "--addr", addr, "--route", "clothes", "--sku", "cap")
	if code != 1 || !strings.Contains(out, "totals are partial: 2 of 3 nodes unreachable") ||
		!strings.Contains(errOut, "nodes n2, n3 could not be read: the totals leave out their counters") {
		t.Fatalf("stock get with n2 and n3 down: exit %d\nstdout:\n%s\nstderr:\n%s\nwant 1 naming n2 and n3", code, out, errOut)
	}
}
