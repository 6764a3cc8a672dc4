package main

import (
	"strings"
	"testing"

	"github.com/shardis/shardis/topology"
)

// TestWriteRetiredNamesCountersLeftBehind: an apply that brought a node
// forward prints the counters it took back and names each it left behind
// (node, key, why), which the operator deletes once settled. Both were in
// the logs only.
func TestWriteRetiredNamesCountersLeftBehind(t *testing.T) {
	var b strings.Builder
	writeRetired(&b, topology.Report{TakenBack: 2, LeftBehind: []topology.LeftCounter{
		{Node: "n3", Key: "inv:stock:c:s", Why: "units reserved"}}})
	out := b.String()
	for _, want := range []string{"counters taken back 2", "counter left behind: inv:stock:c:s on n3 (units reserved)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output %q lacks %q", out, want)
		}
	}
}
