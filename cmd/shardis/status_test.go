package main

import (
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
