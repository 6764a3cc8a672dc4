package bench

import (
	"encoding/json"
	"strings"
	"testing"
)

// The memory key reaches `make bench-quick`'s JSON line, its target, and
// the report's targets table with the breakdown by key family.
func TestMemorySummaryKey(t *testing.T) {
	m := &MemoryResult{Orders: 3000, Bytes: 3000*955 + 100, Pending: 3300,
		Families: []FamilyBytes{{Family: "part", Keys: 3300, Bytes: 3300 * 264}, {Family: "order", Keys: 3300, Bytes: 3300 * 258}}}
	r := &Results{Memory: m}
	s := Summarize(r)
	line, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(line), `"reserve_bytes_per_order_1item":955`) {
		t.Errorf("JSON line lacks the memory key: %s", line)
	}
	if met, ok := s.Targets["reserve_bytes_per_order_1item<=500"]; !ok || met {
		t.Errorf("target: %v present %v, want present and missed", met, ok)
	}
	table := TargetsTable(r, s)
	for _, want := range []string{"955 B", "part 264 B/order (3300 keys)", "order 258 B/order"} {
		if !strings.Contains(table, want) {
			t.Errorf("targets table lacks %q:\n%s", want, table)
		}
	}
	m.Layouts = []LayoutBytes{{Layout: "an index entry: one sorted set", Bytes: 126.4}}
	if md := Markdown(r); !strings.Contains(md, "## Record layouts, measured") || !strings.Contains(md, "| an index entry: one sorted set | 126 |") {
		t.Errorf("report lacks the layouts table:\n%s", md)
	}
	m.Bytes = 3000 * 480
	if s := Summarize(r); !s.Targets["reserve_bytes_per_order_1item<=500"] {
		t.Errorf("480 B per order: target not met")
	}
	// the median of the runs, each run shown
	m.Rounds = []int64{3000 * 510, 3000 * 498, 3000 * 505}
	if m.Bytes = medianBytes(m.Rounds); m.Bytes != 3000*505 {
		t.Errorf("median of 510, 498, 505 B per order: %d B", m.Bytes/3000)
	}
	if table := TargetsTable(r, Summarize(r)); !strings.Contains(table, "505 B (runs: 510, 498, 505;") ||
		!strings.Contains(table, "the median of 3 runs") {
		t.Errorf("targets table lacks the runs:\n%s", table)
	}
}
