package main

import (
	"strings"
	"testing"

	"github.com/shardis/shardis/topology"
)

// A run that only wrote lost topology records again says so, naming the
// nodes; it printed "already applied" alone.
func TestApplyReportNamesRepaired(t *testing.T) {
	for _, dry := range []bool{false, true} {
		var b strings.Builder
		writeApplyReport(&b, topology.Report{AlreadyApplied: true, Phase: topology.PhaseStable, ToEpoch: 3, Repaired: []string{"n2"}}, dry, 0)
		out := b.String()
		want := "wrote the lost topology record of n2 again at epoch 3"
		if dry {
			want = "dry run: would write the lost topology record of n2 again at epoch 3"
		}
		if !strings.Contains(out, want) || !strings.Contains(out, "topology already applied at epoch 3") {
			t.Errorf("dry run %v: report\n%s\nwant it to say %q and that the topology is applied", dry, out, want)
		}
	}
}
