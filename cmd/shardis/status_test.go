package main

import (
	"strings"
	"testing"

	"github.com/shardis/shardis/internal/redistest"
)

// `shardis status` of an instance whose configuration adds a node for a
// new route says what is pending; the instance at the applied topology
// says nothing more than its nodes.
func TestStatusShowsPendingTopology(t *testing.T) {
	t.Setenv(tokenEnv, "")
	nodes := redistest.StartN(t, 3, redistest.Options{})
	applied := startWith(t, nodes, map[string][]string{"clothes": {"n1", "n2"}}, "")
	deployed := startWith(t, nodes, map[string][]string{"clothes": {"n1", "n2"}, "x": {"n3"}}, "")
	want := "SERVICE: ready; pending topology change: config epoch differs: +n3 (route x)"
	if out := ok(t, deployed, "status"); !strings.Contains(out, want) {
		t.Fatalf("status of the deployed instance:\n%s\nwant a line %q", out, want)
	}
	if out := ok(t, applied, "status"); strings.Contains(out, "SERVICE:") {
		t.Fatalf("status of the instance at the applied topology:\n%s\nwant no SERVICE line", out)
	}
}
