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

// An apply that stopped migrating on a part set aside on a leaving node
// names the part, its node and reason, and the command that settles it;
// its error says it waits for an operator, not for time.
func TestApplyReportNamesThePartsSetAsideOnLeavingNodes(t *testing.T) {
	rep := topology.Report{FromEpoch: 1, ToEpoch: 2, Phase: topology.PhaseMigrating, Waiting: 2, Left: []string{"n3"},
		Moved: topology.Moved{SetAside: []topology.SetAsidePart{{Node: "n3", PartID: "o|tok|0", Reason: "its record is gone"}}}}
	var b strings.Builder
	writeApplyReport(&b, rep, false, 0)
	out := b.String()
	for _, want := range []string{"part set aside on leaving node n3: o|tok|0 (order unknown: its record is gone): its record is gone",
		"shardis parts settle --route R --sku S --qty N NODE PART_ID confirm|cancel", "the --from configuration"} {
		if !strings.Contains(out, want) {
			t.Errorf("report\n%s\nwant it to say %q", out, want)
		}
	}
	if err := unfinished(rep, false); err == nil || !strings.Contains(err.Error(), "1 parts set aside on leaving nodes") {
		t.Errorf("unfinished = %v; want it to name the parts set aside", err)
	}
}
