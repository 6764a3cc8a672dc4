package main

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"github.com/shardis/shardis/internal/redistest"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

// `shardis status` of an instance whose configuration adds a node for a
// new route says what is pending; the instance at the applied topology
// says it is ready, nothing more.
func TestStatusShowsPendingTopology(t *testing.T) {
	t.Setenv(tokenEnv, "")
	nodes := redistest.StartN(t, 3, redistest.Options{})
	applied := startWith(t, nodes, map[string][]string{"clothes": {"n1", "n2"}}, "")
	deployed := startWith(t, nodes, map[string][]string{"clothes": {"n1", "n2"}, "x": {"n3"}}, "")
	want := "SERVICE: ready; pending topology change: config epoch differs: +n3 (route x)"
	if out := ok(t, deployed, "status"); !strings.Contains(out, want) {
		t.Fatalf("status of the deployed instance:\n%s\nwant a line %q", out, want)
	}
	if out := ok(t, applied, "status"); !strings.Contains(out, "SERVICE: ready\n") {
		t.Fatalf("status of the instance at the applied topology:\n%s\nwant SERVICE: ready", out)
	}
}

// `shardis status` shows each node's persistence settings, redo backlog
// and stuck parts, and the service's readiness, topology epoch and
// deferred parts.
func TestStatusShowsOperations(t *testing.T) {
	addr, _ := startService(t, "")
	ok(t, addr, "stock", "load", "--route", "clothes", "--sku", "tee", "--qty", "9")
	res := okJSON(t, addr, &v1.ReserveResponse{}, "reserve", "--order", "o1", "clothes:tee:1")
	out := ok(t, addr, "status")
	mustContain(t, out, "PERSISTENCE", "REDO_BACKLOG", "STUCK", "aof=", "fsync=", "maxmemory=",
		"SERVICE: ready\n", "TOPOLOGY: epoch 1\n", "DEFERRED PARTS: 0 ")
	// The reserved node's row shows a backlog (the reserve's entry, not
	// acknowledged).
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == res.Receipts[0].Node {
			if len(f) < 10 || f[len(f)-3] == "0" || f[len(f)-3] == "-" || f[len(f)-2] != "0" {
				t.Fatalf("row of %s: %q; want a redo backlog > 0 and 0 stuck\n%s", f[0], line, out)
			}
			return
		}
	}
	t.Fatalf("no row for %s:\n%s", res.Receipts[0].Node, out)
}

// `shardis status --json` prints the node list alone (ListNodes'
// response, one JSON line) and exits 1, as the table does, when the
// service's /metrics cannot be read; with everything readable, 0. Before,
// --json returned before reading /readyz and /metrics and always exited
// 0: a script took an incomplete report for a complete one.
func TestStatusJSONExitsOneWhenMetricsUnreadable(t *testing.T) {
	addr, _ := startService(t, "")
	target, err := url.Parse("http://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			http.Error(w, "broken", http.StatusInternalServerError)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()
	code, out, errOut := cli(t, "status", "--json", "--addr", front.URL)
	nodes := decodeLine(t, out, &v1.ListNodesResponse{})
	if code != 1 || len(nodes.Nodes) != 3 || !strings.Contains(errOut, "/metrics") {
		t.Fatalf("status --json with /metrics failing: exit %d, %d nodes, stderr %q; want exit 1 naming /metrics after the node list", code, len(nodes.Nodes), errOut)
	}
	if code, out, errOut := cli(t, "status", "--json", "--addr", addr); code != 0 || len(decodeLine(t, out, &v1.ListNodesResponse{}).Nodes) != 3 {
		t.Fatalf("status --json: exit %d, stderr %q", code, errOut)
	}
}
