package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/pgsync"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

// The read-only reports exit 1, after printing what they could read, when
// a node (or a page of the service) they report on could not be read, as
// functions show does; --json keeps stdout the JSON alone. Before, parts
// stuck, sync status, topology show and status exited 0.

// parts stuck over every node with one down: the list is partial.
func TestReview2PartsStuckUnreachableFails(t *testing.T) {
	addr, nodes := startService(t, "")
	nodes[2].Kill() // n3
	code, out, errOut := cli(t, "parts", "stuck", "--addr", addr)
	if code != 1 || !strings.Contains(out, "no stuck parts") || !strings.Contains(out, "unreachable: n3") ||
		!strings.Contains(errOut, "node n3 not read") {
		t.Fatalf("parts stuck with n3 down: exit %d\nstdout:\n%s\nstderr:\n%s\nwant 1, the list printed, n3 named", code, out, errOut)
	}
	code, out, errOut = cli(t, "parts", "stuck", "--addr", addr, "--json")
	if code != 1 || !strings.Contains(errOut, "node n3 not read") {
		t.Fatalf("parts stuck --json with n3 down: exit %d, stderr %q; want 1 naming n3", code, errOut)
	}
	if res := decodeLine(t, out, &v1.ListStuckPartsResponse{}); len(res.Unreachable) != 1 {
		t.Fatalf("parts stuck --json: unreachable %v; want n3", res.Unreachable)
	}
	// Every node read: 0.
	if code, out, errOut := cli(t, "parts", "stuck", "--addr", addr, "--node", "n1"); code != 0 {
		t.Fatalf("parts stuck --node n1: exit %d %q %q", code, out, errOut)
	}
}

// sync status with a node down: its row says error, exit 1.
func TestReview2SyncStatusNodeErrorFails(t *testing.T) {
	nodes, p := migratedSync(t, "review2-pw")
	if code, out, errOut := cli(t, "sync", "status", "--config", p); code != 0 {
		t.Fatalf("sync status, every node up: exit %d %q %q", code, out, errOut)
	}
	nodes[1].Kill() // n2
	code, out, errOut := cli(t, "sync", "status", "--config", p)
	if code != 1 || !strings.Contains(out, "error: ") || !strings.Contains(errOut, "n2") {
		t.Fatalf("sync status with n2 down: exit %d\nstdout:\n%s\nstderr:\n%s\nwant 1, n2's error row, n2 named", code, out, errOut)
	}
	code, out, errOut = cli(t, "sync", "status", "--config", p, "--json")
	var st []pgsync.NodeStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("sync status --json stdout is not the JSON alone: %v\n%s", err, out)
	}
	if code != 1 || len(st) != 2 || st[1].Err == "" || !strings.Contains(errOut, "n2") {
		t.Fatalf("sync status --json with n2 down: exit %d, %+v, stderr %q; want 1 with n2's error", code, st, errOut)
	}
}

// topology show with a node down: its line says unreadable, exit 1.
func TestReview2TopologyShowUnreadableFails(t *testing.T) {
	srvs := redistest.StartN(t, 2, redistest.Options{})
	cfg := writeTopoConfig(t, "c.yaml", []string{srvs[0].Addr(), srvs[1].Addr()}, "n1", "n2")
	if code, out, errOut := cli(t, "topology", "show", "--config", cfg); code != 0 {
		t.Fatalf("topology show, every node up: exit %d %q %q", code, out, errOut)
	}
	srvs[1].Kill() // n2
	code, out, errOut := cli(t, "topology", "show", "--config", cfg)
	if code != 1 || !strings.Contains(out, "unreadable") || !strings.Contains(out, "configuration:") ||
		!strings.Contains(errOut, "n2") {
		t.Fatalf("topology show with n2 down: exit %d\nstdout:\n%s\nstderr:\n%s\nwant 1, the report printed, n2 named", code, out, errOut)
	}
}

// status through a proxy that serves the API but not /metrics: the lines
// from /metrics say unknown, the rest is printed, exit 1. --json (the
// nodes alone, from the API) stays 0.
func TestReview2StatusMetricsUnreadableFails(t *testing.T) {
	addr, _ := startService(t, "")
	base, err := baseURL(addr)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	px := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			http.Error(w, "not exposed here", http.StatusForbidden)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	defer px.Close()
	code, out, errOut := cli(t, "status", "--addr", px.URL)
	if code != 1 || !strings.Contains(out, "NAME") || !strings.Contains(out, "SERVICE: ready") ||
		!strings.Contains(out, "STUCK PARTS: unknown") || !strings.Contains(errOut, "/metrics") {
		t.Fatalf("status without /metrics: exit %d\nstdout:\n%s\nstderr:\n%s\nwant 1, the rest printed, /metrics named", code, out, errOut)
	}
	okJSON(t, px.URL, &v1.ListNodesResponse{}, "status")
	ok(t, addr, "status")
}
