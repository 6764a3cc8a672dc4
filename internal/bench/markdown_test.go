package bench

import (
	"strings"
	"testing"
	"time"
)

// TestMarkdownMarksQuotedFigures: the figures the floor misses quote from
// tests run apart (callgrind counts, script timings) are marked as such
// where they stand, and the header names those tests instead of saying
// that every figure comes from the run; a report that quotes none says
// that every figure does.
func TestMarkdownMarksQuotedFigures(t *testing.T) {
	report := func(shardis int64) string {
		ir := &InvResult{Variants: invTableOrder, Series: map[string]*Series{}}
		for _, v := range invTableOrder {
			n := int64(1000)
			if v == VarInv3 || v == VarHot1 {
				n = shardis
			}
			ir.Series[v] = &Series{Name: v, Samples: []Sample{{Ops: n, Elapsed: time.Second}}}
		}
		return Markdown(&Results{Inventory: ir})
	}
	md := report(500) // both floor targets missed
	head, _, _ := strings.Cut(md, "## Machine")
	for _, test := range []string{"TestLocalScriptInstructions", "TestFloorScriptInstructions", "TestTakeScriptInstructions",
		"TestStageScriptInstructions", "TestLocalScriptCost", "TestTakeColdScriptInstructions", "TestWorkloadInstructions"} {
		if !strings.Contains(head, "`"+test+"`") {
			t.Errorf("the header does not name %s:\n%s", test, head)
		}
	}
	if strings.Contains(head, "Every figure below comes from that run:") {
		t.Errorf("the header says every figure comes from the run:\n%s", head)
	}
	// each quoted figure follows a mark on its line
	for _, fig := range []string{"51,500", "102,900", "42,200", "12,100", "50 µs", "128,400", "29,600", "124,000", "96,700", "425,500", "368,800", "25,600"} {
		i := strings.Index(md, fig)
		if i < 0 {
			t.Errorf("the report does not quote %s", fig)
			continue
		}
		line := md[strings.LastIndex(md[:i], "\n")+1 : i]
		if !strings.Contains(line, "*measured apart by ") {
			t.Errorf("%s is quoted without a mark before it on its line", fig)
		}
	}
	md = report(1000) // no target missed: nothing quoted
	if head, _, _ := strings.Cut(md, "## Machine"); !strings.Contains(head, "Every figure below comes from that run:") || strings.Contains(md, "measured apart") {
		t.Errorf("a report that quotes nothing:\n%s", head)
	}
}
